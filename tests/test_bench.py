"""`gpucomm bench`: the sweep on real ranks (shm; MPICH and gloo when installed), the nccl-tests
table, JSON rows, #wrong counting, calibration and the predicted column."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gpucomm.bench import format_table, run_bench
from gpucomm.bench.backends import mpiexec
from gpucomm.bench.plancost import add_predictions, host_topology, load_host
from gpucomm.bench.sweep import buffers, count_wrong, pattern
from gpucomm.collectives import buffer_counts, get_collective, reference
from gpucomm.dtypes import get_dtype
from gpucomm.errors import ConfigError
from gpucomm.runtime.options import RuntimeOptions

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
SIM_KEYS = {"size", "count", "type", "redop", "root", "time_us", "algbw", "busbw", "algorithm"}


def _cli(*args, env=None, timeout=120):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpucomm", *args], capture_output=True,
                          text=True, env=e, timeout=timeout)


@pytest.fixture
def host_yaml(tmp_path, monkeypatch):
    path = tmp_path / "host.yaml"
    path.write_text("bandwidth_Bps: 10.0e9\nlatency_s: 2.0e-5\n")
    monkeypatch.setenv("GPUCOMM_HOST_YAML", str(path))
    return str(path)


def test_shm_sweep_json_rows_are_checked_and_predicted(host_yaml):
    p = _cli("bench", "--nranks", "2", "--collective", "all_reduce", "-b", "8", "-e", "64K",
             "-f", "8", "-n", "3", "-w", "1", "--format", "json",
             env={"GPUCOMM_HOST_YAML": host_yaml})
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert (doc["collective"], doc["nranks"], doc["backend"]) == ("all_reduce", 2, "shm")
    rows = doc["rows"]
    assert [r["size"] for r in rows] == [8, 64, 512, 4096, 32768]
    for r in rows:
        assert SIM_KEYS | {"predicted_time_us", "wrong"} <= set(r)
        assert r["wrong"] == 0 and r["ip_wrong"] == 0 and r["time_us"] > 0
        assert r["busbw"] == pytest.approx(r["algbw"] * 2 * (2 - 1) / 2)
        # the prediction: at least one op's latency, growing with size
        assert r["predicted_time_us"] >= 20.0
    assert rows[-1]["predicted_time_us"] > rows[0]["predicted_time_us"]


@pytest.mark.parametrize("coll", ["reduce_scatter", "all_gather", "reduce", "scatter"])
def test_every_bench_collective_runs_and_checks_on_three_ranks(coll):
    rows = run_bench("shm", 3, coll, [24, 3 << 12], iters=2, warmup=1, check=1, root=1)
    assert all(r["wrong"] == 0 and r["ip_wrong"] == 0 for r in rows), rows
    assert rows[0]["root"] == (1 if get_collective(coll).rooted else -1)


def test_table_has_nccl_tests_columns_and_both_halves(host_yaml):
    p = _cli("bench", "--nranks", "2", "--collective", "all_gather", "-b", "1K", "-e", "4K",
             "--iters", "2", "-w", "1", "-d", "int32", "--plot",
             os.path.join(os.path.dirname(host_yaml), "bw.png"),
             env={"GPUCOMM_HOST_YAML": host_yaml})
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "out-of-place" in out and "in-place" in out and "predicted" in out
    assert "#wrong" in out and "busbw" in out and "Out of bounds values : 0 OK" in out
    assert "int32" in out
    assert os.path.getsize(os.path.join(os.path.dirname(host_yaml), "bw.png")) > 1000
    # --check 0: nothing was checked, and the table says so instead of a 0
    p = _cli("bench", "--nranks", "2", "--collective", "all_gather", "-b", "1K", "-e", "1K",
             "--iters", "2", "-w", "1", "--check", "0", env={"GPUCOMM_HOST_YAML": host_yaml})
    assert p.returncode == 0, p.stderr
    row = [ln for ln in p.stdout.splitlines() if ln.strip().startswith("1024")][0]
    assert row.split().count("N/A") == 2  # nccl-tests' mark for an unchecked half


def test_count_wrong_finds_corrupted_elements():
    coll, d = get_collective("all_reduce"), get_dtype("float32")
    ins = [pattern(q, 100, d, "sum", 1) for q in range(2)]
    good = reference(coll, ins, "sum", d)[0]
    assert count_wrong(coll, good.copy(), 0, 2, 100, d, "sum", 0, salt=1) == 0
    bad = good.copy()
    bad[[3, 50, 99]] += 1
    assert count_wrong(coll, bad, 0, 2, 100, d, "sum", 0, salt=1) == 3
    ints = get_dtype("int64")
    x = reference(coll, [pattern(q, 10, ints, "max") for q in range(3)], "max", ints)[1]
    x[0] -= 1
    assert count_wrong(coll, x, 1, 3, 10, ints, "max", 0) == 1


@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                  "reduce", "all_to_all", "gather", "scatter", "sendrecv"])
def test_count_wrong_builds_the_reference_piece_by_piece(coll, monkeypatch):
    """Against `reference` on whole arrays: every rank, pieces smaller than a block, dtypes
    with exact and with rounded reductions; one flipped element is counted once."""
    import gpucomm.bench.sweep as sweep
    monkeypatch.setattr(sweep, "CHECK_PIECE", 7)
    c, p, root, bc = get_collective(coll), 3, 1, 20
    for dname, op in (("float32", "sum"), ("bfloat16", "prod"), ("int32", "max")):
        d = get_dtype(dname)
        ins = [pattern(q, buffer_counts(c, bc, q, p, root)[0] or 0, d, op, 1) for q in range(p)]
        for r, want in enumerate(reference(c, ins, op, d, root)):
            if want is None:
                assert count_wrong(c, None, r, p, bc, d, op, root, salt=1) == 0
                continue
            assert count_wrong(c, want.copy(), r, p, bc, d, op, root, salt=1) == 0, (dname, r)
            bad = want.copy()
            bad[-1] = bad[-1] + 1 if dname != "bfloat16" else bad[-1] ^ 0x4000
            assert count_wrong(c, bad, r, p, bc, d, op, root, salt=1) == 1, (dname, r)


def test_in_place_buffers_follow_nccl_tests_layout():
    d = get_dtype("float32")
    inp, out, view = buffers(get_collective("all_gather"), 1, 3, 4, d, "sum", 0, True)
    assert np.shares_memory(inp, out) and out[4:8].tolist() == inp.tolist()
    inp, out, view = buffers(get_collective("reduce_scatter"), 2, 3, 4, d, "sum", 0, True)
    assert np.shares_memory(inp, out) and out.size == 4
    inp, out, view = buffers(get_collective("reduce"), 1, 3, 4, d, "sum", 0, True)
    assert out is None  # a non-root rank has no output


def test_predictions_use_the_host_topology(host_yaml):
    topo = host_topology(4, 10e9, 2e-5)
    assert topo.nranks == 4 and topo.path_bandwidth(0, 3) == pytest.approx(10e9)
    assert topo.path_latency(0, 3) == pytest.approx(2e-5)
    rows = [{"size": s, "count": s // 4, "type": "float32", "root": -1, "algorithm": "ring"}
            for s in (1 << 10, 1 << 24)]
    note = add_predictions(rows, "all_reduce", 4)
    assert "10.00 GB/s" in note
    small, big = (r["predicted_time_us"] * 1e-6 for r in rows)
    # ring all-reduce: 2(P-1) steps of S/P bytes -> 6 alphas + 6 * (S/4) / B
    assert small == pytest.approx(6 * 2e-5 + 6 * (1 << 10) / 4 / 10e9, rel=0.05)
    assert big == pytest.approx(6 * 2e-5 + 6 * (1 << 24) / 4 / 10e9, rel=0.05)


V2_HOST = """format: 2
cma: true
bandwidth_Bps: 10.0e9
latency_s: 1.0e-5
cores: 2
cache_bytes: 1048576
rates:
  1: {copy_Bps: 20.0e9, reduce_Bps: 10.0e9, copy_cache_Bps: 80.0e9, reduce_cache_Bps: 40.0e9}
  2: {copy_Bps: 10.0e9, reduce_Bps: 5.0e9, copy_cache_Bps: 40.0e9, reduce_cache_Bps: 20.0e9,
      stream_Bps: 16.0e9}
