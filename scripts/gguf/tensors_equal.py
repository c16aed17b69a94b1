#!/usr/bin/env python3
"""tensors_equal.py A.gguf B.gguf - the tensors of two GGUF files compared
by name: the same set of names, types and shapes, and the same bytes. Prints
one line per differing tensor (its name, the count of differing bytes) and
a summary; exit 0 when every tensor is byte-identical, 1 otherwise, 2 on a
file this reader cannot parse. Standard library only."""
import struct
import sys

# ggml type id: (weights per block, bytes per block)
BLOCKS = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
          10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 20: (32, 18),
          23: (256, 136)}
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.p)
        self.p += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.d[self.p:self.p + n]
        self.p += n
        return s.decode("utf-8", "replace")

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("I"), self.take("Q")
            return [self.value(et) for _ in range(n)]
        return self.take(SCALARS[t])


def tensor_infos(data, what="the data"):
    """the tensor infos of a GGUF file's bytes: [(name, shape, type, offset,
    where the type field is)], and where the tensor data begins"""
    r = Reader(data)
    if data[:4] != b"GGUF":
        raise ValueError(f"{what}: not a GGUF file")
    r.p = 4
    r.take("I")
    nt, nkv = r.take("Q"), r.take("Q")
    align = 32
    for _ in range(nkv):
        k, t = r.string(), r.take("I")
        v = r.value(t)
        if k == "general.alignment":
            align = v
    infos = []
    for _ in range(nt):
        name, nd = r.string(), r.take("I")
        ne = [r.take("Q") for _ in range(nd)]
        at = r.p
        infos.append((name, ne, r.take("I"), r.take("Q"), at))
    return infos, (r.p + align - 1) // align * align


def tensor_info(data, name):
    """(where the type field of tensor `name` is, its data's offset, where
    the tensor data begins)"""
    infos, base = tensor_infos(data)
    return next((at, off, base) for n, _, _, off, at in infos if n == name)


def tensors(path):
    data = open(path, "rb").read()
    infos, base = tensor_infos(data, path)
    offs = sorted(i[3] for i in infos) + [len(data) - base]
    out = {}
    for name, ne, ty, off, _ in infos:
        n_el = 1
        for d in ne:
            n_el *= d
        # the tensor's own bytes (ggml-common.h's block sizes); a type not
        # in the table: up to the next tensor (the alignment padding included)
        blk = BLOCKS.get(ty)
        end = off + n_el // blk[0] * blk[1] if blk else min(o for o in offs if o > off)
        out[name] = (tuple(ne), ty, data[base + off:base + end])
    return out


def main():
    try:
        a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
    except (ValueError, struct.error, KeyError, IndexError) as e:
        print(f"tensors_equal: {e}")
        return 2
    bad = 0
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            print(f"{name}: only in {'the first' if name in a else 'the second'} file")
            bad += 1
            continue
        (na, ta, da), (nb, tb, db) = a[name], b[name]
        if na != nb or ta != tb or len(da) != len(db):
            print(f"{name}: shape/type {na}/{ta} vs {nb}/{tb}")
            bad += 1
        elif da != db:
            diff = sum(1 for x, y in zip(da, db) if x != y)
            print(f"{name}: {diff} of {len(da)} bytes differ")
            bad += 1
    print(f"tensors_equal: {len(a)} tensors, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
