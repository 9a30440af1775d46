"""Rendezvous over TCP: rank 0 listens on MASTER_ADDR:MASTER_PORT, the others connect.

Only small JSON messages travel here (segment names, pids, host names) — never data. Each
`allgather(obj)` round returns every rank's object in rank order; every socket operation has a
deadline, so a rank that never shows up is reported by number instead of hanging the job.

The port is open to every local user, so rank 0 admits a connection only once its hello
arrives (within `HELLO_S`; connections are read side by side, so none can hold up another),
parses, and carries the job's token: `gpucomm launch` gives its ranks a random one
(GPUCOMM_RDZV_TOKEN, readable only by the same user, never printed); under torchrun there is
none, as with torchrun's own store. Anything else is closed and the wait goes on, so a
stray or hostile connection can neither stall nor end the job; the timeout message counts
what was turned away.
"""
from __future__ import annotations

import hmac
import json
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

from ..errors import CommTimeout, TransportError
from .options import env_rdzv_token

HELLO_S = 5.0  # a connecting rank sends its hello at once; a silent connection is dropped
HELLO_MAX = 4096  # bytes: a hello is one small JSON line


class Rendezvous:
    def __init__(self, rank: int, world: int, addr: str, port: int, timeout: float,
                 token: str | None = None):
        self.rank, self.world, self.timeout = rank, world, timeout
        self.addr, self.port = addr, port
        self.token = env_rdzv_token() if token is None else token
        self.rejected: list[str] = []  # why connections were turned away (rank 0)
        self._peers: dict[int, socket.socket] = {}  # rank 0: connection of every other rank
        self._sock: socket.socket | None = None  # ranks > 0: connection to rank 0
        self._buf: dict[socket.socket, bytes] = {}
        deadline = time.monotonic() + timeout
        if world == 1:
            return
        self._where = _resolve(rank, addr, port, deadline, timeout)
        if rank == 0:
            self._serve(deadline)
        else:
            self._connect(deadline)

    # --- set-up -------------------------------------------------------------------------
    def _serve(self, deadline: float) -> None:
        lobby = _Lobby(self._listen(), self.rejected, self._check_hello)
        try:
            while len(self._peers) < self.world - 1:
                now = time.monotonic()
                if now >= deadline:
                    raise self._missing()
                lobby.expire(now)
                for conn, hello, rest in lobby.hellos(deadline, now):
                    self._admit(conn, hello, rest)
        finally:
            lobby.close()

    def _listen(self) -> socket.socket:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            srv.bind(self._where)
        except OSError as e:
            srv.close()
            raise TransportError(f"rank 0 cannot listen on {self.addr}:{self.port} "
                                 f"(MASTER_ADDR/MASTER_PORT): {e.strerror}") from None
        srv.listen(self.world)
        return srv

    def _missing(self) -> CommTimeout:
        missing = sorted(set(range(1, self.world)) - set(self._peers))
        turned = f"; turned away {len(self.rejected)} connection(s): " \
            f"{'; '.join(sorted(set(self.rejected)))}" if self.rejected else ""
        return CommTimeout(f"rendezvous timed out after {self.timeout:g}s: rank(s) "
                           f"{_ranks(missing)} never connected to "
                           f"{self.addr}:{self.port}{turned}")

    def _admit(self, conn: socket.socket, hello: dict[str, Any], rest: bytes) -> None:
        """A connection with the job's token: it must be a rank not seen yet."""
        conn.setblocking(True)
        r = hello.get("rank")
        if hello.get("world") != self.world or not isinstance(r, int) or \
                not 0 < r < self.world or r in self._peers:
            conn.close()
            shown = {k: v for k, v in hello.items() if k != "token"}
            raise TransportError(
                f"rendezvous: bad hello {shown!r} (WORLD_SIZE is {self.world}; "
                f"ranks 1..{self.world - 1} connect once)")
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf[conn] = rest
        self._peers[r] = conn

    def _connect(self, deadline: float) -> None:
        while True:
            try:
                s = socket.create_connection(self._where,
                                             timeout=max(0.05, deadline - time.monotonic()))
                break
            except OSError:
                if time.monotonic() >= deadline:
                    raise CommTimeout(
                        f"rank {self.rank}: rendezvous timed out after {self.timeout:g}s: "
                        f"nothing listens on {self.addr}:{self.port} (is rank 0 running? "
                        f"MASTER_ADDR/PORT)") from None
                time.sleep(0.02)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = s
        self._send(s, {"rank": self.rank, "world": self.world, "token": self.token}, "rank 0")

    def _check_hello(self, line: bytes) -> tuple[dict[str, Any] | None, str]:
        """A connecting rank's hello, or why the connection is not one of ours."""
        try:
            hello = json.loads(line)
        except ValueError:
            return None, "not a hello"
        if not isinstance(hello, dict):
            return None, "not a hello"
        if not hmac.compare_digest(str(hello.get("token", "")).encode(), self.token.encode()):
            return None, "wrong job token"
        return hello, ""

    # --- rounds -------------------------------------------------------------------------
    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order."""
        if self.world == 1:
            return [obj]
        deadline = time.monotonic() + self.timeout
        if self.rank == 0:
            got = {0: obj}
            for r, conn in sorted(self._peers.items()):
                got[r] = self._recv(conn, deadline, f"rank {r}")
            everything = [got[r] for r in range(self.world)]
            for r, conn in sorted(self._peers.items()):
                self._send(conn, everything, f"rank {r}")
            return everything
        if self._sock is None:
            raise TransportError(f"rank {self.rank}: the rendezvous is closed")
        self._send(self._sock, obj, "rank 0")
        return self._recv(self._sock, deadline, "rank 0")

    def close(self) -> None:
        for s in [*self._peers.values(), self._sock]:
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        self._peers, self._sock = {}, None

    # --- framing: one JSON document per line --------------------------------------------
    def _send(self, sock: socket.socket, obj: Any, who: str) -> None:
        try:
            sock.sendall(json.dumps(obj).encode() + b"\n")
        except OSError as e:  # reset, broken pipe: the peer went away
            raise TransportError(f"rank {self.rank}: rendezvous connection to {who} failed: "
                                 f"{e.strerror or e} (it exited or was killed)") from None

    def _recv(self, sock: socket.socket, deadline: float, who: str) -> Any:
        buf = self._buf.get(sock, b"")
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CommTimeout(f"rank {self.rank}: rendezvous timed out after "
                                  f"{self.timeout:g}s waiting for {who}")
            sock.settimeout(left)
            try:
                data = sock.recv(65536)
            except socket.timeout:
                continue
            except OSError as e:
                raise TransportError(f"rank {self.rank}: rendezvous connection to {who} "
                                     f"failed: {e}") from None
            if not data:
                raise TransportError(f"rank {self.rank}: {who} closed the rendezvous "
                                     f"connection (it exited or was killed)")
            buf += data
        line, rest = buf.split(b"\n", 1)
        self._buf[sock] = rest
        try:
            return json.loads(line)
        except ValueError:
            raise TransportError(f"rank {self.rank}: {who} sent a malformed rendezvous "
                                 f"message") from None


class _Lobby:
    """Rank 0's listening socket and the connections whose hello has not arrived yet: each is
    read without blocking, so a silent or slow one cannot hold up the others, and is dropped
    (the reason kept in `rejected`) when its hello is late, oversized or not the job's."""

    def __init__(self, srv: socket.socket, rejected: list[str],
                 check: Callable[[bytes], tuple[dict[str, Any] | None, str]]):
        self.srv, self.rejected, self.check = srv, rejected, check
        self.sel = selectors.DefaultSelector()
        self.sel.register(srv, selectors.EVENT_READ)
        self.pending: dict[socket.socket, tuple[bytes, float]] = {}  # -> (bytes so far, until)

    def drop(self, conn: socket.socket, why: str) -> None:
        self.sel.unregister(conn)
        del self.pending[conn]
        conn.close()
        self.rejected.append(why)

    def expire(self, now: float) -> None:
        for conn, (_, until) in list(self.pending.items()):
            if now >= until:
                self.drop(conn, "no hello in time")

    def hellos(self, deadline: float,
               now: float) -> Iterator[tuple[socket.socket, dict[str, Any], bytes]]:
        """Waits until the next event; yields (connection, hello, bytes after it) for every
        connection whose valid hello is complete (it leaves the lobby)."""
        wake = min([deadline, *(until for _, until in self.pending.values())])
        for key, _ in self.sel.select(timeout=max(0.0, wake - now)):
            if key.fileobj is self.srv:
                self._accept()
                continue
            conn = cast(socket.socket, key.fileobj)  # only sockets are registered
            got = self._read(conn)
            if got is not None:
                self.sel.unregister(conn)
                del self.pending[conn]
                yield (conn, *got)

    def _accept(self) -> None:
        try:
            conn, _ = self.srv.accept()
        except OSError:
            return
        conn.setblocking(False)
        self.pending[conn] = (b"", time.monotonic() + HELLO_S)
        self.sel.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket) -> tuple[dict[str, Any], bytes] | None:
        try:
            data = conn.recv(HELLO_MAX)
        except BlockingIOError:
            return None
        except OSError:
            self.drop(conn, "connection error")
            return None
        if not data:
            self.drop(conn, "closed before its hello")
            return None
        buf, until = self.pending[conn]
        buf += data
        self.pending[conn] = (buf, until)
        if b"\n" not in buf:
            if len(buf) > HELLO_MAX:
                self.drop(conn, "oversized hello")
            return None
        line, rest = buf.split(b"\n", 1)
        hello, why = self.check(line)
        if hello is None:
            self.drop(conn, why)
            return None
        return hello, rest

    def close(self) -> None:
        for conn in self.pending:
            conn.close()
        self.sel.close()
        self.srv.close()


