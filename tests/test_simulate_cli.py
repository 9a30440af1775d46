"""`gpucomm sim`: the table, the JSON schema, --compare on an nccl-tests log, bad input."""
import json

import pytest

from gpucomm.cli import main
from gpucomm.cli.sim import parse_log

LOG = """# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20
#  Rank  0 Group  0 Pid  1 on host device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  2 on host device  1 [0x2b] NVIDIA H100 80GB HBM3
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    20.51   51.12   51.12      0    20.11   52.14   52.14      0
     2097152        524288     float     sum      -1    27.40   76.54   76.54      0    27.01   77.64   77.64      0
     4194304       1048576     float     sum      -1    39.06  107.38  107.38      0    38.77  108.18  108.18      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 78.1
#
# Collective test concluded: all_reduce_perf
"""


def run(capsys, *argv):
    rc = main(["sim", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_json_schema(capsys):
    rc, out, _ = run(capsys, "all_reduce_perf", "--system", "dgx-h100", "-b", "8", "-e", "1M",
                     "-f", "32", "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    assert [r["size"] for r in doc["rows"]] == [8, 256, 8192, 262144]
    for r in doc["rows"]:
        assert set(r) == {"size", "count", "type", "redop", "root", "time_us", "algbw", "busbw",
                          "algorithm", "protocol", "reason"}
        assert r["count"] == r["size"] // 4 and r["type"] == "float32"
        assert r["busbw"] == pytest.approx(r["algbw"] * 2 * 7 / 8, rel=1e-3, abs=2e-4)


def test_table_has_nccl_tests_columns(capsys):
    rc, out, _ = run(capsys, "all_gather_perf", "--system", "dgx-h100", "--nodes", "2",
                     "-b", "1M", "-e", "4M", "-f", "4", "--sim-model", "flow")
    assert rc == 0
    head = out.splitlines()[1].split()
    assert head[1:9] == ["size", "count", "type", "redop", "root", "time", "algbw", "busbw"]
    assert len([ln for ln in out.splitlines() if not ln.startswith("#")]) == 2


def test_trace_is_chrome_json(capsys, tmp_path):
    path = tmp_path / "t.json"
    rc, _, _ = run(capsys, "all_gather_perf", "--system", "dgx-h100", "-b", "1M", "-e", "1M",
                   "--algorithm", "ring", "--trace", str(path))
    assert rc == 0
    doc = json.loads(path.read_text())
    ops = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "op"]
    assert len(ops) == 7 * 8 and all(e["dur"] > 0 for e in ops)
    # then the protocol's fixed latency, up to the time sim printed (simulate.timed.phases)
    after = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "model"]
    assert after and after[-1]["ts"] + after[-1]["dur"] == pytest.approx(
        doc["otherData"]["time_us"])
    assert after[0]["ts"] == pytest.approx(max(e["ts"] + e["dur"] for e in ops))


def test_compare_parses_a_log(capsys, tmp_path):
    log = tmp_path / "ar.log"
    log.write_text(LOG)
    parsed = parse_log(LOG)
    assert parsed["collective"] == "all_reduce" and parsed["nranks"] == 2
    assert parsed["rows"][0] == {"size": 1048576, "count": 262144, "type": "float", "redop": "sum",
                                 "root": -1, "time_us": 20.51, "algbw": 51.12, "busbw": 51.12,
                                 "wrong": 0, "ip_time_us": 20.11, "ip_algbw": 52.14,
                                 "ip_busbw": 52.14, "ip_wrong": 0}
    rc, out, _ = run(capsys, "--compare", str(log), "--system", "dgx-h100", "--gpus-per-node",
                     "2", "--format", "json")
    assert rc == 0
    rows = json.loads(out)["rows"]
    assert [r["size"] for r in rows] == [1048576, 2097152, 4194304]
    for r in rows:
        assert r["busbw_error"] == pytest.approx((r["predicted_busbw"] - r["measured_busbw"])
                                                 / r["measured_busbw"], abs=1e-3)


@pytest.mark.parametrize("argv,needle", [
    (["--system", "nope"], "unknown system preset"),
    (["--system", "dgx-h100", "--nic", "carrier-pigeon", "--nodes", "2"], "nic"),
    (["--system", "dgx-h100", "--gpus-per-node", "9"], "gpus"),
    (["--system", "dgx-h100", "--algorithm", "warp"], "unknown algorithm"),
    (["all_reduce_perf", "-b", "8", "-e", "4"], "empty"),
    (["--collective", "frobnicate"], "unknown collective"),
    (["-o", "xor"], "reduction op"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and needle in err.lower()


def test_bad_size_and_bad_log(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["sim", "-b", "lots"])
    assert e.value.code == 2
    bad = tmp_path / "x.log"
    bad.write_text("nothing here\n")
    rc, _, err = run(capsys, "--compare", str(bad))
    assert rc == 2 and "no nccl-tests result rows" in err


def test_plot_writes_a_png(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "sweep.png"
    rc, _, _ = run(capsys, "--system", "dgx-h100", "-b", "1K", "-e", "1M", "-f", "32",
                   "--plot", str(path))
    assert rc == 0 and path.read_bytes()[:4] == b"\x89PNG"


def test_compare_reads_old_logs_without_root_column():
    old = """#                                                 out-of-place                    in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
           8             2   float     sum    48.46    0.00    0.00  0e+00    47.89    0.00    0.00  0e+00
     1048576        262144   float     sum    89.27   11.75   20.56  2e-07    88.97   11.79   20.62  2e-07
"""
    rows = parse_log(old)["rows"]
    assert [(r["size"], r["root"], r["time_us"], r["busbw"]) for r in rows] == \
        [(8, -1, 48.46, 0.0), (1048576, -1, 89.27, 20.56)]


def test_compare_reads_gpus_per_thread_from_the_log_header(capsys, tmp_path):
    small = LOG.replace("nGpus 1", "nGpus 8").replace("     1048576        262144",
                                                      "           8             2")
    parsed = parse_log(small)
    assert parsed["launch"] == {"gpus_per_thread": 8, "cuda_graph": False}
    log = tmp_path / "g8.log"
    log.write_text(small)
    args = ["--compare", str(log), "--system", "dgx-h100", "--gpus-per-node", "2", "--format",
            "json"]
    rc, out, _ = run(capsys, *args)
    g8 = json.loads(out)["rows"][0]["predicted_time_us"]
    rc, out, _ = run(capsys, *args, "-g", "1")
    g1 = json.loads(out)["rows"][0]["predicted_time_us"]
    assert rc == 0 and g8 == pytest.approx(40.0) and g1 < 20
    assert parse_log(small.replace("iters: 20", "iters: 20 graph: 1"))["launch"]["cuda_graph"]


def test_sweep_with_gpus_per_thread(capsys):
    rc, out, _ = run(capsys, "-b", "8", "-e", "8", "-g", "8", "--format", "json")
    assert rc == 0 and json.loads(out)["rows"][0]["time_us"] == pytest.approx(40.0)
    rc, out, _ = run(capsys, "-b", "8", "-e", "8", "-g", "8", "--cuda-graph",
                     "--format", "json")
    assert json.loads(out)["rows"][0]["time_us"] < 40.0
