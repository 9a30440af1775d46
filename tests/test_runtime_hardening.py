"""Issue 11, the runtime half: threads, bad roots, closed communicators, timeouts and
rendezvous edge cases, init under mpiexec and torchrun, signals to `gpucomm launch` and
`gpucomm bench`, set-up that leaks nothing, launch's command line, and the torch backend's
features against gloo. Multi-process tests have timeouts and clean up what they start.
"""
import math
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import Future

import numpy as np
import pytest

from gpucomm.errors import CommTimeout, ConfigError, TransportError
from gpucomm.runtime.launch import free_port, rank_env
from gpucomm.bench.backends import mapped_shm
from mpi_check import mpi_missing
from gpucomm.runtime.segment import PREFIX, Segment, leftovers, new_name

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
WORKER = os.path.join(HERE, "hardening_worker.py")


def _env(base=None, **extra):
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([SRC, HERE, env.get("PYTHONPATH", "")])
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="ERROR")
    env.update(extra)
    return env


def _ranks(n, mode, session, timeout=120, extra=None):
    """Run the worker as n ranks by hand (no launcher, so nobody cleans up after them)."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, WORKER, mode],
                              env=_env(rank_env(r, n, port, session), **(extra or {})),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True) for r in range(n)]
    try:
        return [p.communicate(timeout=timeout)[0].decode(errors="replace") for p in procs], \
            [p.returncode for p in procs]
    finally:
        _kill(procs)


def _new_segments(before, session=None) -> set:
    """gpucomm segments that appeared since `before` and stay with no live process mapping
    them (other jobs on the machine, such as another test worker's ranks, create theirs and
    map them while they run; a segment the dead ranks left behind is mapped by no one).

    With `session` (the GPUCOMM_SHM_SESSION the test gave its ranks) only that tag counts.
    Without it (a launcher tags its ranks' segments itself) the untagged ones ("x") do not:
    another worker's test may have just killed hand-started ranks and not yet removed theirs."""
    new = set(leftovers(session)) - before
    if session is None:
        new = {n for n in new if not n.startswith(f"{PREFIX}x-")}
    if new:
        time.sleep(2)
        new &= set(leftovers())
        new -= mapped_shm(PREFIX)
    return new


def _kill(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


@pytest.fixture
def single(monkeypatch):
    import gpucomm.runtime as rt
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PMI_SIZE",
              "OMPI_COMM_WORLD_SIZE", "GPUCOMM_TIMEOUT"):
        monkeypatch.delenv(k, raising=False)
    comm = rt.init(timeout=5)
    yield comm
    comm.close()


# --- the communicator ------------------------------------------------------------------------

@pytest.mark.parametrize("root", [1.5, "0", True, None, -1, 1])
def test_a_bad_root_is_a_clean_error_and_the_communicator_goes_on(single, root):
    x = np.ones(8, np.float32)
    for call in (lambda: single.broadcast(x, root=root), lambda: single.reduce(x, root=root),
                 lambda: single.gather(np.zeros(8, np.float32), x, root=root)):
        with pytest.raises(ConfigError, match=r"root .* is not a rank: allowed are the "
                                              r"integers 0\.\.0"):
            call()
    single.all_reduce(x)
    single.broadcast(x, root=np.int64(0))
    assert np.all(x == 1)


def test_a_closed_communicator_says_so(single):
    single.close()
    for call in (lambda: single.all_reduce(np.ones(4)), lambda: single.barrier(),
                 lambda: single.all_reduce(np.ones(4), async_op=True)):
        with pytest.raises(TransportError, match="communicator is closed"):
            call()
    single.close()  # twice is fine


def test_a_second_thread_is_refused_naming_the_rule(single):
    got = []

    def other():
        try:
            single.all_reduce(np.ones(4))
        except ConfigError as e:
            got.append(str(e))
    t = threading.Thread(target=other, name="worker-7")
    t.start()
    t.join(30)
    assert got and "'worker-7'" in got[0] and "serves only the thread that created it" in got[0]
    w = single.all_reduce(np.ones(4), async_op=True)  # its own background thread is fine
    assert w.wait(10)


def test_two_threads_on_two_ranks_never_give_wrong_answers(tmp_path):
    session = secrets.token_hex(6)
    outs, codes = _ranks(2, "threads", session)
    assert codes == [0, 0], outs
    for r in (0, 1):
        m = re.search(rf"RESULT rank {r} wrong (\d+) refused (.*)", outs[r])
        assert m and m.group(1) == "0", outs[r]
        assert "serves only the thread that created it" in m.group(2), outs[r]
    assert leftovers(session) == []


def test_work_wait_reports_the_calls_own_timeout():
    from gpucomm.runtime.communicator import Work
    fut = Future()
    fut.set_exception(CommTimeout("rank 0: all_reduce call #3 timed out waiting for rank 1"))
    with pytest.raises(CommTimeout, match="waiting for rank 1"):
        Work(fut).wait()
    with pytest.raises(CommTimeout, match="waiting for rank 1"):
        Work(fut).wait(0.01)
    pending = Future()
    with pytest.raises(CommTimeout, match=r"Work.wait timed out after 0.05s"):
        Work(pending).wait(0.05)


# --- configuration and rendezvous ----------------------------------------------------------

@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 0, -1, 1e7, "1", True])
def test_timeouts_must_be_finite_and_positive(value):
    from gpucomm.runtime import resolve_timeout
    with pytest.raises(ConfigError, match="finite number of seconds"):
        resolve_timeout(value)


