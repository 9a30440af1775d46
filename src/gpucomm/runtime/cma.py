"""Cross-memory attach: copy straight out of (or into) a peer process's private memory (Linux
process_vm_readv / process_vm_writev, the single-copy path MPI libraries use for large
messages on one host).

It needs the permission to ptrace the peer (same user, and Yama's ptrace_scope <= 1 or
PR_SET_PTRACER); `probe` checks that before the runtime relies on it.
"""
from __future__ import annotations

import ctypes
import os

from ..errors import TransportError


class _IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_fns: dict = {}


def _fn(name: str):
    fn = _fns.get(name)
    if fn is None:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
        fn.argtypes = [ctypes.c_int, ctypes.POINTER(_IOVec), ctypes.c_ulong,
                       ctypes.POINTER(_IOVec), ctypes.c_ulong, ctypes.c_ulong]
        fn.restype = ctypes.c_ssize_t
        _fns[name] = fn
    return fn


def read(pid: int, remote_addr: int, local_addr: int, nbytes: int) -> None:
    """Copy `nbytes` from `remote_addr` in process `pid` to `local_addr` here."""
    _copy("process_vm_readv", "read", pid, remote_addr, local_addr, nbytes)


def write(pid: int, remote_addr: int, local_addr: int, nbytes: int) -> None:
    """Copy `nbytes` from `local_addr` here to `remote_addr` in process `pid` (the same
    permission as reading it)."""
    _copy("process_vm_writev", "write", pid, remote_addr, local_addr, nbytes)


def _copy(name, what, pid, remote_addr, local_addr, nbytes) -> None:
    fn = _fn(name)
    local, remote = _IOVec(local_addr, nbytes), _IOVec(remote_addr, nbytes)
    done = 0
    while done < nbytes:
        local.base, local.len = local_addr + done, nbytes - done
        remote.base, remote.len = remote_addr + done, nbytes - done
        got = fn(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if got <= 0:
            err = ctypes.get_errno()
            raise TransportError(f"cross-memory {what} of {nbytes} B from pid {pid} failed: "
                                 f"{os.strerror(err) if err else 'no progress'}")
        done += got


def probe(pid: int, addr: int, expect: bytes) -> bool:
    """Can this process read `expect` at `addr` in `pid`?"""
    if not hasattr(os, "sched_getaffinity"):  # not Linux
        return False
    buf = ctypes.create_string_buffer(len(expect))
    try:
        read(pid, addr, ctypes.addressof(buf), len(expect))
    except (TransportError, OSError, AttributeError):
        return False
    return buf.raw == expect
