#!/usr/bin/env python3
"""campaign.py - a hostile-client campaign against `refusion serve`, over loopback.

Starts the server itself (so that a crash is seen and its RSS can be read),
then sends COUNT generated requests from THREADS clients: every request field
with right, wrong, extreme and non-UTF-8 values, unknown field names cut
around multi-byte characters, every endpoint and method, and the protocol's
corners (request lines without spaces or with NUL bytes, bad Content-Length,
chunked bodies, huge headers, HTTP/1.0, pipelining, bodies cut short, clients
that leave). Bounded in count and time (--max-seconds). Reports the answers
by status, crashes (the server exited), hangs (no answer within --timeout
while the server lived), 5xx answers to requests that were the client's
fault, and the server's RSS before, after and at a second round.

  python3 scripts/serve/campaign.py --bin build/refusion -m models/refusion-demo --count 100000
  python3 scripts/serve/campaign.py --bin build/refusion -m DIR --count 2000 --threads 4   # a short run

Exit status 1 on a crash, a hang or a 500. Loopback only (127.0.0.1).
"""
import argparse
import collections
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time

FIELDS = ["prompt", "messages", "max_tokens", "max_completion_tokens", "mode", "slot_size", "blocks",
          "serial_num_blocks", "slot_threshold", "token_threshold", "ar_verify", "lookahead", "jacobi", "rolling",
          "temperature", "top_k", "top_p", "seed", "steps", "stream", "stream_options", "stop", "n", "model",
          "user", "logprobs", "top_logprobs", "tools", "tool_choice", "response_format", "presence_penalty",
          "frequency_penalty", "logit_bias", "echo", "best_of", "suffix", "enable_thinking", "chat_template_kwargs"]
ODD_STRINGS = ["", "a", "é", "\u20ac" * 30, "\ud7ff", "x" * 5000, "<|im_start|>", "<|mask|>", "\n\r\t", "\\", "\u0000"]


def rnd_value(r):
    k = r.randrange(14)
    if k == 0: return r.randint(-3, 12)
    if k == 1: return r.choice([0, 1, 2, 4, 8, 31, 32, 33, 4096, 4097, 2**31 - 1, 2**31, 2**63 - 1, -2**63, 10**30])
    if k == 2: return r.choice([0.0, 0.5, 1.0, 1.5, -0.1, 1e308, -1e308, 1e-320])
    if k == 3: return r.choice([True, False, None])
    if k == 4: return r.choice(ODD_STRINGS)
    if k == 5: return r.choice(["refusion", "ar", "mdm", "both", "first", "correct", "off", "text", "none"])
    if k == 6: return [r.randint(-1, 1000) for _ in range(r.randint(0, 5))]
    if k == 7: return [r.choice(ODD_STRINGS) for _ in range(r.randint(0, 6))]
    if k == 8: return {"type": r.choice(["text", "json_object"]), "include_usage": r.choice([True, 1])}
    if k == 9: return {"enable_thinking": r.choice([True, False, 1])}
    if k == 10: return [{"role": r.choice(["user", "system", "assistant", "tool", "robot"]), "content": r.choice(ODD_STRINGS[:6])}]
    if k == 11: return [{"type": "text", "text": "hi"}, {"type": "image_url"}]
    if k == 12: return {}
    return []


def cheap(r, o):
    """mostly cheap generations: the campaign is about answers, not decoding time"""
    if r.random() < 0.95:
        o["max_tokens"] = r.randint(1, 8)
    return o


def json_body(r, chat):
    o = {}
    if r.random() < 0.9:
        if chat: o["messages"] = [{"role": "user", "content": r.choice(["Hi", "What is 2+2?", "é"])}]
        else: o["prompt"] = r.choice(["Hello", "x", "The model", [1, 2, 3], ["Hi"]])
    for _ in range(r.randint(0, 4)):
        o[r.choice(FIELDS)] = rnd_value(r)
    cheap(r, o)
    if r.random() < 0.1:  # an unknown field whose name is cut around a multi-byte character
        o["a" * r.randint(55, 70) + r.choice(["é", "\u20ac", "\U0001f600"])] = 1
    if r.random() < 0.05:
        o["stop"] = ["é" * r.randint(1, 40)]
    b = json.dumps(o, ensure_ascii=r.random() < 0.5).encode("utf-8", "surrogatepass")
    k = r.randrange(20)
    if k == 0: b = b[: r.randint(0, len(b))]  # cut JSON
    elif k == 1: b = b.replace(b"Hello", b"He\xff\xfello")  # invalid UTF-8
    elif k == 2: b = b"[" * 5000 + b"]" * 5000  # deep nesting
    elif k == 3: b = b'{"prompt": "x", "prompt": "y"}'
    elif k == 4: b = b"\x00" * r.randint(1, 64)
    return b