@pytest.mark.parametrize("text", ["inf", "nan", "-5", "1e300"])
def test_gpucomm_timeout_inf_is_refused_by_init(monkeypatch, text):
    import gpucomm.runtime as rt
    monkeypatch.setenv("GPUCOMM_TIMEOUT", text)
    with pytest.raises(ConfigError, match=r"GPUCOMM_TIMEOUT=.*finite"):
        rt.init()


@pytest.mark.parametrize("rank", [0, 1])
def test_master_port_out_of_range_is_refused_at_once(monkeypatch, rank):
    import gpucomm.runtime as rt
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("MASTER_PORT", "99999")
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"MASTER_PORT=99999 .* 1\.\.65535"):
        rt.init(timeout=30)
    assert time.monotonic() - t0 < 2


def test_an_unresolvable_master_addr_fails_within_the_timeout(monkeypatch):
    import gpucomm.runtime as rt
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "no-such-host.invalid")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    t0 = time.monotonic()
    with pytest.raises((TransportError, CommTimeout), match="MASTER_ADDR 'no-such-host.invalid'"):
        rt.init(timeout=3)
    assert time.monotonic() - t0 < 3 + 2


def test_a_connection_reset_during_rendezvous_is_a_transport_error():
    """A "rank 0" that accepts and resets: rank 1 reports it, no raw ConnectionResetError."""
    from gpucomm.runtime.rendezvous import Rendezvous
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def reset():
        conn, _ = srv.accept()
        conn.recv(10)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        conn.close()
    t = threading.Thread(target=reset)
    t.start()
    try:
        rdzv = Rendezvous(1, 2, "127.0.0.1", port, 5, token="")
        with pytest.raises(TransportError, match="rank 1: rendezvous connection to rank 0"):
            for _ in range(3):
                rdzv.allgather({"x": 1})
                time.sleep(0.1)
    finally:
        t.join(10)
        srv.close()


def test_a_stray_hello_that_closes_does_not_leak_a_raw_error():
    """Under torchrun-style env (no token) a stray sends a valid-looking hello and closes:
    rank 0 reports a rendezvous error by rank, never a raw socket exception."""
    from gpucomm.runtime.rendezvous import Rendezvous
    port = free_port()
    box = {}

    def rank0():
        try:
            r = Rendezvous(0, 2, "127.0.0.1", port, 5, token="")
            box["got"] = r.allgather({"rank": 0})
        except Exception as e:
            box["error"] = e
    t = threading.Thread(target=rank0)
    t.start()
    for _ in range(250):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            time.sleep(0.02)
    s.sendall(b'{"rank": 1, "world": 2, "token": ""}\n')
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
    s.close()
    t.join(15)
    assert isinstance(box.get("error"), TransportError), box
    assert "rank 1" in str(box["error"])


# --- set-up leaves nothing in /dev/shm ------------------------------------------------------

class _FailingRendezvous:
    """Round 1 succeeds (with a peer that announced a name and created its segment), round 2
    fails as if that peer died."""

    def __init__(self):
        self.peer = Segment.create(4096, new_name())
        self.round = 0

    def allgather(self, obj):
        self.round += 1
        if self.round == 1:
            return [obj, {"ctrl": self.peer.name, "pid": 1, "host": os.uname().nodename}]
        raise TransportError("rank 0: rank 1 closed the rendezvous connection")


@pytest.mark.parametrize("tag", ["a" * 32, "job-1", "über"])
def test_a_session_tag_that_cannot_fit_a_control_block_is_refused_by_name(monkeypatch, tag):
    # a name's field holds 64 bytes; a 32-character tag once overflowed it mid-run, as an
    # IndexError on the first call that grew the data buffer
    monkeypatch.setenv("GPUCOMM_SHM_SESSION", tag)
    with pytest.raises(ConfigError, match=r"GPUCOMM_SHM_SESSION .*1-31 ASCII letters or digits"):
        new_name()


