"""`gpucomm bench` prints what nccl-tests 2.19 prints (issue 27, item 6): version line, header
and units line from its own printf formats, the count column per collective, wide values in
their columns, and `gpucomm doctor`'s parser reads it all back."""
from __future__ import annotations

import pytest

from gpucomm.bench.table import float_cell, format_log
from gpucomm.collectives import COLLECTIVES, layout
from gpucomm.interop.nccltests import parse_log

# nccl-tests src/util.cu writeResultHeader / writeBenchmarkLine*, verbatim printf formats
HEAD = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
PREAMBLE = "%12li  %12li  %8s  %6s  %6s"
BODY = "  %7s  %6s  %6s  %6g"

# nccl-tests' count column: each test's paramcount (src/<test>.cu GetCollByteCount)
PER_RANK = {"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"}


def test_float_cells_never_widen_as_get_float_str():
    assert float_cell(12.345, 7) == "  12.35"
    assert float_cell(1252544.75, 7) == "1252545"  # was -1252544.75 merged with algbw
    assert float_cell(12525447.5, 7) == "1.3e+07"
    assert float_cell(123456.7, 6) == "123457"
    assert float_cell(1234567.0, 6) == " 1e+06"
    assert float_cell(None, 6) == "   N/A"


@pytest.mark.parametrize("name", sorted(set(COLLECTIVES) - {"barrier"}))
def test_count_is_what_nccl_tests_prints_per_collective(name):
    lay = layout(name, 1 << 20, "float32", 8)
    assert lay.count == ((1 << 18) // 8 if name in PER_RANK else 1 << 18)
    assert lay.size == 1 << 20


def _row(size, count, t, wrong=0):
    return {"size": size, "count": count, "type": "float32", "redop": "none", "root": -1,
            "time_us": t, "algbw": size / t / 1e3, "busbw": size / t / 1e3 * 0.875,
            "wrong": wrong, "ip_time_us": t / 2, "ip_algbw": size / t * 2e-3,
            "ip_busbw": size / t * 2e-3 * 0.875, "ip_wrong": None}


def _log(rows, **kw):
    devices = [(r, "host1", r, "cpu", "CPU rank (shm)", 100 + r) for r in range(8)]
    return format_log(rows, test="all_gather_perf", devices=devices, ngpus=8, iters=20,
                      warmup=5, version="gpucomm=0.1.0 backend=shm", **kw)


def test_header_units_and_rows_use_nccl_tests_formats():
    text = _log([_row(1 << 20, 1 << 15, 12.5)])
    lines = text.splitlines()
    assert lines[0] == "# nccl-tests version 2.19.6 gpucomm=0.1.0 backend=shm"
    assert lines[1] == "# Collective test starting: all_gather_perf"
    assert lines[2].endswith("graph: 0 unalign: 0")
    head = HEAD % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                   "time", "algbw", "busbw", "#wrong", 0, "")
    units = HEAD % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
                    "(GB/s)", "(GB/s)", "", 0, "")
    i = lines.index(head)
    assert lines[i + 1] == units
    row = (PREAMBLE % (1 << 20, 1 << 15, "float", "none", "    -1") +
           BODY % ("  12.50", " 83.89", " 73.40", 0) + "  %7s  %6s  %6s    N/A" %
           ("   6.25", "167.77", "146.80"))
    assert lines[i + 2] == row
    assert lines[-2:] == ["# Collective test concluded: all_gather_perf", "#"]
    assert text.endswith("#\n")  # nccl-tests' writeErrors ends with an empty line


def test_cputime_and_timestamp_columns():
    row = dict(_row(64, 2, 5.0), timestamp="2026-01-02 03:04:05")
    lines = _log([row], cputime=True, timestamps=True).splitlines()
    head = HEAD % ("size", "count", "type", "redop", "root", "cputime", "algbw", "busbw",
                   "#wrong", "cputime", "algbw", "busbw", "#wrong", 19, "timestamp")
    assert head in lines
    assert any(line.endswith("  2026-01-02 03:04:05") for line in lines)