def http_request(r):
    """(bytes to send, client_fault, label)"""
    path = r.choice(["/v1/completions"] * 6 + ["/v1/chat/completions"] * 4 + ["/health", "/metrics", "/v1/models",
                    "/v1/models/x", "/v1/models/demo", "/nope", "/v1/completions/", "/%ff%fe", "/v1/models/%C3%A9"])
    method = r.choice(["POST"] * 8 + ["GET", "GET", "HEAD", "OPTIONS", "PUT", "DELETE", "PATCH"])
    body = json_body(r, "chat" in path) if method == "POST" else b""
    headers = [("Host", "127.0.0.1")]
    corner = r.randrange(40)
    if corner == 0: headers.append(("Content-Length", r.choice(["-1", "18446744073709551617", "1e3", " 5", "0x10", ""])))
    elif corner == 1: headers.append(("Transfer-Encoding", "chunked"))
    elif corner == 2: headers.append(("X-Big", "a" * r.choice([1000, 9000, 40000])))
    elif corner == 3: headers.append(("Authorization", "Bearer " + "k" * r.randint(0, 300)))
    elif corner == 4: headers.append(("Content-Type", "text/\xff".encode("latin-1").decode("latin-1")))
    elif corner == 5: headers += [("X-%d" % i, "v") for i in range(r.randint(50, 300))]
    elif corner == 6: headers.append(("Origin", "http://evil.example"))
    version = r.choice(["HTTP/1.1"] * 10 + ["HTTP/1.0", "HTTP/2.0", "HTTP/1.2", "HTTX/1.1"])
    if corner == 1 and method == "POST":
        payload = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if r.random() < 0.7 else b"zz\r\n" + body
    else:
        payload = body
    short = False  # the body is shorter than announced: the client then closes its side
    if method == "POST" and corner != 0 and corner != 1:
        short = r.random() < 0.05
        headers.append(("Content-Length", str(len(payload) + (r.randint(1, 10) if short else 0))))
    line = "%s %s %s" % (method, path, version)
    lk = r.randrange(60)
    if lk == 0: line = "GARBAGE"
    elif lk == 1: line = "GET /health\x00 HTTP/1.1"
    elif lk == 2: line = "GET " + "/a" * 5000 + " HTTP/1.1"
    elif lk == 3: line = "\x01\x02\xff garbage \x7f"
    elif lk == 4: line = "GET  /health  HTTP/1.1"
    elif lk == 5: line = "GET http://127.0.0.1/health HTTP/1.1"
    head = line + "\r\n" + "".join("%s: %s\r\n" % h for h in headers) + "\r\n"
    data = head.encode("latin-1", "replace") + payload
    if r.random() < 0.03:  # pipelined second request
        data += b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    leave = r.random() < 0.02  # a client that sends and leaves at once
    return data, leave, short, version


STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})")


def one(port, data, leave, timeout, short=False):
    """-> status (int), 'closed' (no answer, connection closed), 'hang', 'refused', 'left'"""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError:
        return "refused", b""
    try:
        s.settimeout(timeout)
        try:
            s.sendall(data)
        except OSError:
            pass
        if leave:
            return "left", b""
        if short:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:  # the server has closed it already
                pass
        got = b""
        t_end = time.monotonic() + timeout
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                return ("hang" if not got else int(STATUS.match(got).group(1)) if STATUS.match(got) else "hang"), got
            except OSError:
                break
            if not chunk:
                break
            got += chunk
            m = STATUS.match(got)
            # enough: a complete answer with a Content-Length, or an SSE stream that ended
            if m and b"\r\n\r\n" in got:
                hdr, _, rest = got.partition(b"\r\n\r\n")
                cl = re.search(rb"(?i)content-length: *(\d+)", hdr)
                if m.group(1) in (b"204", b"304") or data.startswith(b"HEAD "):  # no body follows
                    break
                if cl and len(rest) >= int(cl.group(1)):
                    break
                if b"data: [DONE]" in rest:
                    break
            if time.monotonic() > t_end:
                return "hang", got
        m = STATUS.match(got)
        return (int(m.group(1)) if m else "closed"), got
    finally:
        s.close()


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return -1
    return -1


