"""The shm runtime on real processes: every collective × algorithm × dtype × op against the
reference for 1..8 ranks, the API (async, torch, send/recv), a killed rank, mismatched calls,
timeouts, the launcher, and /dev/shm left clean.

Ranks are spawned once per (mode, rank count) and loop over their cases inside
(tests/test_runtime_worker.py); their tracebacks are surfaced in the assertion messages.
"""
import json
import os
import re
import secrets
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

from gpucomm.errors import ConfigError, TransportError
from gpucomm.runtime.launch import free_port, rank_env
from gpucomm.runtime.segment import Segment, leftovers

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
WORKER = os.path.join(HERE, "test_runtime_worker.py")


def spawn(nranks, mode, tmp_path, extra_env=None, timeout=None):
    """Run the worker as `nranks` processes; returns (per-rank results, outputs, codes).
    The default limit grows with the ranks: 8 processes looping over every case share this
    machine's 2 cores (about 60-90 s quiet, more when other jobs load it)."""
    timeout = timeout or 60 + 30 * nranks
    session = secrets.token_hex(6)
    port = free_port()
    out = tmp_path / f"{mode}-{nranks}-{session}"
    out.mkdir()
    procs = []
    for r in range(nranks):
        env = rank_env(r, nranks, port, session)
        env["PYTHONPATH"] = os.pathsep.join([SRC, HERE, env.get("PYTHONPATH", "")])
        env.setdefault("GPUCOMM_TIMEOUT", "60")
        env.update(extra_env or {})
        procs.append(subprocess.Popen([sys.executable, WORKER, mode, str(out)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outputs, codes = [], []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            o, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"{mode} on {nranks} ranks did not finish in {timeout}s") \
                from None
        outputs.append(o.decode(errors="replace"))
        codes.append(p.returncode)
    results = {}
    for r in range(nranks):
        f = out / f"rank{r}.json"
        if f.exists():
            results[r] = json.loads(f.read_text())
    left = leftovers(session)
    assert left == [], f"shared-memory segments leaked: {left}"
    return results, outputs, codes


def _failures(results, outputs):
    msgs = []
    for r, res in sorted(results.items()):
        msgs += [f"rank {r}: {m}" for m in res["failures"][:5]]
    if not results:
        msgs.append("no rank wrote results:\n" + "\n".join(o[-2000:] for o in outputs))
    return msgs


@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 5, 6, 7, 8])
def test_every_collective_and_algorithm_matches_reference(nranks, tmp_path):
    env = {"RUNTIME_CASES": "light"} if nranks > 4 else {}
    if nranks in (3, 6):  # tiny staging slices: multi-slice pipelines on small buffers
        env["GPUCOMM_SLICE_BYTES"] = "24"
    results, outputs, codes = spawn(nranks, "cases", tmp_path, env)
    problems = _failures(results, outputs)
    assert not problems, "\n".join(problems)
    assert codes == [0] * nranks, outputs
    assert len(results) == nranks and all(r["cases"] > 100 for r in results.values())
    # all-reduce results are bitwise identical on every rank
    digests = [results[r]["digests"] for r in range(nranks)]
    assert digests[0] and all(d == digests[0] for d in digests)


@pytest.mark.parametrize("nranks", [2, 3, 5, 8])
def test_direct_reads_from_peer_buffers_match_reference(nranks, tmp_path):
    """Every chunk read by cross-memory attach (forced on for small sizes here), cut into
    tiny slices so multi-slice plans and piecewise reductions run too; every large-copy path
    (streaming stores, a copy pushed on to the peer piece by piece) forced on as well."""
    env = {"GPUCOMM_DIRECT_MIN_BYTES": "0", "GPUCOMM_A2A_DIRECT_MIN_BYTES": "0",
           "GPUCOMM_DIRECT_SLICE_BYTES": "64",
           "GPUCOMM_SLICE_BYTES": "24", "GPUCOMM_STREAM_MIN_BYTES": "0",
           "GPUCOMM_PIECE_BYTES": "40",
           **({"RUNTIME_CASES": "light"} if nranks > 3 else {})}
    results, outputs, codes = spawn(nranks, "cases", tmp_path, env)
    problems = _failures(results, outputs)
    assert not problems, "\n".join(problems)
    assert codes == [0] * nranks
    if not results[0]["cma"]:
        pytest.skip("cross-memory attach (process_vm_readv) is not permitted here")
    digests = [results[r]["digests"] for r in range(nranks)]
    assert all(d == digests[0] for d in digests)