def test_the_longest_session_tag_allowed_fits_a_control_block(monkeypatch):
    monkeypatch.setenv("GPUCOMM_SHM_SESSION", "a" * 31)
    assert len(new_name()) == 64
    monkeypatch.delenv("GPUCOMM_SHM_SESSION")
    assert new_name().startswith(PREFIX + "x-")


def test_a_failed_set_up_removes_every_announced_control_segment(monkeypatch):
    from gpucomm.runtime.shm import ShmTransport
    session = secrets.token_hex(6)
    monkeypatch.setenv("GPUCOMM_SHM_SESSION", session)
    rdzv = _FailingRendezvous()
    assert len(leftovers(session)) == 1
    with pytest.raises(TransportError, match="closed the rendezvous"):
        ShmTransport(0, 2, 5, rdzv)
    assert leftovers(session) == []  # ours and the (dead) peer's
    rdzv.peer.mm.close()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_ranks_killed_during_rendezvous_leave_no_control_segment(sig):
    """Ranks 0 and 1 of 3 wait for rank 2, which never comes; killing them there (outside
    `gpucomm launch`, so nobody cleans up for them) leaves nothing in /dev/shm."""
    session = secrets.token_hex(6)
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", "import gpucomm; gpucomm.init(timeout=60)"],
                              env=_env(rank_env(r, 3, port, session)), start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for r in range(2)]
    try:
        time.sleep(4)  # both import and block in the rendezvous
        assert all(p.poll() is None for p in procs)
        for p in procs:
            p.send_signal(sig)
        codes = [p.wait(timeout=30) for p in procs]
        # SIGTERM: the default action before set-up has made anything, SystemExit(143) during
        assert all(c in (-sig, 128 + sig) for c in codes), codes
        assert leftovers(session) == []
    finally:
        _kill(procs)


# --- launch -----------------------------------------------------------------------------------

def _gpucomm(*args, timeout=60, **kw):
    return subprocess.run([sys.executable, "-m", "gpucomm", *args], env=_env(),
                          capture_output=True, text=True, timeout=timeout, **kw)


