"""The launcher's watchdog: ranks die with their launcher, even when it is SIGKILLed.

`gpucomm launch` starts this file (`python -S -I reaper.py SESSION`, the standard library
only, in a session of its own) with a pipe on its stdin, and writes each rank's process group
to it. A launcher that ends normally writes `done` first. If the pipe closes without `done`,
the launcher died without cleaning up (SIGKILL, the OOM killer): the reaper sends SIGTERM to
every rank's process group (the rank and whatever it started), SIGKILL after a grace period,
and removes the shared-memory segments the launch's session left in /dev/shm.

Ranks also ask the kernel for SIGTERM when the launcher dies (PR_SET_PDEATHSIG, see
`launch.dies_with_parent`), so a rank goes even if this process was killed too.
"""
import os
import signal
import sys
import time

GRACE_S = 3.0


def _read_groups() -> list[int] | None:
    """The process groups the launcher reported, or None once it said `done`."""
    groups: list[int] = []
    buf = b""
    while True:
        try:
            chunk = os.read(0, 4096)
        except InterruptedError:
            continue
        if not chunk:
            return groups
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if line == b"done":
                return None
            if line.strip().isdigit():
                groups.append(int(line))


def group_alive(group: int) -> bool:
    """Is any process of this process group still there? (the launcher asks it too)"""
    try:
        os.killpg(group, 0)
        return True
    except OSError:
        return False


def signal_group(group: int, sig) -> None:
    """Send `sig` to a process group that may be gone already."""
    try:
        os.killpg(group, sig)
    except OSError:
        pass


def _kill(groups: list[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for g in groups:
            signal_group(g, sig)
        end = time.monotonic() + GRACE_S
        while any(group_alive(g) for g in groups) and time.monotonic() < end:
            time.sleep(0.05)


def _unlink_session(session: str) -> None:
    prefix = f"gpucomm-{session}-"
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return
    for name in names:
        if session and name.startswith(prefix):
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGHUP):   # the launcher's terminal is not ours
        signal.signal(sig, signal.SIG_IGN)
    groups = _read_groups()
    if groups is None:
        return 0
    _kill(groups)
    _unlink_session(argv[1] if len(argv) > 1 else "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
