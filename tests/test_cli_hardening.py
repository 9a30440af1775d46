"""Regression tests for the hostile inputs of issue 11 (CLI half): each one a clean one-line
error and a non-zero exit (or, where the input is fine, a right answer) — never a traceback,
a hang or a silently wrong number."""
import errno
import json
import os
import time

import pytest

from gpucomm import limits
from gpucomm.cli import main
from gpucomm.dtypes import parse_size
from gpucomm.errors import ConfigError


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert message in err, err
    return err


@pytest.fixture
def binary_file(tmp_path):
    p = tmp_path / "noise.yaml"
    p.write_bytes(bytes(range(256)) * 8)
    return p


# --- output paths: checked before any work ------------------------------------------------
OUTPUTS = [
    (["sim", "-e", "1K", "--plot"], "--plot"),
    (["sim", "-e", "1K", "--trace"], "--trace"),
    (["topo", "show", "--plot"], "--plot"),
    (["topo", "export", "--output"], "--output"),
    (["bench", "-e", "1K", "--plot"], "--plot"),
]


@pytest.mark.parametrize("argv, flag", OUTPUTS,
                         ids=lambda x: " ".join(x) if isinstance(x, list) else x)
@pytest.mark.parametrize("kind", ["directory", "missing-dir", "proc", "too-long", "extension"])
def test_bad_output_paths_are_one_line_errors(capsys, tmp_path, argv, flag, kind):
    ext = {"--trace": ".json", "--output": ".yaml"}.get(flag, ".png")
    path = {"directory": tmp_path,
            "missing-dir": tmp_path / "no" / f"x{ext}",
            "proc": f"/proc/gpucomm-test{ext}",
            "too-long": tmp_path / ("a" * 300 + ext),
            "extension": tmp_path / "x.txt"}[kind]
    t0 = time.perf_counter()
    err = one_line_error(capsys, argv + [path], flag)
    assert time.perf_counter() - t0 < 30  # refused up front, not after the work
    assert not (tmp_path / "x.txt").exists() and "wrote" not in err


def test_plot_to_a_directory_no_longer_writes_dir_png(capsys, tmp_path):
    d = tmp_path / "plots"
    d.mkdir()
    one_line_error(capsys, ["sim", "-e", "1K", "--plot", d], "--plot")
    assert not (tmp_path / "plots.png").exists()