def test_api_async_torch_sendrecv_buffers(tmp_path):
    results, outputs, codes = spawn(3, "api", tmp_path)
    problems = _failures(results, outputs)
    assert not problems, "\n".join(problems)
    assert codes == [0, 0, 0]
    try:
        import torch  # noqa: F401
        assert results[0]["torch"] == "tested"
    except ImportError:
        assert results[0]["torch"] == "absent"


def test_killed_rank_is_named_within_the_timeout(tmp_path):
    t0 = time.monotonic()
    results, outputs, codes = spawn(3, "kill", tmp_path, {"GPUCOMM_TIMEOUT": "20"}, timeout=60)
    assert codes[2] == -9
    for r in (0, 1):
        err = results[r].get("error", "")
        assert "rank 2" in err and ("died" in err or "failed" in err), (err, outputs[r])
        assert results[r]["elapsed"] < 10, results[r]
    assert time.monotonic() - t0 < 40


@pytest.mark.parametrize("kind", ["size", "op", "collective", "root", "dtype", "plan"])
def test_mismatched_calls_fail_on_every_rank(kind, tmp_path):
    results, outputs, codes = spawn(2, "mismatch", tmp_path, {"MISMATCH": kind,
                                                              "GPUCOMM_TIMEOUT": "20"})
    for r in (0, 1):
        assert not results[r]["failures"], results[r]["failures"]
        err = results[r].get("error", "")
        assert "mismatch" in err or "failed" in err, (kind, err, outputs[r])
        assert "TransportError" in err


def test_a_rank_that_never_calls_times_out_naming_it(tmp_path):
    results, outputs, codes = spawn(2, "timeout", tmp_path, {"GPUCOMM_TIMEOUT": "1"})
    err = results[0].get("error", "")
    assert err.startswith("CommTimeout") and "rank 1" in err, (err, outputs[0])
    assert results[0]["elapsed"] < 6  # the 1 s timeout plus slack for a loaded machine