def test_launch_takes_a_program_and_its_arguments_like_mpirun(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("import os, sys\nprint('args', sys.argv[1:], os.environ['RANK'])\n")
    for argv in (["python3", str(script), "a", "b"], [sys.executable, str(script), "a", "b"],
                 [str(script), "a", "b"]):
        p = _gpucomm("launch", "--nproc", "2", *argv)
        assert p.returncode == 0, p.stderr
        for r in (0, 1):
            assert f"[rank {r}] args ['a', 'b'] {r}" in p.stdout, (argv, p.stdout)


@pytest.mark.parametrize("argv,message", [
    (["--nproc", "65", "x.py"], r"--nproc must be an integer in 1\.\.64"),
    (["--timeout", "0", "--nproc", "2", "x.py"], "finite number of seconds > 0"),
    (["--timeout", "-1", "--nproc", "2", "x.py"], "finite number of seconds > 0"),
    (["--timeout", "nan", "--nproc", "2", "x.py"], "finite number of seconds > 0"),
    (["--nproc", "2", "--exec", "/nonexistent"], "cannot run '/nonexistent': it does not exist"),
    (["--nproc", "2", "no-such-program-xyz"], "is not on PATH"),
    (["--nproc", "2", "missing.py"], "script 'missing.py' does not exist"),
])
def test_launch_refuses_what_it_cannot_run_in_one_line(argv, message):
    p = _gpucomm("launch", *argv)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    last = p.stderr.strip().splitlines()[-1]  # argparse puts its usage lines first
    assert last.startswith("gpucomm launch: error: ") and re.search(message, last), p.stderr


def _wait_ready(proc, n, limit=90):
    pids, buf, end = [], b"", time.monotonic() + limit
    os.set_blocking(proc.stdout.fileno(), False)
    while len(pids) < n and time.monotonic() < end and proc.poll() is None:
        chunk = proc.stdout.read() or b""
        buf += chunk
        pids = [int(x) for x in re.findall(rb"READY (\d+)", buf)]
        time.sleep(0.1)
    return pids


def _alive(pid):
    from gpucomm.runtime.shm import pid_alive
    return pid_alive(pid)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_to_launch_end_the_ranks_and_remove_segments(sig):
    before = set(leftovers())
    proc = subprocess.Popen([sys.executable, "-m", "gpucomm", "launch", "--nproc", "2", WORKER,
                             "hold"], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        pids = _wait_ready(proc, 2)
        assert len(pids) == 2, "ranks did not start"
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 128 + sig
        time.sleep(0.3)
        assert not any(_alive(p) for p in pids)
        assert _new_segments(before) == set()
    finally:
        _kill([proc])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_to_bench_end_the_ranks_and_remove_segments(sig):
    before = set(leftovers())
    proc = subprocess.Popen([sys.executable, "-m", "gpucomm", "bench", "-n", "2", "-b", "64M",
                             "-e", "64M", "--iters", "100000", "-w", "0"], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        end, ranks = time.monotonic() + 90, []
        while time.monotonic() < end and len(ranks) < 2:
            ranks = _children_running("gpucomm.bench.sweep", proc.pid)
            time.sleep(0.2)
        assert len(ranks) == 2, "bench ranks did not start"
        time.sleep(1)
        proc.send_signal(sig)
        assert proc.wait(timeout=40) == 128 + sig
        time.sleep(0.5)
        assert not any(_alive(p) for p in ranks)
        assert _new_segments(before) == set()
    finally:
        _kill([proc])


def _children_running(needle, ancestor):
    """Pids of processes whose command line holds `needle` and descend from `ancestor`."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if needle.encode() in cmd and b"launch" not in cmd and _descends(int(d), ancestor):
            found.append(int(d))
    return found


def _descends(pid, ancestor):
    for _ in range(10):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


# --- init under mpiexec and torchrun --------------------------------------------------------

def test_init_under_mpiexec_sees_the_mpi_world():
    if mpi_missing():
        pytest.skip(mpi_missing())
    from gpucomm.bench.backends import mpiexec, remove_stale_mpich, shm_names
    exe = mpiexec()
    if exe is None:
        pytest.skip("no mpiexec (pip install mpich)")
    session = uuid.uuid4().hex[:12]
    before_mpich, before = shm_names(), set(leftovers(session))
    env = _env(GPUCOMM_SHM_SESSION=session)
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    try:
        p = subprocess.run([exe, "-n", "2", sys.executable, WORKER, "init"], env=env,
                           capture_output=True, text=True, timeout=120)
    finally:
        remove_stale_mpich(before_mpich)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in (0, 1):
        assert f"RESULT rank {r} of 2 local {r} sum 2.0 all True" in p.stdout, p.stdout
    assert _new_segments(before, session) == set()


@pytest.fixture(scope="module")
def torchrun():
    pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    session = uuid.uuid4().hex[:12]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), WORKER, "torch"]
    p = subprocess.run(cmd, env=_env(GPUCOMM_SHM_SESSION=session), capture_output=True,
                       text=True, timeout=400)
    return p.returncode, p.stdout + p.stderr, _new_segments(set(), session)


TORCH_CASES = [f"bool-{op}" for op in ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")] \
    + [f"int64-{op}" for op in ("BAND", "BOR", "BXOR")] \
    + ["noncontiguous-all_reduce", "noncontiguous-broadcast", "all_to_all_single-splits",
       "all_to_all_single-equal-splits", "fsdp2"]


@pytest.mark.parametrize("case", TORCH_CASES)
def test_torch_backend_matches_gloo(torchrun, case):
    rc, out, _ = torchrun
    for r in (0, 1):
        assert f"RESULT rank {r} {case} same" in out, out[-3000:]


def test_init_under_torchrun_and_reinit_of_the_torch_backend(torchrun):
    rc, out, left = torchrun
    assert rc == 0, out[-3000:]
    for r in (0, 1):
        assert f"RESULT rank {r} init-under-torchrun 2.0" in out, out[-3000:]
        assert f"RESULT rank {r} reinit 3.0" in out, out[-3000:]
    assert left == set()


def test_a_failed_torchrun_job_leaves_no_segment():
    """torchrun stops rank 0 (SIGTERM) while it waits in gpucomm.init() for rank 1, which
    failed: nothing of gpucomm's stays in /dev/shm (no launcher of ours cleans up after
    torchrun)."""
    pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    # the job's segments carry a tag of their own, so that other tests' segments running
    # beside it (xdist) are not mistaken for its leftovers; the tag changes only the names
    tag = uuid.uuid4().hex[:12]
    env = {**_env(), "GPUCOMM_SHM_SESSION": tag}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), WORKER,
           "torchrun-fail"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert time.monotonic() - t0 < 120, "rank 0 outlived torchrun's stop"
    assert leftovers(tag) == [], p.stdout[-2000:] + p.stderr[-2000:]
