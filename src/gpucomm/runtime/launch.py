"""Start N local ranks like torchrun: the same environment, output prefixed by rank, and if one
rank fails the others are stopped and the launcher exits non-zero.

    launch(["python3", "train.py"], nranks=4)   # -> exit status (0 when every rank succeeded)
"""
from __future__ import annotations

import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from ..errors import ConfigError
from .reaper import group_alive, signal_group
from .segment import leftovers, unlink_name
from .signals import trapped

MAX_LOCAL_RANKS = 64  # the shm transport's limit (shm.MAX_RANKS)


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP arrived; `status` is the exit status it stands for."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.status = 128 + signum


def signals_interrupt():
    """While the block runs (main thread only), SIGTERM and SIGHUP raise `Interrupted` as
    SIGINT raises KeyboardInterrupt, so whoever started processes stops them and cleans up
    instead of dying and leaving them re-parented to init."""
    return trapped(Interrupted)


def check_launch(cmd: list, nranks, timeout=None) -> None:
    """ConfigError for what `launch` cannot run, before any rank starts."""
    if isinstance(nranks, bool) or not isinstance(nranks, int) or \
            not 1 <= nranks <= MAX_LOCAL_RANKS:
        raise ConfigError(f"--nproc must be an integer in 1..{MAX_LOCAL_RANKS} (the shm "
                          f"transport's rank limit), got {nranks!r}")
    if timeout is not None and not (isinstance(timeout, (int, float)) and
                                    math.isfinite(timeout) and timeout > 0):
        raise ConfigError(f"--timeout must be a finite number of seconds > 0, got {timeout!r}")
    if not cmd:
        raise ConfigError("nothing to launch: give a script or command")
    prog = cmd[0]
    found = shutil.which(prog) if os.sep not in prog else \
        (prog if os.path.isfile(prog) and os.access(prog, os.X_OK) else None)
    if found is None:
        why = "is not an executable file" if os.path.exists(prog) else "does not exist"
        if os.sep not in prog:
            why = "is not on PATH"
        raise ConfigError(f"cannot run {prog!r}: it {why}")


def program(target: str, args: list, as_program: bool = False) -> list:
    """The command for `gpucomm launch TARGET ARGS`: a .py file (or an existing file that is
    not executable) runs under this Python; anything else is a program, as with mpirun."""
    if not as_program and (target.endswith(".py") or
                           (os.path.isfile(target) and not os.access(target, os.X_OK))):
        if not os.path.isfile(target):
            raise ConfigError(f"script {target!r} does not exist")
        return [sys.executable, target, *args]
    return [target, *args]