def test_launch_prefixes_output_and_stops_everyone_when_a_rank_fails(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(
        "import os, sys, time\n"
        "r = int(os.environ['RANK'])\n"
        "print('hello from', r, 'of', os.environ['WORLD_SIZE'],\n"
        "      'token', os.environ['GPUCOMM_RDZV_TOKEN'], flush=True)\n"
        "if r == 1:\n"
        "    time.sleep(1.0)\n"
        "    raise RuntimeError('boom on rank 1')\n"
        "time.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "gpucomm", "launch", "--nproc", "3", str(script)],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert time.monotonic() - t0 < 20  # ranks 0 and 2 were stopped, not waited for
    assert "[rank 1] RuntimeError: boom on rank 1" in p.stdout
    for r in range(3):
        assert f"[rank {r}] hello from {r} of 3" in p.stdout
    assert "rank 1 exited with status 1" in p.stderr
    # one secret rendezvous token for the whole launch, unrelated to the visible session tag
    tokens = set(re.findall(r"token ([0-9a-f]+)", p.stdout))
    assert len(tokens) == 1 and len(tokens.pop()) == 32


def test_launch_runs_the_example(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    example = os.path.join(os.path.dirname(HERE), "examples", "allreduce.py")
    p = subprocess.run([sys.executable, "-m", "gpucomm", "launch", "--nproc", "3", example],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("(want 6.0)") == 3


# --- in-process: one rank, segments, configuration ---------------------------------------

def test_single_rank_needs_no_environment(monkeypatch):
    import gpucomm.runtime as rt
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    with rt.init(timeout=5) as comm:
        x = np.arange(6, dtype=np.float64)
        comm.all_reduce(x, op="max")
        out = np.zeros(6)
        comm.all_gather(out, x)
        assert np.array_equal(out, np.arange(6.0)) and comm.world_size == 1
        with pytest.raises(ConfigError, match="C-contiguous"):
            comm.all_reduce(np.zeros((4, 4))[:, 0])
        with pytest.raises(ConfigError, match="bfloat16"):
            comm.all_reduce(np.zeros(4, np.uint16))
        with pytest.raises(ConfigError, match="avg"):
            comm.all_reduce(np.zeros(4, np.int32), op="avg")
        with pytest.raises(ConfigError, match="disagree"):
            comm.reduce_scatter(np.zeros(3), np.zeros(4))


def test_init_errors_name_the_variable(monkeypatch):
    import gpucomm.runtime as rt
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ConfigError, match="RANK"):
        rt.init()
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(ConfigError, match="out of range"):
        rt.init()
    monkeypatch.setenv("GPUCOMM_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="GPUCOMM_TIMEOUT"):
        rt.init()


def test_rendezvous_times_out_naming_the_missing_ranks(monkeypatch):
    import gpucomm.runtime as rt
    from gpucomm.errors import CommTimeout
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    t0 = time.monotonic()
    with pytest.raises(CommTimeout, match="rank.*1, 2"):
        rt.init(timeout=0.5)
    assert time.monotonic() - t0 < 3


def _connect_when_listening(port: int, tries: int = 250):
    """A raw TCP connection to 127.0.0.1:port once something listens there."""
    import socket
    for _ in range(tries):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            time.sleep(0.02)
    raise AssertionError(f"nothing listened on port {port}")


def test_rendezvous_turns_away_stray_connections_and_wrong_tokens():
    """A silent connection, garbage and a hello with another job's token, all made before
    the real rank connects, neither stall nor end the job; the right token gets in."""
    import threading

    from gpucomm.runtime import rendezvous
    from gpucomm.runtime.rendezvous import Rendezvous
    port, got = free_port(), {}

    def rank0():
        try:
            got[0] = Rendezvous(0, 2, "127.0.0.1", port, timeout=20, token="job-a")
        except Exception as e:  # surfaced below
            got[0] = e

    t = threading.Thread(target=rank0)
    t.start()
    strays = []
    for payload in (None, b"GET / HTTP/1.0\r\n\r\n", b'{"rank": 1, "world": 2, "token": "job-b"}\n',
                    b"x" * (rendezvous.HELLO_MAX + 10)):
        c = _connect_when_listening(port)
        if payload:
            c.sendall(payload)
        strays.append(c)
    t0 = time.monotonic()
    r1 = Rendezvous(1, 2, "127.0.0.1", port, timeout=20, token="job-a")
    t.join(10)
    r0 = got[0]
    assert isinstance(r0, Rendezvous), r0
    assert time.monotonic() - t0 < rendezvous.HELLO_S  # the silent one held nothing up
    assert {"not a hello", "wrong job token", "oversized hello"} <= set(r0.rejected)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault(0, r0.allgather("zero")))
    t.start()
    assert r1.allgather("one") == ["zero", "one"]
    t.join(10)
    assert out[0] == ["zero", "one"]
    for s in (r0, r1, *strays):
        s.close()


def test_rendezvous_names_a_misconfigured_rank_without_showing_the_token():
    import threading

    from gpucomm.runtime.rendezvous import Rendezvous
    port, got = free_port(), {}

    def rank0():
        try:
            Rendezvous(0, 2, "127.0.0.1", port, timeout=10, token="s3cret-token")
        except Exception as e:
            got["err"] = e

    t = threading.Thread(target=rank0)
    t.start()
    c = _connect_when_listening(port)
    c.sendall(b'{"rank": 1, "world": 3, "token": "s3cret-token"}\n')
    t.join(10)
    c.close()
    err = str(got.get("err"))
    assert isinstance(got.get("err"), TransportError) and "WORLD_SIZE is 2" in err, err
    assert "s3cret" not in err


def test_segments_are_owner_only_with_random_names():
    a, b = Segment.create(4096), Segment.create(4096)
    try:
        for s in (a, b):
            mode = os.stat(f"/dev/shm/{s.name}").st_mode
            assert stat.S_IMODE(mode) == 0o600
        assert a.name != b.name and len(a.name.rsplit("-", 1)[1]) == 24
        with pytest.raises(TransportError, match="not a gpucomm segment"):
            Segment.attach("../etc/passwd")
    finally:
        a.close()
        b.close()
    assert not os.path.exists(f"/dev/shm/{a.name}")
