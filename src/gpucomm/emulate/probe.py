"""Measure what a link gives: TCP ping-pong latency and bulk goodput (standard library only).

Run inside the namespaces by the harness:

    python3 -m gpucomm.emulate.probe serve --port 5201
    python3 -m gpucomm.emulate.probe measure --host 198.18.0.2 --port 5201

`measure` prints one JSON line: {"latency_s": one-way (median RTT / 2), "rtt_p90_s",
"bandwidth_Bps": goodput of a bulk transfer, "nbytes", "pings"}. Each connection is bounded in
count and time; the server serves a fixed number of connections and exits.
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import sys
import time

CHUNK = 1 << 20


def _recv_exact(s: socket.socket, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        b = s.recv(min(n - got, CHUNK))
        if not b:
            raise ConnectionError("peer closed the connection")
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def serve(port: int, connections: int, timeout: float) -> None:
    with socket.socket() as ls:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("0.0.0.0", port))
        ls.listen(4)
        ls.settimeout(timeout)
        for _ in range(connections):
            conn, _ = ls.accept()
            with conn:
                conn.settimeout(timeout)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                mode, n = struct.unpack("!cQ", _recv_exact(conn, 9))
                if mode == b"p":  # n pings of one byte
                    for _ in range(n):
                        conn.sendall(_recv_exact(conn, 1))
                else:  # n bytes in bulk, then a one-byte acknowledgement
                    left = n
                    while left:
                        b = conn.recv(min(left, CHUNK))
                        if not b:
                            raise ConnectionError("peer closed during the bulk transfer")
                        left -= len(b)
                    conn.sendall(b"k")


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    while True:
        try:
            s = socket.create_connection((host, port), timeout=max(deadline - time.monotonic(),
                                                                   0.1))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def measure(host: str, port: int, pings: int, nbytes: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    with _connect(host, port, deadline) as s:
        s.sendall(struct.pack("!cQ", b"p", pings))
        rtts = []
        for _ in range(pings):
            t0 = time.perf_counter()
            s.sendall(b"x")
            _recv_exact(s, 1)
            rtts.append(time.perf_counter() - t0)
    with _connect(host, port, deadline) as s:
        s.sendall(struct.pack("!cQ", b"b", nbytes))
        payload = memoryview(bytearray(CHUNK))
        t0 = time.perf_counter()
        left = nbytes
        while left:
            k = min(left, CHUNK)
            s.sendall(payload[:k])
            left -= k
        _recv_exact(s, 1)
        secs = time.perf_counter() - t0
    rtts = rtts[len(rtts) // 10:]  # drop the warm-up
    rtts.sort()
    return {"latency_s": statistics.median(rtts) / 2, "rtt_p90_s": rtts[int(len(rtts) * 0.9)],
            "bandwidth_Bps": nbytes / secs, "nbytes": nbytes, "pings": pings}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m gpucomm.emulate.probe")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--connections", type=int, default=2)
    s.add_argument("--timeout", type=float, default=30.0)
    m = sub.add_parser("measure")
    m.add_argument("--host", required=True)
    m.add_argument("--port", type=int, required=True)
    m.add_argument("--pings", type=int, default=1000)
    m.add_argument("--nbytes", type=int, default=32 << 20)
    m.add_argument("--timeout", type=float, default=30.0)
    a = ap.parse_args(argv)
    if a.cmd == "serve":
        serve(a.port, a.connections, a.timeout)
    else:
        print(json.dumps(measure(a.host, a.port, a.pings, a.nbytes, a.timeout)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