def test_good_output_paths_still_work(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png, trace, yml = tmp_path / "a.png", tmp_path / "t.json", tmp_path / "t.yaml"
    code, _, _ = run(capsys, "sim", "-b", "1M", "-e", "1M", "--plot", png, "--trace", trace)
    assert code == 0 and png.stat().st_size > 0 and json.loads(trace.read_text())
    code, _, _ = run(capsys, "topo", "export", "--output", yml)
    assert code == 0 and "devices" in yml.read_text()


def test_probing_an_output_path_leaves_no_file_when_the_command_fails(capsys, tmp_path):
    out = tmp_path / "never.png"
    code, _, _ = run(capsys, "sim", "-e", "1K", "--plot", out, "--collective", "nope")
    assert code == 2 and not out.exists()


def test_an_output_file_is_written_whole_with_no_temporary_file_left(tmp_path, monkeypatch):
    from gpucomm.outputs import write_text
    real, link = tmp_path / "real.csv", tmp_path / "link.csv"
    link.symlink_to(real)
    write_text(str(link), "a\n")  # through the link, as open(path, "w") writes: the link kept
    assert link.is_symlink() and real.read_text() == "a\n"
    write_text("/dev/null", "x")  # a device is written in place, never renamed over
    with pytest.raises(UnicodeEncodeError):  # any error: the old file stays, whole
        write_text(str(real), "b\ud800")

    def full_disk(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(ConfigError, match="cannot write .*real.csv': No space left on device"):
        write_text(str(real), "c\n")
    assert real.read_text() == "a\n" and sorted(os.listdir(tmp_path)) == ["link.csv", "real.csv"]


def test_the_librarys_files_are_written_whole_too(tmp_path, monkeypatch):
    # a saved topology, a trace and an emulated cluster's topology go through outputs.write_text
    # as the commands' files do: a write that fails leaves the old file and no temporary one
    from gpucomm.algorithms import build
    from gpucomm.report.trace import write_trace
    from gpucomm.simulate import simulate
    from gpucomm.topology import build_topology
    topo = build_topology("dgx-h100", nodes=1)
    res = simulate(build("all_reduce", "ring", 8), topo, 1 << 20, trace=True)
    saved, trace = tmp_path / "t.yaml", tmp_path / "t.json"
    topo.save(saved)
    write_trace(res, trace, topo)
    before = saved.read_text(), trace.read_text()

    def full_disk(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(ConfigError, match="cannot write topology .*t.yaml': No space left"):
        topo.save(saved)
    with pytest.raises(ConfigError, match="cannot write trace .*t.json': No space left"):
        write_trace(res, trace, topo)
    assert (saved.read_text(), trace.read_text()) == before
    assert sorted(os.listdir(tmp_path)) == ["t.json", "t.yaml"]


# --- binary and oversized inputs -----------------------------------------------------------
@pytest.mark.parametrize("argv, what", [
    (["sim", "--topology"], "topology file"),
    (["sim", "--compare"], "nccl-tests log"),
    (["topo", "show", "--topology"], "topology file"),
    (["plan", "--model"], "model config"),
])
def test_binary_input_files_are_refused(capsys, binary_file, argv, what):
    one_line_error(capsys, argv + [binary_file], f"{what} '{binary_file}' is not UTF-8 text")


def test_endless_input_file_is_refused_by_the_limit(capsys, tmp_path):
    one_line_error(capsys, ["sim", "--compare", "/dev/zero"], "is a device: give a regular file")
    big = tmp_path / "big.log"
    with open(big, "wb") as f:   # sparse: 65 MiB on paper, nothing on disk
        f.truncate(65 << 20)
    one_line_error(capsys, ["sim", "--compare", big], "larger than the limit of 64 MiB")


# --- sizes and numbers ---------------------------------------------------------------------
@pytest.mark.parametrize("size", ["10000000000000000000", "100000000000000000000", "2T", "1025G"])
def test_sizes_beyond_any_machine_are_refused_naming_the_limit(capsys, size):
    one_line_error(capsys, ["sim", "-b", size, "-e", size], "1099511627776 B (1 TiB")


def test_largest_size_is_accepted(capsys):
    code, out, _ = run(capsys, "sim", "-b", "1T", "-e", "1T", "--format", "json")
    row = json.loads(out)["rows"][0]
    assert code == 0 and row["size"] == 1 << 40 and 0 < row["busbw"] < 1e4


@pytest.mark.parametrize("argv, message", [
    (["sim", "-b", "9" * 5000], "5000 digits: too large"),
    (["algo", "show", "ring", "all_reduce", "--ranks", "9" * 30], "at most 20 digits"),
    (["topo", "route", "0", "9" * 50], "at most 20 digits"),
    (["sim", "-f", "1.000001"], "more than the limit of 1000"),
    (["sim", "-f", "nan"], "finite number > 1"),
    (["sim", "-f", "inf"], "finite number > 1"),
    (["sim", "-f", "-2"], "finite number > 1"),
    (["sim", "--oversubscription", "nan"], "not a finite number"),
    (["bench", "-b", "1", "-e", "1G", "-i", "1"], "1073741824 sizes, more than the limit of 1000"),
    (["sim", "-o", "avg", "-d", "int32"], "op 'avg' is not supported for integer dtype int32"),
])
def test_numbers_out_of_range_are_refused(capsys, argv, message):
    one_line_error(capsys, argv, message)


def test_parse_size_is_exact_and_never_overflows():
    assert parse_size("1.5K") == 1536 and parse_size("1T") == 1 << 40
    assert parse_size("99999999999999999999") == 99999999999999999999
    with pytest.raises(ConfigError, match="digits"):
        parse_size("9" * 5000)


def test_sweep_near_one_has_no_repeated_sizes():
    from gpucomm.cli.common import sweep_sizes
    sizes = sweep_sizes(1, 64, 1.01)
    assert sizes == sorted(set(sizes)) and sizes[0] == 1 and sizes[-1] <= 64


# --- rank counts ---------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["sim", "--nodes", "100000"],
    ["topo", "show", "--nodes", "100000"],
    ["topo", "route", "0", "1", "--nodes", "100000"],
    ["plan", "--model", "llama3-8b", "--nodes", "100000"],
    ["plan", "--model", "llama3-8b", "--compare", "nodes=1,100000"],
    ["plan", "--model", "llama3-8b", "--nodes", "100000", "--search"],
])
def test_clusters_beyond_the_limit_are_refused(capsys, argv):
    t0 = time.perf_counter()
    one_line_error(capsys, argv, "800000 GPUs is more than the largest cluster gpucomm models, "
                                 "131072 GPUs")
    assert time.perf_counter() - t0 < 30


def test_100000_gpus_are_within_the_limit():
    """12,500 DGX nodes (100,000 GPUs) must stay answerable (issue 12 makes it fast)."""
    limits.check_model_ranks(12_500, 8)
    with pytest.raises(ConfigError, match="at most 16384 nodes of 8"):
        limits.check_model_ranks(16_385, 8)


@pytest.mark.parametrize("argv, message", [
    (["algo", "show", "ring", "all_reduce", "--ranks", "100000"],
     "--ranks 100000 is more than the limit of 128"),
    (["algo", "run", "ring", "all_reduce", "--ranks", "100000"],
     "--ranks 100000 is more than the limit of 128"),
    (["algo", "verify", "--all", "--max-ranks", "100000"],
     "--max-ranks 100000 is more than the limit of 128"),
    (["algo", "run", "ring", "all_reduce", "--ranks", "128", "--size", "1T"], "more than the "
     "in-process checker's limit of 256 MiB"),
    (["algo", "run", "direct", "all_to_all", "--ranks", "128", "--size", "16M"],
     "limit of 256 MiB"),
    (["algo", "show", "bruck", "all_to_all", "--ranks", "129"],
     "--ranks 129 is more than the limit of 128"),
    (["bench", "--nranks", "1000"], "ranks on one host 1000 is more than the limit of 64"),
    (["bench", "-e", "1T"], "of memory; this host has"),
])
def test_work_beyond_the_limits_is_refused_up_front(capsys, argv, message):
    t0 = time.perf_counter()
    one_line_error(capsys, argv, message)
    assert time.perf_counter() - t0 < 30


# --- bench: values checked before any rank starts ------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--timeout", "0"], "--timeout: 0 is out of range (allowed: 0.001..86400"),
    (["--timeout", "-1"], "--timeout: -1 is out of range (allowed: 0.001..86400"),
    (["--timeout", "nan"], "'nan' is not a finite number (allowed: 0.001..86400)"),
    (["--timeout", "inf"], "'inf' is not a finite number (allowed: 0.001..86400)"),
    (["--timeout", "1e308"], "1e+308 is out of range (allowed: 0.001..86400"),
    (["--algorithm", "nvls"], "nvls is the simulator's model of in-switch reduction"),
    (["--algorithm", "bogus"], "unknown algorithm 'bogus' for all_reduce"),
    (["-w", "-1"], "-1 is out of range (allowed: 0..1000000)"),
    (["-n", "9223372036854775808"], "--iters: 9223372036854775808 is out of range"),
    (["-G", "-1"], "--cudagraph: -1 is out of range (allowed: 0..1000000)"),
    (["--check", "7"], "check must be 0 (off) or 1 (on), got 7"),
    (["--collective", "sendrecv"], "allowed are all_reduce, reduce_scatter, all_gather, "
                                   "broadcast, reduce, all_to_all, gather, scatter"),
    (["--collective", "nope"], "bench cannot run collective 'nope'"),
    (["-f", "nan"], "finite number > 1"),
    (["-r", "5"], "root 5 is out of range"),
])
def test_bench_refuses_bad_values_before_starting_ranks(capsys, argv, message):
    t0 = time.perf_counter()
    err = one_line_error(capsys, ["bench", "-e", "1K", *argv], message)
    assert "[rank" not in err
    assert time.perf_counter() - t0 < 10  # no ranks were started