"""


def test_predictions_charge_copies_and_reductions_by_memory_traffic(tmp_path, monkeypatch):
    """Calibrated per-rank rates with both ranks busy; the runtime's plan for 64 MiB on 2
    ranks (cross-memory reads, far beyond the 1 MiB cache): closed forms of its work."""
    path = tmp_path / "host.yaml"
    path.write_text(V2_HOST)
    monkeypatch.setenv("GPUCOMM_HOST_YAML", str(path))
    S, a, copy, red, stream = 64 << 20, 1e-5, 10e9, 5e9, 16e9
    # a copy moves each byte twice; the peer's half read into a cache-sized buffer once (half
    # a copy), the reduction then loads my half and stores the sum (a copy), and two_shot
    # writes that sum, still in cache, into the peer (half a copy); all-gather streams its own
    # half into its output and writes it, still in cache, into the peer (half a copy)
    want = {
        "all_reduce": 2 * a + (0.5 + 1 + 0.5) * (S / 2) / copy,
        "reduce_scatter": a + (0.5 + 1) * (S / 2) / copy,
        "all_gather": a + S / 2 / stream + 0.5 * (S / 2) / copy,
    }
    for coll, t in want.items():
        rows = [{"size": S, "count": S // 4, "type": "float32", "root": -1, "algorithm": "auto"}]
        note = add_predictions(rows, coll, 2)
        assert "copy 10.0 GB/s, reduce 5.0 GB/s" in note
        assert rows[0]["predicted_time_us"] * 1e-6 == pytest.approx(t, rel=1e-6), coll
    # a calibration from before the runtime streamed: its copies cost the copy rate
    path.write_text(V2_HOST.replace(",\n      stream_Bps: 16.0e9}", "}"))
    rows = [{"size": S, "count": S // 4, "type": "float32", "root": -1, "algorithm": "auto"}]
    add_predictions(rows, "all_gather", 2)
    assert rows[0]["predicted_time_us"] * 1e-6 == pytest.approx(a + 1.5 * (S / 2) / copy)
    path.write_text(V2_HOST)
    # a working set inside the cache moves at the cache rates
    small = [{"size": 1 << 12, "count": 1 << 10, "type": "float32", "root": -1,
              "algorithm": "direct"}]
    add_predictions(small, "all_gather", 2)
    assert small[0]["predicted_time_us"] * 1e-6 < a + 4096 / 40e9 * 2 + 1e-9
    # four ranks on two cores: each gets half a core
    four = [{"size": S, "count": S // 4, "type": "float32", "root": -1, "algorithm": "auto"}]
    add_predictions(four, "all_gather", 4)
    assert four[0]["predicted_time_us"] * 1e-6 > 1.9 * (S * 3 / 4 / copy)
    # reductions whose operands both sit in memory cost the calibrated reduction rate
    staged = [{"size": S, "count": S // 4, "type": "float32", "root": -1,
               "algorithm": "recursive_doubling"}]
    add_predictions(staged, "all_reduce", 2)
    assert staged[0]["predicted_time_us"] * 1e-6 > S / red


def test_the_predictor_prices_the_broadcast_the_runtime_chooses(tmp_path, monkeypatch):
    """`auto` resolves as the runtime resolves it on the calibrated host: with cross-memory
    attach a 2-rank broadcast is read whole (binomial_tree) at every size, 3 ranks from 4 MiB;
    without it, ring."""
    from gpucomm.runtime.communicator import choose_algorithm
    assert [choose_algorithm("broadcast", 1 << 20, p, direct=d)
            for p, d in ((2, True), (2, False), (3, True))] == ["binomial_tree", "ring", "ring"]
    assert choose_algorithm("broadcast", 4 << 20, 3, direct=True) == "binomial_tree"
    path = tmp_path / "host.yaml"
    monkeypatch.setenv("GPUCOMM_HOST_YAML", str(path))
    for text, want in ((V2_HOST, "binomial_tree"), (V2_HOST.replace("cma: true", "cma: false"),
                                                    "ring")):
        path.write_text(text)
        rows = [{"size": 1 << 20, "count": 1 << 18, "type": "float32", "root": 0,
                 "algorithm": "auto"}]
        add_predictions(rows, "broadcast", 2)
        assert rows[0]["predicted_algorithm"] == want, text


def test_a_two_rank_all_reduce_beyond_the_small_message_path_runs_two_shot(tmp_path,
                                                                           monkeypatch):
    """With cross-memory attach, past the small-message path's reach (one_shot up to there);
    the predictor resolves `auto` the same way from the options and the calibrated host."""
    from gpucomm.runtime.communicator import choose_algorithm
    from gpucomm.runtime.shm_ll import LLRunner
    assert [choose_algorithm("all_reduce", n, p, direct=d, small_message_bytes=2048)
            for n, p, d in ((2048, 2, True), (4096, 2, True), (4096, 2, False),
                            (4096, 3, True))] == ["one_shot", "two_shot", "one_shot", "one_shot"]
    path = tmp_path / "host.yaml"
    monkeypatch.setenv("GPUCOMM_HOST_YAML", str(path))
    path.write_text(V2_HOST)
    for reach in (2048, 32768):
        rows = [{"size": 16384, "count": 4096, "type": "float32", "root": -1,
                 "algorithm": "auto"}]
        add_predictions(rows, "all_reduce", 2, options=RuntimeOptions(ll_max_bytes=reach))
        want = "one_shot" if reach > 16384 and LLRunner is not None else "two_shot"
        assert rows[0]["predicted_algorithm"] == want, reach


def test_a_calibrated_curve_prices_ops_by_the_bytes_a_rank_touches(tmp_path, monkeypatch):
    """With a curve (a process's bytes -> copy and reduce rates), the rates between its points
    are interpolated (time per byte, in log bytes) and clamped beyond them; a 16 MiB direct
    all-gather on 2 ranks (each rank touches its 8 MiB input and 16 MiB output) is priced at
    the rates of 24 MiB, 3/4 of the way (in log bytes) from the 3 to the 48 MiB point."""
    from gpucomm.bench.plancost import _on_curve
    curve = [[3 << 18, 40e9, 20e9], [3 << 20, 20e9, 10e9], [48 << 20, 10e9, 5e9]]
    assert _on_curve(curve, 1024) == (40e9, 20e9) and _on_curve(curve, 1 << 30) == (10e9, 5e9)
    copy, red = _on_curve(curve, 24 << 20)
    assert (copy, red) == (pytest.approx(1 / (0.25 / 20e9 + 0.75 / 10e9)),
                           pytest.approx(1 / (0.25 / 10e9 + 0.75 / 5e9)))
    path = tmp_path / "host.yaml"
    path.write_text(V2_HOST.replace("      stream_Bps: 16.0e9}", "      stream_Bps: 16.0e9, curve: "
                                    "[[3145728, 20.0e9, 10.0e9], [786432, 40.0e9, 20.0e9], "
                                    "[50331648, 10.0e9, 5.0e9]]}"))
    monkeypatch.setenv("GPUCOMM_HOST_YAML", str(path))
    S, a = 16 << 20, 1e-5
    rows = [{"size": S, "count": S // 4, "type": "float32", "root": -1, "algorithm": "auto"}]
    add_predictions(rows, "all_gather", 2)  # as in the test above, at the curve's copy rate
    assert rows[0]["predicted_time_us"] * 1e-6 == pytest.approx(a + S / 2 / 16e9 + 0.5 * (
        S / 2) / copy, rel=1e-6)
    path.write_text(V2_HOST.replace("stream_Bps: 16.0e9}",
                                    "stream_Bps: 16.0e9, curve: [[1, 0, 2]]}"))
    with pytest.raises(ConfigError, match="malformed `rates` table"):
        load_host(str(path))


def test_cross_memory_attach_is_priced_at_its_calibrated_rate(tmp_path, monkeypatch):
    """With a `cma_curve`, what a direct plan moves by cross-memory attach costs that rate at
    the bytes each rank touches, and leaves the copies: a 16 MiB all-gather on 2 ranks streams
    its own 8 MiB block and writes it into the peer (8 MiB by cross-memory attach, at the
    24 MiB point's 6 GB/s, not half a copy); a 2-rank two_shot all-reduce reads the peer's
    half (cross-memory attach), reduces it with its own (a copy) and writes the sum back."""
    path = tmp_path / "host.yaml"
    monkeypatch.setenv("GPUCOMM_HOST_YAML", str(path))
    path.write_text(V2_HOST + "cma_curve: [[1048576, 12.0e9], [25165824, 6.0e9]]\n")
    S, a, copy = 16 << 20, 1e-5, 10e9
    rows = [{"size": S, "count": S // 4, "type": "float32", "root": -1, "algorithm": "auto"}]
    add_predictions(rows, "all_gather", 2)
    assert rows[0]["predicted_time_us"] * 1e-6 == pytest.approx(a + S / 2 / 16e9 + S / 2 / 6e9,
                                                                rel=1e-6)
    S = 64 << 20  # each rank touches 128 MiB: beyond the curve, at its last rate
    rows = [{"size": S, "count": S // 4, "type": "float32", "root": -1, "algorithm": "auto"}]
    add_predictions(rows, "all_reduce", 2)
    assert rows[0]["predicted_time_us"] * 1e-6 == pytest.approx(
        2 * a + (S / 2) / copy + 2 * (S / 2) / 6e9, rel=1e-6)
    path.write_text(V2_HOST + "cma_curve: [[1048576, 12.0e9, 3]]\n")
    with pytest.raises(ConfigError, match="cma_curve"):
        load_host(str(path))


def test_copies_out_of_what_a_peer_staged_are_priced_at_their_calibrated_rate(tmp_path,
                                                                             monkeypatch):
    """With a `shared_curve`, a staged plan's copies out of a peer's shared buffer (lines the
    peer's core just wrote) cost that rate: a 64 KiB all-gather on 2 ranks stages its 32 KiB
    block (a copy, in cache here at 40 GB/s), copies it to its output (a copy) and copies the
    peer's staged block out (32 KiB at the curve's 8 GB/s). Staged: direct from 1 MiB here."""
    path = tmp_path / "host.yaml"
    monkeypatch.setenv("GPUCOMM_HOST_YAML", str(path))
    S, a = 64 << 10, 1e-5
    rows = [{"size": S, "count": S // 4, "type": "float32", "root": -1, "algorithm": "auto"}]
    staged = RuntimeOptions(direct_min_bytes=1 << 20)
    path.write_text(V2_HOST)
    add_predictions(rows, "all_gather", 2, options=staged)
    assert rows[0]["predicted_time_us"] * 1e-6 == pytest.approx(a + 3 * (S / 2) / 40e9)
    path.write_text(V2_HOST + "shared_curve: [[262144, 8.0e9]]\n")
    add_predictions(rows, "all_gather", 2, options=staged)
    assert rows[0]["predicted_time_us"] * 1e-6 == pytest.approx(a + 2 * (S / 2) / 40e9
                                                                + (S / 2) / 8e9)
    path.write_text(V2_HOST + "shared_curve: [[262144, -1]]\n")
    with pytest.raises(ConfigError, match="shared_curve"):
        load_host(str(path))


def test_a_calibration_taken_under_load_warns_once_per_use(tmp_path, monkeypatch, capsys):
    path = tmp_path / "host.yaml"
    monkeypatch.setenv("GPUCOMM_HOST_YAML", str(path))
    rows = [{"size": 1 << 20, "count": 1 << 18, "type": "float32", "root": -1,
             "algorithm": "auto"}]
    for load, warned in ((6.5, True), (2.0, False), (None, False)):
        extra = "" if load is None else f"load_1min: {load}\nusable_cores: 2\n"
        path.write_text(V2_HOST + extra)
        add_predictions(rows, "all_reduce", 2)
        err = capsys.readouterr().err
        assert rows[0]["predicted_time_us"] > 0
        if warned:
            assert err.count("\n") == 1 and "taken under load (1-minute load average 6.50 " \
                "on 2 usable cores" in err and str(path) in err, err
        else:
            assert "under load" not in err, err


def test_without_calibration_a_quick_one_runs_and_is_saved(tmp_path, monkeypatch):
    path = tmp_path / "fresh" / "host.yaml"
    monkeypatch.setenv("GPUCOMM_HOST_YAML", str(path))
    rows = [{"size": 8, "count": 2, "type": "float32", "root": -1, "algorithm": "one_shot"},
            {"size": 1 << 24, "count": 1 << 22, "type": "float32", "root": -1,
             "algorithm": "two_shot"}]
    note = add_predictions(rows, "all_reduce", 2)
    assert "quick" in note and path.exists()
    host = load_host(str(path))
    assert host["format"] == 2 and 0 < host["latency_s"] < 0.01
    assert host["load_1min"] >= 0 and host["usable_cores"] >= 1  # what load_warning reads
    r = host["rates"][1]
    assert 1e8 < r["copy_Bps"] <= r["copy_cache_Bps"] and 1e8 < r["reduce_Bps"]
    # the curve: the quick sizes, then the memory-sized buffers (3 of 32 MiB a process)
    assert [f for f, _, _ in r["curve"]] == [3 * (256 << 10), 3 * (4 << 20), 3 * (32 << 20)]
    assert r["curve"][-1][1:] == [r["copy_Bps"], r["reduce_Bps"]]
    from gpucomm.bench.hostcal import QUICK_CMA_CURVE, QUICK_SHARED_CURVE, cma_allowed
    assert [f for f, _ in host["shared_curve"]] == [4 * n for n in QUICK_SHARED_CURVE]
    if cma_allowed():  # two processes reading each other, at the quick sizes
        assert [f for f, _ in host["cma_curve"]] == [2 * n for n in QUICK_CMA_CURVE]
        assert all(b > 1e8 for _, b in host["cma_curve"])
    small, big = (row["predicted_time_us"] for row in rows)
    assert 0 < small < big
    assert " -" in format_table([dict(rows[0], predicted_time_us=None, time_us=1.0, algbw=0.0,
                                      busbw=0.0, wrong=0, redop="sum")])


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ConfigError, match="allowed are shm, mpi, gloo"):
        run_bench("nccl", 2, "all_reduce", [8])
    with pytest.raises(ConfigError, match="use --backend torch"):
        run_bench("gloo", 2, "all_reduce", [8], algorithm="ring")
    p = _cli("bench", "--collective", "all_reduce", "-d", "int32", "-o", "avg", "-e", "8")
    assert p.returncode == 2 and "avg" in p.stderr and "Traceback" not in p.stderr
    # what MPI's own collectives cannot do is refused before any rank starts
    with pytest.raises(ConfigError, match="--backend mpi: MPI has no standard bfloat16"):
        run_bench("mpi", 2, "all_gather", [8], dtype="bfloat16")
    with pytest.raises(ConfigError, match="MPI has no avg reduction"):
        run_bench("mpi", 2, "all_reduce", [8], op="avg")


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or mpiexec() is None,
                    reason="mpi4py/mpiexec not installed (pip install 'gpucomm[mpi]')")
def test_mpi_backend_runs_mpich_collectives():
    for coll in ("all_reduce", "reduce_scatter", "broadcast", "all_to_all"):
        rows = run_bench("mpi", 2, coll, [64, 4096], iters=2, warmup=1, check=1)
        assert all(r["wrong"] == 0 and r["ip_wrong"] == 0 for r in rows), (coll, rows)
        assert rows[0]["algorithm"] == "mpich"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch not installed (pip install 'gpucomm[torch]')")
def test_gloo_backend_runs_torch_distributed():
    rows = run_bench("gloo", 2, "all_reduce", [64, 4096], iters=2, warmup=1, check=1)
    assert all(r["wrong"] == 0 and r["ip_wrong"] == 0 for r in rows), rows
    assert rows[0]["algorithm"] == "gloo"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch not installed (pip install 'gpucomm[torch]')")
def test_torch_backend_runs_our_schedules_over_gloo_or_its_own():
    for coll, name in (("all_reduce", "ring"), ("all_gather", "direct")):
        rows = run_bench("torch", 2, coll, [64, 4096], algorithm=name, iters=2, warmup=1)
        assert all(r["wrong"] == 0 and r["ip_wrong"] == 0 for r in rows), (coll, rows)
        assert rows[0]["algorithm"] == name and rows[0]["backend"] == "torch"
    rows = run_bench("torch", 2, "broadcast", [64], root=1, iters=2, warmup=1)
    assert rows[0]["algorithm"] == "gloo" and rows[0]["wrong"] == 0, rows


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or mpiexec() is None,
                    reason="mpi4py/mpiexec not installed (pip install 'gpucomm[mpi]')")
def test_mpi_backend_runs_our_schedules_over_mpi():
    for coll, name in (("all_reduce", "recursive_doubling"), ("reduce_scatter", "ring")):
        rows = run_bench("mpi", 2, coll, [64, 4096], algorithm=name, iters=2, warmup=1)
        assert all(r["wrong"] == 0 and r["ip_wrong"] == 0 for r in rows), (coll, rows)
        assert rows[0]["algorithm"] == name and rows[0]["backend"] == "mpi"


def test_direct_plans_with_pushes_are_checked_in_and_out_of_place(monkeypatch):
    """Cross-memory reads and writes forced on for small sizes: a broadcast root that calls in
    place writes a share into its peers (out of place it copies its own output instead), and
    on 2 ranks the reducer of a half writes it into the peer; both halves checked."""
    monkeypatch.setenv("GPUCOMM_DIRECT_MIN_BYTES", "0")
    monkeypatch.setenv("GPUCOMM_DIRECT_SLICE_BYTES", "4096")
    monkeypatch.setenv("GPUCOMM_SLICE_BYTES", "1024")
    for coll, n, algo in (("broadcast", 2, "auto"), ("broadcast", 3, "binomial_tree"),
                          ("all_reduce", 2, "two_shot"), ("all_reduce", 2, "ring")):
        rows = run_bench("shm", n, coll, [8, 12288], iters=2, warmup=1, check=1,
                         root=n - 1 if coll == "broadcast" else 0, algorithm=algo)
        assert all(r["wrong"] == 0 and r["ip_wrong"] == 0 for r in rows), (coll, n, rows)


def test_nccl_tests_flags_and_output_are_read_back_by_doctor(host_yaml, tmp_path):
    """-g/-t give the ranks, -n iters, -m agg iters, -a/-z accepted, -d all/-o all loop; the
    output is nccl-tests' (header, device lines, table, footer) and doctor reads it."""
    from gpucomm.interop.nccltests import parse_log
    p = _cli("bench", "-t", "1", "-g", "2", "-b", "64", "-e", "256", "-f", "4", "-n", "2",
             "-w", "1", "-m", "2", "-a", "3", "-z", "3", "-G", "1", "-o", "all",
             "-c", "1", env={"GPUCOMM_HOST_YAML": host_yaml}, timeout=600)
    assert p.returncode == 0, p.stderr
    log = parse_log(p.stdout)
    assert log.collective == "all_reduce" and log.nranks == 2 and log.hosts
    assert (log.ngpus, log.iters, log.agg_iters, log.graph, log.validation) == (2, 2, 2, 1, 1)
    assert {r["redop"] for r in log.rows} == {"sum", "prod", "min", "max", "avg", "mulsum"}
    assert {r["type"] for r in log.rows} == {"float"}
    assert all(r["wrong"] == 0 for r in log.rows) and log.wrong_total == 0
    assert "# Collective test concluded: all_reduce_perf" in p.stdout.splitlines()
    from argparse import Namespace

    from gpucomm.cli.bench import _runs
    runs = _runs(Namespace(datatype="all", op="all", root="0"), get_collective("all_reduce"), 2)
    assert ("int8", "avg", 0) not in runs and ("int8", "max", 0) in runs
    assert {d for d, _, _ in runs} == {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                       "float16", "bfloat16", "float32", "float64",
                                       "f8e4m3", "f8e5m2"}
    runs = _runs(Namespace(datatype="float32", op="sum", root="all"), get_collective("reduce"), 3)
    assert runs == [("float32", "sum", r) for r in range(3)]
    bad = _cli("bench", "--nranks", "3", "-g", "2", "-e", "8")
    assert bad.returncode == 2 and "disagrees with -t 1 × -g 2" in bad.stderr


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_a_segment_still_mapped_by_exiting_ranks_is_removed_once_they_are_gone():
    """A killed MPICH job's ranks can outlive mpiexec by a moment, still mapping their segment:
    remove_stale_mpich waits for them (grace_s) instead of skipping it for good; one mapped past
    the grace belongs to a live job and stays."""
    import time

    from gpucomm.bench.backends import mapped_shm, remove_stale_mpich, shm_names
    holder = ("import mmap, sys, time\n"
              "f = open(sys.argv[1], 'r+b')\n"
              "m = mmap.mmap(f.fileno(), 4096)\n"
              "print('mapped', flush=True)\n"
              "time.sleep(float(sys.argv[2]))\n")
    before = shm_names()
    names = [f"mpich_shm_gpucommtest_{os.getpid()}_{k}" for k in (0, 1)]
    procs = []
    try:
        for name, hold in zip(names, (0.4, 30.0)):
            with open(f"/dev/shm/{name}", "wb") as f:
                f.truncate(4096)
            procs.append(subprocess.Popen([sys.executable, "-c", holder, f"/dev/shm/{name}",
                                           str(hold)], stdout=subprocess.PIPE, text=True))
            assert procs[-1].stdout.readline().strip() == "mapped"
        assert set(names) <= mapped_shm()
        t0 = time.monotonic()
        removed = remove_stale_mpich(before, grace_s=3.0)
        assert removed == names[:1]  # let go after 0.4 s, within the grace
        assert time.monotonic() - t0 >= 2.9  # the live one was waited for, then left
        assert names[1] in shm_names()
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for name in names:
            try:
                os.unlink(f"/dev/shm/{name}")
            except FileNotFoundError:
                pass