def health_ok(port):
    st, _ = one(port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", False, 5)
    return st == 200


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="the refusion binary")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds for one answer before it is a hang")
    ap.add_argument("--max-seconds", type=float, default=3600.0, help="stop sending after this long")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the campaign (RSS after each round)")
    ap.add_argument("serve_args", nargs="*", help="extra `refusion serve` options (after --)")
    a = ap.parse_args()
    log = open(os.devnull, "w")
    cmd = [a.bin, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", "0", "-q", "--threads", "1",
           "--max-queue", "1000",
           # incomplete requests (the campaign sends some on purpose) are closed after 2 s idle
           "--timeout", "2", "--request-timeout", "5"] + a.serve_args
    srv = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=log, text=True)
    port = None
    t0 = time.monotonic()
    while port is None and time.monotonic() - t0 < 60:
        line = srv.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m: port = int(m.group(1))
    if port is None:
        sys.exit("campaign: the server did not start: " + " ".join(cmd))
    threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()  # drain its stderr
    for _ in range(5):  # warm: one generation per kind
        for b in (b'{"prompt":"Hello","max_tokens":8}', b'{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8}'):
            one(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b), False, 60)
    rss = [rss_kb(srv.pid)]
    counts = collections.Counter()
    five = collections.Counter()
    hangs = []
    slow = []  # answers that took over 2 s: what they were
    lock = threading.Lock()
    crashed = False
    t_start = time.monotonic()
    sent = 0
    for rnd in range(a.rounds):
        nxt = [0]

        def worker(k):
            nonlocal crashed
            r = random.Random(a.seed * 1000003 + rnd * 7919 + k)
            while True:
                with lock:
                    if nxt[0] >= a.count or crashed or time.monotonic() - t_start > a.max_seconds:
                        return
                    nxt[0] += 1
                data, leave, short, version = http_request(r)
                t_req = time.monotonic()
                st, got = one(port, data, leave, a.timeout, short)
                t_req = time.monotonic() - t_req
                if st == "hang" and srv.poll() is not None:
                    st = "crash"
                with lock:
                    counts[st] += 1
                    # 503: busy (the queue), 505: the answer HTTP has for an unknown version
                    if isinstance(st, int) and st >= 500 and st != 503 and not (st == 505 and version != "HTTP/1.1"
                                                                                 and version != "HTTP/1.0"):
                        five[(st, data[:120])] += 1
                    if t_req > 2 and len(slow) < 8:
                        slow.append((round(t_req, 1), st, data[:150]))
                    if st == "hang" and len(hangs) < 5:
                        hangs.append(data[:200])
                    if srv.poll() is not None:
                        crashed = True

        ths = [threading.Thread(target=worker, args=(k,)) for k in range(a.threads)]
        for t in ths: t.start()
        for t in ths: t.join()
        sent += nxt[0]
        time.sleep(1)
        rss.append(rss_kb(srv.pid))
    alive = srv.poll() is None and health_ok(port)
    srv.terminate()
    try:
        rc = srv.wait(60)
    except subprocess.TimeoutExpired:
        srv.kill()
        rc = "killed after 60 s"
    wall = time.monotonic() - t_start
    by = ", ".join("%s: %d" % (k, v) for k, v in sorted(counts.items(), key=lambda kv: (str(type(kv[0])), kv[0])))
    print("campaign: %d requests in %.0f s from %d clients (seed %d): %s" % (sent, wall, a.threads, a.seed, by))
    print("campaign: crashes %d, hangs %d, 5xx other than 503 (busy) and 505 (HTTP/2.0 ...): %d; server alive at the end: %s; exit after SIGTERM: %s"
          % (int(crashed or not alive), counts["hang"], sum(five.values()), "yes" if alive else "NO", rc))
    print("campaign: RSS %s MB (warm, then after each round)" % " -> ".join("%.1f" % (x / 1024) for x in rss))
    for (st, d), n in five.most_common(5):
        print("campaign: %d x %d for %r" % (n, st, d))
    for t, st, d in slow:
        print("campaign: slow (%.1f s, %s): %r" % (t, st, d))
    for h in hangs:
        print("campaign: hang: %r" % h)
    sys.exit(1 if crashed or not alive or counts["hang"] or five or rc != 0 else 0)


if __name__ == "__main__":
    main()
