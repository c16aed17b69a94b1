#!/usr/bin/env python3
"""slow_senders.py - slow-sender (slowloris) attack on a refusion server over
loopback, with /health probed throughout.

Opens ADDRESSES x PER_ADDRESS connections from 127.0.0.2, 127.0.0.3, ...
(each address is a client of its own for the server's per-client limit),
each sending a request header one byte every INTERVAL seconds, for DURATION
seconds; meanwhile GET /health from 127.0.0.1 every PROBE seconds must answer
200 within LIMIT seconds. Prints one summary line; exit status 1 when a probe
failed or was late. Loopback only: the target host is always 127.0.0.1.

  python3 scripts/serve/slow_senders.py --port 8080                  # 300 connections for 60 s
  python3 scripts/serve/slow_senders.py --port 8080 --duration 4 --interval 1   # a short run
"""
import argparse
import selectors
import socket
import sys
import time

HEADER = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nX-Slow: " + b"a" * 4000


def probe(port, limit):
    """One GET /health on a fresh connection: (ok, seconds)."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=limit, source_address=("127.0.0.1", 0)) as s:
            s.settimeout(limit)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            ok = data.startswith(b"HTTP/1.1 200")
    except OSError:
        ok = False
    return ok, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--addresses", type=int, default=20, help="source addresses 127.0.0.2 ...")
    ap.add_argument("--per-address", type=int, default=15, help="connections from each address")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between the bytes of a connection")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds the attack lasts")
    ap.add_argument("--probe", type=float, default=0.5, help="seconds between /health probes")
    ap.add_argument("--limit", type=float, default=1.0, help="a probe must answer within this many seconds")
    a = ap.parse_args()
    if not 1 <= a.addresses <= 250:
        sys.exit("slow_senders: --addresses must be in [1, 250]")
    conns = []  # [socket, bytes sent]
    refused = 0
    for i in range(a.addresses):
        for _ in range(a.per_address):
            try:
                s = socket.create_connection(("127.0.0.1", a.port), timeout=2, source_address=("127.0.0.%d" % (i + 2), 0))
                s.setblocking(False)
                conns.append([s, 0])
            except OSError:
                refused += 1
    t_end = time.monotonic() + a.duration
    next_byte = time.monotonic()
    next_probe = time.monotonic()
    worst, probes, bad = 0.0, 0, 0
    closed_by_server = 0
    sel = selectors.DefaultSelector()
    while time.monotonic() < t_end:
        now = time.monotonic()
        if now >= next_byte:
            for c in conns:
                if c[0] is None:
                    continue
                try:
                    c[0].send(HEADER[c[1] % len(HEADER):c[1] % len(HEADER) + 1])
                    c[1] += 1
                except OSError:  # closed by the server (request deadline, limits)
                    c[0].close()
                    c[0] = None
                    closed_by_server += 1
            next_byte = now + a.interval
        if now >= next_probe:
            ok, dt = probe(a.port, a.limit)
            probes += 1
            worst = max(worst, dt)
            if not ok or dt > a.limit:
                bad += 1
            next_probe = now + a.probe
        time.sleep(0.01)
    still_open = sum(1 for c in conns if c[0] is not None)
    for c in conns:
        if c[0] is not None:
            c[0].close()
    sel.close()
    print("slow_senders: %d connections from %d addresses (%d refused at connect), %.0f s, one byte / %.1f s: "
          "%d /health probes, %d failed or over %.1f s, worst %.3f s; %d closed by the server, %d still open"
          % (len(conns) + refused, a.addresses, refused, a.duration, a.interval, probes, bad, a.limit, worst,
             closed_by_server, still_open))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
