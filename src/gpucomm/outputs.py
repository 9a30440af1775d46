"""One way to write what gpucomm hands back as a file: `write_text`, all at once.

A command's output file (tune's rules, calibrate's profile, sim's -J results, a report, a
trace, an exported topology) is written to a temporary file beside it and renamed over it,
so no reader sees half a file and a failure (a full disk, an interrupt) leaves what was there.
The counterpart of `inputs`; like it, a leaf module that imports nothing from gpucomm but the
errors.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import stat

from .errors import ConfigError


def write_text(path, text: str, what: str = "") -> None:
    """Write `text` (UTF-8) to `path` all at once: a temporary file beside it, renamed over
    it, so no reader sees half a file and a failure leaves what was there. The file gets the
    mode open(path, "w") gives: 0666 less the umask, or the old file's; a symbolic link's file
    is replaced, not the link. A device or pipe (/dev/stdout), or a file in a folder where no
    new file may be made, is written in place. ConfigError (one line, naming `what` the file
    is, e.g. "trace") if that fails."""
    path = str(path)
    said = f"{what} {path!r}" if what else repr(path)
    try:
        old = os.stat(path)
    except OSError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode):
        return _write_in_place(path, text, said)  # nothing to rename over a device
    target = os.path.realpath(path)
    try:
        fd, tmp = _create_beside(target)
    except OSError as e:
        if isinstance(e, PermissionError) and old is not None:
            return _write_in_place(path, text, said)  # a writable file in a folder that is not
        raise ConfigError(f"cannot write {said}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            if old is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode))
            f.write(text)
        os.replace(tmp, target)
    except BaseException as e:  # an interrupt too: no temporary file is left behind
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise ConfigError(f"cannot write {said}: {e.strerror}") from None
        raise


def _write_in_place(path: str, text: str, said: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise ConfigError(f"cannot write {said}: {e.strerror}") from None


def _create_beside(target: str) -> tuple[int, str]:
    """A new file in `target`'s folder, created as open(..., "w") creates one (mode 0666 less
    the umask; tempfile.mkstemp would give 0600, unreadable by the cluster's other users)."""
    folder = os.path.dirname(target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = os.path.join(folder, f".gpucomm-{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