def test_bench_unknown_collective_lists_only_what_it_runs(capsys):
    err = one_line_error(capsys, ["bench", "--collective", "nope"], "allowed are")
    assert "sendrecv" not in err and "barrier" not in err


# --- silently wrong answers ----------------------------------------------------------------
def test_nvls_rows_show_the_op_asked_for(capsys):
    code, out, _ = run(capsys, "sim", "-o", "avg", "-b", "64M", "-e", "64M", "--algorithm",
                       "nvls", "--protocol", "simple", "--format", "json")
    rows = json.loads(out)["rows"]
    assert code == 0 and rows[0]["algorithm"] == "nvls" and rows[0]["redop"] == "avg"


def test_auto_sweep_rows_all_show_the_op(capsys):
    code, out, _ = run(capsys, "sim", "-o", "max", "-b", "1K", "-e", "1G", "-f", "32",
                       "--format", "json")
    rows = json.loads(out)["rows"]
    assert code == 0 and {r["redop"] for r in rows} == {"max"}


def test_vpp_must_divide_the_layers_of_a_stage(capsys):
    one_line_error(capsys, ["plan", "--model", "llama3-8b", "--pp", "2", "--vpp", "7"],
                   "vpp=7 does not divide the 16 layers per stage (32 layers / pp=2): valid vpp "
                   "are 1, 2, 4, 8, 16")
    code, _, _ = run(capsys, "plan", "--model", "llama3-8b", "--pp", "2", "--vpp", "4")
    assert code == 0


