"""POSIX shared-memory segments: owner-only, unguessable names, removed as early as possible.

Segments are files under /dev/shm created with O_EXCL and mode 0600, named
`gpucomm-<session>-<random>` where <random> is 96 bits from `secrets`: no other user can open
them, and no one can guess a name to pre-create. A segment is unlinked as soon as every peer
has mapped it (the mapping outlives the name), so a rank killed later leaks nothing; the
launcher removes whatever its session left behind before that point.
"""
from __future__ import annotations

import mmap
import os
import secrets

from ..errors import ConfigError, TransportError
from .options import env_shm_session

SHM_DIR = "/dev/shm"
PREFIX = "gpucomm-"
NAME_BYTES = 64  # a name's field in the control block (shm_control.NAME_OFF, P2P_NAME_OFF)
RANDOM_HEX = 24  # 96 bits
MAX_TAG = NAME_BYTES - len(PREFIX) - 1 - RANDOM_HEX


def session_tag() -> str:
    """The name part that `gpucomm launch` sets so it can clean up after its ranks ("x" when
    nothing is set)."""
    tag = env_shm_session()
    if not tag:
        return "x"
    if not (tag.isascii() and tag.isalnum() and len(tag) <= MAX_TAG):
        raise ConfigError(f"GPUCOMM_SHM_SESSION {tag!r}: the tag in shared-memory segment names "
                          f"must be 1-{MAX_TAG} ASCII letters or digits")
    return tag


def new_name() -> str:
    return f"{PREFIX}{session_tag()}-{secrets.token_hex(RANDOM_HEX // 2)}"


class Segment:
    """One mapped segment. `Segment.create(nbytes)` or `Segment.attach(name)`."""

    def __init__(self, name: str, mm: mmap.mmap, owner: bool):
        self.name, self.mm, self.owner = name, mm, owner
        self.linked = owner

    @property
    def nbytes(self) -> int:
        return len(self.mm)

    @classmethod
    def create(cls, nbytes: int, name: str | None = None) -> "Segment":
        """A new segment; `name` (from `new_name`) when peers were told it beforehand."""
        if not os.path.isdir(SHM_DIR):
            raise TransportError(f"the shm transport needs {SHM_DIR} (Linux shared memory)")
        name = new_name() if name is None else name
        path = os.path.join(SHM_DIR, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.ftruncate(fd, max(nbytes, 1))
            mm = _map(fd, max(nbytes, 1))
        except BaseException:
            os.close(fd)
            _unlink(path)
            raise
        os.close(fd)
        return cls(name, mm, True)

    @classmethod
    def attach(cls, name: str) -> "Segment":
        if not name.startswith(PREFIX) or "/" in name:
            raise TransportError(f"refusing to map {name!r}: not a gpucomm segment name")
        path = os.path.join(SHM_DIR, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise TransportError(f"shared-memory segment {name} is gone (its rank exited or "
                                 f"was killed)") from None
        try:
            mm = _map(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        return cls(name, mm, False)

    def unlink(self) -> None:
        if self.owner and self.linked:
            _unlink(os.path.join(SHM_DIR, self.name))
            self.linked = False

    def close(self) -> None:
        self.unlink()
        try:
            self.mm.close()
        except BufferError:
            pass  # numpy views still alive; the mapping goes when they do


def unlink_name(name: str) -> None:
    """Remove a segment by name (a dead peer's), ignoring one already gone."""
    if name.startswith(PREFIX) and "/" not in name:
        _unlink(os.path.join(SHM_DIR, name))


def leftovers(session: str | None = None) -> list[str]:
    """Names of gpucomm segments in /dev/shm (of one launcher session if given)."""
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return []
    want = PREFIX + (f"{session}-" if session else "")
    return sorted(n for n in names if n.startswith(want))


def _map(fd: int, nbytes: int) -> mmap.mmap:
    # MAP_POPULATE faults the pages in now, not inside the first timed collective.
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    return mmap.mmap(fd, nbytes, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