def free_port(addr: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def rank_env(rank: int, nranks: int, port: int, session: str, base=None,
             token: str = "") -> dict:
    """torchrun's variables for rank `rank`, plus the launch's session tag (in shared-memory
    names, so not secret) and its rendezvous token (a secret; see `rendezvous`)."""
    env = dict(os.environ if base is None else base)
    env.update(RANK=str(rank), WORLD_SIZE=str(nranks), LOCAL_RANK=str(rank),
               LOCAL_WORLD_SIZE=str(nranks), GROUP_RANK="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), GPUCOMM_SHM_SESSION=session, PYTHONUNBUFFERED="1",
               GPUCOMM_RDZV_TOKEN=token)
    return env


def launch(cmd: list, nranks: int, *, prefix: bool = True, env=None, grace_s: float = 3.0,
           out=None, timeout: float | None = None, bind: bool = True) -> int:
    """Run `cmd` as ranks 0..N-1; returns 0, or the exit status of the first rank that failed.

    Output lines are written to `out` (default stdout) as "[rank k] line". A rank killed by a
    signal counts as failed (status 128+signal). With `bind` and no more ranks than cores,
    rank k is pinned to the k-th core (as `mpirun --bind-to core`), so two ranks never take
    turns on one core while the other core serves something else. After every run, the
    shared-memory segments the ranks left (named with this launch's session tag) are removed.
    """
    check_launch(cmd, nranks, timeout)
    out = out if out is not None else sys.stdout
    session, token = secrets.token_hex(6), secrets.token_hex(16)
    port = free_port()
    lock = threading.Lock()
    procs, pumps = [], []
    reaper = None
    try:
        with signals_interrupt():
            reaper = Reaper(session)
            cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
            pin = bind and 1 < nranks <= len(cores)
            for r in range(nranks):
                try:
                    p = subprocess.Popen(cmd, env=rank_env(r, nranks, port, session, env, token),
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         start_new_session=True,
                                         preexec_fn=dies_with_parent(cores[r] if pin else None))
                except OSError as e:
                    raise ConfigError(f"cannot start rank {r} ({cmd[0]!r}): "
                                      f"{e.strerror or e}") from None
                procs.append(p)
                reaper.watch(p.pid)
                t = threading.Thread(target=_pump, args=(p.stdout, r, prefix, out, lock),
                                     daemon=True)
                t.start()
                pumps.append(t)
            status = _watch(procs, grace_s, timeout)
    except KeyboardInterrupt as e:  # SIGINT, or SIGTERM/SIGHUP via signals_interrupt
        _stop_quietly(procs, grace_s)
        status = getattr(e, "status", 130)
    finally:
        _stop(procs, grace_s)
        for t in pumps:
            t.join(timeout=2)
        for name in leftovers(session):
            unlink_name(name)
        if reaper is not None:
            reaper.done()
    return status


class Reaper:
    """The watchdog process of one launch (runtime/reaper.py): told each rank's process group,
    it stops them all and removes the session's segments if this launcher dies without
    calling `done()` (SIGKILL cannot be trapped, but a closed pipe can be seen)."""

    def __init__(self, session: str):
        import gpucomm.runtime.reaper as code
        rfd, self.wfd = os.pipe()
        try:
            self.proc = subprocess.Popen([sys.executable, "-S", "-I", code.__file__, session],
                                         stdin=rfd, stdout=subprocess.DEVNULL,
                                         start_new_session=True)
        finally:
            os.close(rfd)

    def watch(self, group: int) -> None:
        os.write(self.wfd, f"{group}\n".encode())

    def done(self) -> None:
        try:
            os.write(self.wfd, b"done\n")
        except OSError:
            pass
        os.close(self.wfd)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


PR_SET_PDEATHSIG = 1   # <linux/prctl.h>


def dies_with_parent(core: int | None = None):
    """A preexec_fn for a child that must not outlive this process (a rank, or bench's
    launcher): between fork and exec it asks the kernel for SIGTERM when this process dies
    (PR_SET_PDEATHSIG; if it already died, it goes now), then binds to `core` if given."""
    parent = os.getpid()
    libc = _libc()

    def setup():
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != parent:   # the launcher died before prctl took effect
                os.kill(os.getpid(), signal.SIGKILL)
        if core is not None:
            try:
                os.sched_setaffinity(0, {core})
            except OSError:
                pass  # binding is an optimisation, never a reason to fail
    return setup


def _libc():
    """libc for prctl on Linux, else None (no parent-death signal; the reaper still works)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _stop_quietly(procs, grace_s) -> None:
    """`_stop`, shielded from a second signal (a user pressing ^C twice, or TERM then HUP)."""
    old = {sig: signal.signal(sig, signal.SIG_IGN)
           for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)} \
        if threading.current_thread() is threading.main_thread() else {}
    try:
        _stop(procs, grace_s)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _watch(procs, grace_s, timeout) -> int:
    """Wait for all ranks; on the first failure stop the rest and return its status."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        codes = [p.poll() for p in procs]
        bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            r, c = bad[0]
            status = 128 - c if c < 0 else c
            how = f"was killed by signal {-c}" if c < 0 else f"exited with status {c}"
            others = [q for q, cc in enumerate(codes) if cc is None]
            print(f"gpucomm launch: rank {r} {how}" + (
                f"; stopping rank(s) {', '.join(map(str, others))}" if others else ""),
                file=sys.stderr, flush=True)
            _stop(procs, grace_s)
            return status
        if all(c == 0 for c in codes):
            return 0
        if deadline is not None and time.monotonic() > deadline:
            print(f"gpucomm launch: timed out after {timeout:g}s; stopping every rank",
                  file=sys.stderr, flush=True)
            _stop(procs, grace_s)
            return 124
        time.sleep(0.01)


def _stop(procs, grace_s) -> None:
    """Stop every rank and whatever each started (its process group: a rank that already
    exited may have left children), SIGTERM first, SIGKILL after `grace_s`."""
    live = [p for p in procs if p.poll() is None]
    for p in procs:
        _signal(p, signal.SIGTERM)
    end = time.monotonic() + grace_s
    for p in live:
        try:
            p.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(p, signal.SIGKILL)
            p.wait()
    for p in procs:   # children that outlived their rank's SIGTERM
        if group_alive(p.pid):
            while group_alive(p.pid) and time.monotonic() < end:
                time.sleep(0.02)
            signal_group(p.pid, signal.SIGKILL)


def _signal(p, sig) -> None:
    try:
        os.killpg(p.pid, sig)  # the rank and anything it started
    except (ProcessLookupError, PermissionError):
        if p.returncode is None:
            try:
                p.send_signal(sig)
            except ProcessLookupError:
                pass


def _pump(stream, rank, prefix, out, lock) -> None:
    tag = f"[rank {rank}] " if prefix else ""
    closed = False  # our reader went away (`gpucomm launch ... | head`): keep draining
    for raw in iter(stream.readline, b""):
        if closed:
            continue
        line = raw.decode(errors="replace")
        with lock:
            try:
                out.write(tag + line if line.endswith("\n") else tag + line + "\n")
                out.flush()
            except BrokenPipeError:
                closed = True
    stream.close()
