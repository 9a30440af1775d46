"""Issue 29, runtime half: ranks die with their launcher (even a SIGKILLed one) and take their
own children; a deadlock ends in CommTimeout naming the ranks that wait on each other; a
forked child cannot use its parent's communicator. Multi-process: marked slow."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.slow
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _script(tmp_path, body: str):
    p = tmp_path / "rank.py"
    p.write_text(textwrap.dedent(body))
    return p


SLEEPER = """
    import os, subprocess, sys, time
    child = subprocess.Popen(["sleep", "120"])
    with open(os.path.join(sys.argv[1], "pids." + os.environ["RANK"]), "w") as f:
        f.write(f"{os.getpid()} {child.pid}\\n")
    if os.environ["RANK"] == "0" and len(sys.argv) > 2:
        while not os.path.exists(os.path.join(sys.argv[1], "pids.1")):
            time.sleep(0.05)
        raise RuntimeError("rank 0 fails after starting a child")
    time.sleep(120)
"""


def _pids(tmp_path, n, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        files = [tmp_path / f"pids.{r}" for r in range(n)]
        if all(f.exists() and f.read_text().endswith("\n") for f in files):
            return [int(x) for f in files for x in f.read_text().split()]
        time.sleep(0.1)
    raise AssertionError("the ranks did not start")


def _gone(pids, timeout=15) -> list:
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def test_sigkill_to_the_launcher_ends_its_ranks_and_their_children(tmp_path):
    script = _script(tmp_path, SLEEPER)
    launcher = subprocess.Popen([sys.executable, "-m", "gpucomm", "launch", "--nproc", "2",
                                 str(script), str(tmp_path)], env=ENV,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pids = _pids(tmp_path, 2)
        launcher.kill()
        launcher.wait()
        assert not _gone(pids), "ranks or their children outlived a SIGKILLed launcher"
    finally:
        launcher.kill()


def test_a_failed_rank_takes_its_children(tmp_path):
    script = _script(tmp_path, SLEEPER)
    p = subprocess.run([sys.executable, "-m", "gpucomm", "launch", "--nproc", "2", str(script),
                        str(tmp_path), "fail"], env=ENV, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 1 and "rank 0 exited with status 1" in p.stderr
    assert not _gone(_pids(tmp_path, 2), timeout=5)


def test_sigkill_to_bench_ends_its_launcher_and_ranks(tmp_path):
    bench = subprocess.Popen([sys.executable, "-m", "gpucomm", "bench", "-n", "1000000",
                              "-b", "16M", "-e", "16M", "--nranks", "2"], env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end, kids = time.monotonic() + 60, []
        while time.monotonic() < end and len(kids) < 3:   # the launcher and two ranks
            kids = _descendants(bench.pid)
            time.sleep(0.2)
        assert len(kids) >= 3, kids
        bench.send_signal(signal.SIGKILL)
        bench.wait()
        assert not _gone(kids), "bench's launcher or ranks outlived it"
    finally:
        bench.kill()


def _descendants(pid: int) -> list[int]:
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def test_a_deadlock_is_a_timeout_naming_both_ranks(tmp_path):
    script = _script(tmp_path, """
        import numpy as np, gpucomm
        comm = gpucomm.init()
        comm.recv(np.zeros(4, np.float32), 1 - comm.rank)   # both receive: nobody sends
    """)
    p = subprocess.run([sys.executable, "-m", "gpucomm", "launch", "--nproc", "2", str(script)],
                       env=dict(ENV, GPUCOMM_TIMEOUT="2"), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0
    assert "CommTimeout" in p.stdout, p.stdout[-2000:]
    assert "deadlock: rank 1 waits for rank 0, rank 0 waits for rank 1" in p.stdout or \
        "deadlock: rank 0 waits for rank 1, rank 1 waits for rank 0" in p.stdout, p.stdout


def test_a_forked_child_cannot_use_its_parents_communicator(tmp_path):
    script = _script(tmp_path, """
        import os, numpy as np, gpucomm
        comm = gpucomm.init()
        comm.all_reduce(np.ones(4, np.float32))
        pid = os.fork()
        if pid == 0:
            try:
                comm.all_reduce(np.ones(4, np.float32))
                print("child: ran")
            except gpucomm.errors.TransportError as e:
                print("child: refused:", e)
            raise SystemExit(0)   # atexit runs: close() must leave the parent's segments
        os.waitpid(pid, 0)
        y = np.ones(4, np.float32)
        comm.all_reduce(y)
        print("parent:", y.tolist())
    """)
    p = subprocess.run([sys.executable, "-m", "gpucomm", "launch", "--nproc", "2", str(script)],
                       env=dict(ENV, GPUCOMM_TIMEOUT="20"), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert p.stdout.count("child: refused:") == 2 and "is a fork of it" in p.stdout
    assert p.stdout.count("parent: [2.0, 2.0, 2.0, 2.0]") == 2, p.stdout