def test_argparse_errors_are_one_line(capsys):
    one_line_error(capsys, ["sim", "--sim-model", "nope"], "invalid choice")
    one_line_error(capsys, ["sim", "--bogus-flag"], "unrecognized arguments")


def test_an_os_error_after_the_checks_is_one_line(capsys, monkeypatch):
    import gpucomm.cli.topo as topo

    def full(*a, **k):
        raise OSError(28, "No space left on device", "/tmp/x.yaml")
    monkeypatch.setattr(topo.Topology, "to_yaml", full)
    one_line_error(capsys, ["topo", "export"], "'/tmp/x.yaml' No space left on device")


# --- newcomer: README commands and make test -----------------------------------------------
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_make_test_puts_the_venv_tools_on_path():
    text = open(os.path.join(ROOT, "Makefile")).read()
    test_rule = text[text.index("\ntest:"):].split("\n\n")[0]
    assert "PATH=\"$(abspath $(VENV))/bin:$$PATH\"" in test_rule


def test_readme_says_how_to_reach_gpucomm_after_make_demo():
    text = open(os.path.join(ROOT, "README.md")).read()
    assert "source .venv/bin/activate" in text and ".venv/bin/gpucomm" in text


def test_the_docs_document_the_limits():
    text = open(os.path.join(ROOT, "docs", "limits.md")).read()
    for value in ("1 TiB", "131,072", "| 128 |", "64 ranks", "1,000 sizes"):
        assert value in text, value


# --- found by tests/test_cli_properties.py ---------------------------------------------------
def test_route_to_itself_has_no_infinite_bottleneck(capsys):
    code, out, _ = run(capsys, "topo", "route", "0", "0", "--format", "json")
    assert code == 0 and json.loads(out)["routes"][0]["bottleneck_GBps"] is None
    code, out, _ = run(capsys, "topo", "route", "0", "0")
    assert code == 0 and "the same rank, no links" in out and "inf" not in out


@pytest.mark.parametrize("ranks, message", [("100000", "--ranks 100000 is more than the limit "
                                                       "of 128"), ("0", "0 must be >= 1")])
def test_demo_ranks_are_bounded(capsys, ranks, message):
    one_line_error(capsys, ["demo", "--ranks", ranks], message)


def test_plan_plot_path_is_checked_before_planning(capsys, tmp_path):
    one_line_error(capsys, ["plan", "--model", "llama3-8b", "--plot", tmp_path], "--plot")


@pytest.mark.parametrize("text", ["[" * 2000, "key: [unclosed", "\t- a\n  b: ["])
@pytest.mark.parametrize("argv, suffix", [(["sim", "--topology"], ".yaml"),
                                          (["plan", "--model"], ".yaml")])
def test_malformed_or_deeply_nested_yaml_is_one_line(capsys, tmp_path, text, argv, suffix):
    f = tmp_path / f"bad{suffix}"
    f.write_text(text)
    one_line_error(capsys, argv + [f], str(f))