def test_wide_values_round_trip_through_doctors_parser():
    """Rows of 100,000 us and more, and large #wrong, keep their columns: doctor reads the
    same sizes, counts, times (to the printed digits) and wrong counts back."""
    rows = [_row(1 << 10, 32, 8.25), _row(1 << 30, 1 << 25, 1252544.75, wrong=655587),
            _row(16 << 30, 1 << 29, 12525447.5)]
    log = parse_log(_log(rows, blocking=3))
    assert log.collective == "all_gather" and log.nranks == 8 and log.ngpus == 8
    assert (log.iters, log.warmup, log.graph, log.validation) == (20, 5, 0, 1)
    assert "nccl-tests version 2.19.6" in log.version_line
    assert [r["size"] for r in log.rows] == [r["size"] for r in rows]
    assert [r["count"] for r in log.rows] == [r["count"] for r in rows]
    assert [r["time_us"] for r in log.rows] == [8.25, 1252545.0, 1.3e7]
    assert [r["wrong"] for r in log.rows] == [0, 655587, 0]
    assert [r["ip_wrong"] for r in log.rows] == [None] * 3
    assert log.wrong_total == 655587


# nccl-tests' GetCollByteCount per test (src/<test>.cu), transcribed: (send, recv, param)
# element counts for `count` = size / element size
def _get_coll_byte_count(test: str, count: int, elt: int, nranks: int) -> tuple[int, int, int]:
    if test in ("all_gather", "gather"):
        base = (count // nranks) & ~(16 // elt - 1)
        return base, base * nranks, base
    if test in ("reduce_scatter", "scatter"):
        base = (count // nranks) & ~(16 // elt - 1)
        return base * nranks, base, base
    if test == "all_to_all":
        base = (count // nranks) & ~(16 // elt - 1)
        return base * nranks, base * nranks, base
    return count, count, count  # all_reduce, broadcast, reduce, sendrecv


@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                  "broadcast", "reduce", "gather", "scatter", "sendrecv"])
def test_sizes_print_as_nccl_tests_sets_them_up(coll):
    """setupArgs: the row's size is max(send, recv) bytes and its count the param count; under
    16 B a rank the P-block collectives print 0 (nccl-tests prints the row)."""
    from gpucomm.cli._nccltests import nccl_tests_sizes
    sizes = [1, 3, 6, 8, 12, 16, 24, 32, 48, 64, 100, 128, 200, 255, 256, 1000, 4096, 4100]
    for dtype, elt in (("int8", 1), ("f8e4m3", 1), ("float16", 2), ("float32", 4),
                       ("float64", 8)):
        for nranks in (1, 2, 3, 4, 8, 16):
            got = nccl_tests_sizes(coll, sizes, dtype, nranks)
            for s, g in zip(sizes, got):
                send, recv, param = _get_coll_byte_count(coll, s // elt, elt, nranks)
                assert g == max(send, recv) * elt, (coll, dtype, nranks, s)
                if g:  # and the count gpucomm prints for it is nccl-tests' param count
                    assert layout(coll, g, dtype, nranks).count == param, (coll, dtype, s)


def test_sim_prints_the_small_rows_nccl_tests_prints(capsys):
    from gpucomm.cli import main
    assert main(["sim", "all_gather_perf", "-b", "8", "-e", "512", "-f", "2"]) == 0  # 8 GPUs
    rows = [x.split()[:2] for x in capsys.readouterr().out.splitlines() if x[:1] != "#" and x]
    assert rows == [["0", "0"]] * 4 + [["128", "4"], ["256", "8"], ["512", "16"]]
    assert main(["sim", "all_reduce_perf", "-b", "6", "-e", "6"]) == 0  # count = 6 / 4
    assert [x.split()[:2] for x in capsys.readouterr().out.splitlines() if x[:1] != "#"
            and x] == [["4", "1"]]


@pytest.mark.slow
def test_bench_runs_and_checks_the_zero_count_rows():
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    for test in ("all_gather_perf", "reduce_scatter_perf", "alltoall_perf", "gather_perf",
                 "scatter_perf"):
        done = subprocess.run([sys.executable, "-m", "gpucomm", "bench", test, "-b", "8", "-e",
                               "128", "-f", "4", "-g", "4", "-n", "1", "-w", "0"],
                              capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, PYTHONPATH=str(root / "src")))
        assert done.returncode == 0, done.stderr[-2000:]
        rows = [x.split() for x in done.stdout.splitlines() if x.strip() and x.lstrip()[0] != "#"]
        assert [r[:2] for r in rows] == [["0", "0"], ["0", "0"], ["128", "8"]], test
        assert all(r[8] == "0" and r[12] == "0" for r in rows)