def _resolve(rank: int, addr: str, port: int, deadline: float,
             timeout: float) -> tuple[str, int]:
    """MASTER_ADDR:MASTER_PORT as a socket address, looked up once and within the deadline
    (getaddrinfo itself has no timeout, so it runs on a helper thread)."""
    found: dict[str, Any] = {}

    def look() -> None:
        try:
            found["addr"] = socket.getaddrinfo(addr, port, socket.AF_INET,
                                               socket.SOCK_STREAM)[0][4]
        except (OSError, UnicodeError, OverflowError) as e:
            found["error"] = e

    helper = threading.Thread(target=look, daemon=True, name="gpucomm-resolve")
    helper.start()
    helper.join(max(0.0, deadline - time.monotonic()))
    if helper.is_alive():
        raise CommTimeout(f"rank {rank}: looking up MASTER_ADDR {addr!r} took longer than the "
                          f"{timeout:g}s timeout")
    if "error" in found:
        e = found["error"]
        raise TransportError(f"rank {rank}: MASTER_ADDR {addr!r} (port {port}) does not "
                             f"resolve to an IPv4 address: {getattr(e, 'strerror', None) or e}")
    return found["addr"]


def _ranks(rs: list[int]) -> str:
    return ", ".join(str(r) for r in rs)
