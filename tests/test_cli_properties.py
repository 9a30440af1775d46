"""Property: every subcommand, given random and hostile arguments (sizes, counts, names, paths,
YAML, binary files), either exits 0 printing sane finite numbers, or prints a one-line error
and exits non-zero — never a traceback, never longer than a bound.

Most examples run the CLI in-process through `gpucomm.cli.main` (fast); a small sample runs
`python -m gpucomm` as a user would. Sizes and cluster scales are drawn so that what is valid
stays small: the huge values drawn are the ones the limits must refuse.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import subprocess
import sys
import time

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from gpucomm.algorithms import algorithms
from gpucomm.cli import main

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
BOUND_S = 60.0  # per command, on a loaded 2-core CI machine; refusals take well under 1 s
# derandomized (the same examples on every run, so CI is repeatable); no shrinking: a CLI
# call takes up to seconds, and the failing argv is printed as it is
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --- hostile values ------------------------------------------------------------------------
def mostly(good, bad, bad_in=5):
    """`good` most of the time, `bad` one time in `bad_in`: each command sees a hostile value
    or two among sane ones, so runs get past argument checking into the real work."""
    return st.integers(1, bad_in).flatmap(lambda k: bad if k == 1 else good)


def ints(small=(0, 1, 2, 3, 4, 8)):
    return mostly(st.sampled_from([str(x) for x in small]),
                  st.one_of(st.sampled_from(["-1", "-0", "100000", "9" * 30, "1e3", "abc", "",
                                             " 2", "0x10", "2.5", "nan"]),
                            st.integers(-(2 ** 70), 2 ** 70).map(str)))


SIZES = mostly(
    st.one_of(st.sampled_from(["8", "1K", "64K", "1M", "4M", "1G", "1KB", "1kib", "1.5K"]),
              st.integers(1, 1 << 22).map(str)),
    st.sampled_from(["1T", "0", "-8", "7", "1e19", "10000000000000000000", "9" * 5000, "abc",
                     "", "nan", "2T"]))
FLOATS = mostly(st.sampled_from(["2", "4", "1.5", "64", "3"]),
                st.one_of(st.sampled_from(["1.000001", "1", "0", "-2", "nan", "inf", "-inf",
                                           "1e308", "abc"]),
                          st.floats(allow_nan=True, allow_infinity=True).map(repr)))
NAMES = mostly(st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                   "reduce", "all_to_all", "gather", "scatter", "sendrecv",
                                   "barrier", "ring", "nvls", "auto", "hierarchical",
                                   "double_binary_tree", "one_shot", "dgx-h100", "dgx-a100",
                                   "pcie", "h100", "nvlink4", "pcie5", "ib-ndr", "float32",
                                   "int32", "bfloat16", "avg", "sum", "prod", "min", "max",
                                   "float16", "int8"]),
                  st.one_of(st.sampled_from(["", "xor", "-x", "ring "]), st.text(max_size=12)))


@st.composite
def paths(draw, tmp, suffix=".png"):
    kind = draw(st.sampled_from(["dir", "missing", "proc", "long", "ext", "ok", "dev"]))
    return {"dir": str(tmp), "missing": str(tmp / "no" / f"x{suffix}"),
            "proc": f"/proc/x{suffix}", "long": str(tmp / ("a" * 300 + suffix)),
            "ext": str(tmp / "x.txt"), "ok": str(tmp / f"out{suffix}"),
            "dev": "/dev/null"}[kind]


def _model_yaml(draw):
    base = {"name": "m", "layers": 4, "hidden": 256, "ffn": 512, "heads": 4, "kv_heads": 4,
            "vocab": 1000, "mlp": "swiglu"}
    key = draw(st.sampled_from(sorted(base) + ["experts", "bogus"]))
    value = draw(st.one_of(st.integers(-5, 2 ** 64), st.text(max_size=5), st.none(),
                           st.floats(allow_nan=True), st.lists(st.integers(), max_size=2)))
    return yaml.safe_dump({**base, key: value})


def _topology_yaml(draw):
    node = {"name": "t", "nodes": 1, "gpus_per_node": 2,
            "devices": [{"name": "g0", "kind": "gpu", "node": 0, "model": "h100"},
                        {"name": "g1", "kind": "gpu", "node": 0, "model": "h100"}],
            "links": [{"src": "g0", "dst": "g1", "bandwidth_Bps": 1e11, "latency_s": 1e-6,
                       "tech": "nvlink4"},
                      {"src": "g1", "dst": "g0", "bandwidth_Bps": 1e11, "latency_s": 1e-6,
                       "tech": "nvlink4"}]}
    where = draw(st.sampled_from(["top", "device", "link", "drop"]))
    value = draw(st.one_of(st.integers(-5, 2 ** 64), st.text(max_size=5), st.none(),
                           st.floats(allow_nan=True, allow_infinity=True), st.just([]),
                           st.just({})))
    if where == "top":
        node[draw(st.sampled_from(["name", "nodes", "gpus_per_node", "devices", "links"]))] = value
    elif where == "device":
        node["devices"][1][draw(st.sampled_from(["name", "kind", "node", "model"]))] = value
    elif where == "link":
        node["links"][0][draw(st.sampled_from(["src", "dst", "bandwidth_Bps", "latency_s",
                                                "tech"]))] = value
    else:
        node.pop(draw(st.sampled_from(sorted(node))))
    return yaml.safe_dump(node)


HOSTILE_TEXT = ["", "[" * 2000, "a: &a [*a, *a]\nb: [*a, *a, *a]", "!!python/object:os.system {}",
                "- 1\n- 2", "nodes: 1\n", "\x00\x01", "key: [unclosed", "🙂: 1"]


@st.composite
def input_files(draw, tmp, kind):
    """A path to a hostile or random file for --topology, --compare or --model."""
    choice = draw(st.sampled_from(["binary", "text", "random", "dir", "missing", "zero"]))
    if choice == "dir":
        return str(tmp)
    if choice == "missing":
        return str(tmp / "missing.yaml")
    if choice == "zero":
        return "/dev/zero"
    p = tmp / f"in-{draw(st.integers(0, 10 ** 9))}.yaml"
    if choice == "binary":
        p.write_bytes(draw(st.binary(min_size=1, max_size=300)) + b"\xff\xfe")
    elif choice == "text":
        p.write_text(draw(st.sampled_from(HOSTILE_TEXT)))
    else:
        p.write_text(_model_yaml(draw) if kind == "model" else _topology_yaml(draw)
                     if kind == "topology" else draw(st.text(max_size=300)))
    return str(p)


def cluster_args(draw, tmp):
    out = []
    if draw(st.booleans()):
        out += ["--system", draw(st.one_of(st.sampled_from(["dgx-h100", "dgx-a100", "pcie",
                                                             "dgx-b200"]), NAMES))]
    if draw(st.booleans()):
        out += ["--nodes", draw(st.sampled_from(["1", "2", "0", "-3", "100000", "16385",
                                                 "9" * 25, "x"]))]
    if draw(st.integers(0, 4)) == 0:
        out += ["--topology", draw(input_files(tmp, "topology"))]
    if draw(st.integers(0, 4)) == 0:
        out += [draw(st.sampled_from(["--gpus-per-node", "--nics-per-node", "--pcie-gen"])),
                draw(ints())]
    if draw(st.integers(0, 4)) == 0:
        out += ["--oversubscription", draw(FLOATS)]
    if draw(st.integers(0, 5)) == 0:
        out += ["--nic", draw(NAMES)]
    return out


# --- commands ------------------------------------------------------------------------------
@st.composite
def sim_argv(draw, tmp):
    argv = ["sim"] + cluster_args(draw, tmp)
    for flag, values in (("--collective", NAMES), ("-b", SIZES), ("-e", SIZES), ("-f", FLOATS),
                         ("-d", NAMES), ("-o", NAMES), ("-r", ints()), ("--algorithm", NAMES),
                         ("--protocol", st.sampled_from(["ll", "simple", "bogus"])),
                         ("--param", st.sampled_from(["channels=2", "group_size=0", "x", "=",
                                                     "a=b"])),
                         ("-g", ints()),
                         ("--plot", paths(tmp)), ("--trace", paths(tmp, ".json")),
                         ("--compare", input_files(tmp, "log"))):
        if draw(st.integers(0, 3 if flag in ("-b", "-e", "--collective", "-o", "-d") else 6)) == 0:
            argv += [flag, draw(values)]
    if "-e" not in argv:
        argv += ["-e", "1M"]  # keep a valid sweep short
    return argv


@st.composite
def topo_argv(draw, tmp):
    action = draw(st.sampled_from(["list", "show", "route", "export"]))
    argv = ["topo", action]
    if action == "list":
        return argv + draw(st.sampled_from([[], ["--format", "json"], ["--format", "x"]]))
    argv += cluster_args(draw, tmp)
    if action == "route":
        argv += [draw(ints()), draw(ints())]
    if action == "show" and draw(st.booleans()):
        argv += ["--plot", draw(paths(tmp))]
    if action == "export" and draw(st.booleans()):
        argv += ["--output", draw(paths(tmp, ".yaml"))]
    return argv


@st.composite
def algo_argv(draw, tmp):
    action = draw(st.sampled_from(["list", "show", "run", "verify"]))
    if action == "list":
        return ["algo", "list", "--format", "json"]
    if action == "verify":
        argv = ["algo", "verify"]
        if draw(st.booleans()):
            argv.append(draw(NAMES))
        if draw(st.booleans()):
            argv += ["--collective", draw(NAMES)]
        argv += ["--max-ranks", draw(st.sampled_from(["1", "3", "6", "0", "129", "100000",
                                                      "9" * 30]))]
        return argv
    pair = draw(mostly(st.sampled_from(sorted({(a.collective, a.name) for a in algorithms()})),
                       st.tuples(NAMES, NAMES)))
    argv = ["algo", action, pair[1], pair[0]]
    argv += ["--ranks", draw(ints(small=(1, 2, 3, 4, 5, 8, 16, 128, 129)))]
    for flag, values in (("--root", ints()), ("--size", SIZES), ("-d", NAMES),
                         ("--param", st.sampled_from(["channels=2", "group_size=2", "chunks=0",
                                                     "x=1", "channels=-1", "channels=99999"]))):
        if draw(st.integers(0, 3)) == 0:
            argv += [flag, draw(values)]
    if action == "run" and draw(st.booleans()):
        argv += ["-o", draw(NAMES)]
    return argv


@st.composite
def plan_argv(draw, tmp):
    model = draw(mostly(st.sampled_from(["llama3-8b", "megatron-gpt-1.7b", "mixtral-8x7b"]),
                        st.one_of(st.sampled_from(["nope", "", "llama3-405b"]),
                                  input_files(tmp, "model"))))
    argv = ["plan", "--model", model, "--tp", draw(ints(small=(4, 8)))]
    for flag in ("--pp", "--dp", "--cp", "--ep", "--vpp", "--seq", "--global-batch",
                 "--micro-batch", "--nodes", "--zero"):
        if draw(st.integers(0, 7)) == 0:
            argv += [flag, draw(ints(small=(1, 2, 4, 8) if flag != "--seq" else
                                     (1024, 2048, 4096, 7)))]
    if draw(st.integers(0, 4)) == 0:
        argv += ["--mode", draw(st.sampled_from(["train", "decode", "prefill", "x"]))]
    if draw(st.integers(0, 4)) == 0:
        argv += ["--compare", draw(st.sampled_from(["system=dgx-h100,pcie", "nodes=1,100000",
                                                    "tp=1,3", "x=1", "nodes=", "=",
                                                    "oversubscription=nan,2", "pp=0"]))]
    if draw(st.integers(0, 4)) == 0:
        argv += ["--oversubscription", draw(FLOATS)]
    if draw(st.integers(0, 8)) == 0:
        argv += ["--plot", draw(paths(tmp))]
    if draw(st.integers(0, 8)) == 0:
        argv += ["--search", "--top", draw(ints())]
    return argv


@st.composite
def hw_argv(draw, tmp):
    if draw(st.booleans()):
        return ["hw", "list", "--kind", draw(st.sampled_from(["links", "gpus", "all", "x"]))]
    return ["hw", "compare", draw(NAMES), draw(NAMES)]


@st.composite
def bench_argv(draw, tmp):
    """bench with at least one value its checks must refuse (valid sweeps start processes;
    tests/test_bench.py runs those)."""
    bad = draw(st.sampled_from([
        ["--timeout", draw(st.sampled_from(["0", "-1", "nan", "inf", "-inf"]))],
        ["-w", draw(st.sampled_from(["-1", "-100", "x"]))],
        ["--check", draw(st.sampled_from(["7", "-1", "2", "x"]))],
        ["--algorithm", draw(st.sampled_from(["nvls", "bogus", ""]))],
        ["--nranks", draw(st.sampled_from(["0", "65", "1000", "9" * 30]))],
        ["--collective", draw(st.sampled_from(["sendrecv", "barrier", "nope"]))],
        ["-e", draw(st.sampled_from(["1T", "2T", "1e19", "9" * 5000]))],
        ["-f", draw(st.sampled_from(["nan", "inf", "1", "1.000001"]))],
        ["-i", "1", "-b", "1", "-e", "1G"],
        ["-r", draw(st.sampled_from(["2", "-1", "9" * 25]))],
        ["--plot", draw(st.sampled_from([str(tmp), str(tmp / "x.txt"), "/proc/x.png"]))],
        ["-o", draw(st.sampled_from(["xor", "avg"])), "-d", "int32"],
    ]))
    extra = []
    for flag, values in (("-b", SIZES), ("-d", NAMES), ("--backend",
                                                        st.sampled_from(["shm", "mpi", "x"]))):
        if draw(st.integers(0, 3)) == 0:
            extra += [flag, draw(values)]
    return ["bench", "-e", "1K", "--iters", "1", "-w", "0"] + extra + bad


# --- the property --------------------------------------------------------------------------
def run_in_process(argv):
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse (--help, bad flags)
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - t0


_BAD_NUMBER = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?![\w])", re.IGNORECASE)


def _finite(obj, where="$"):
    if isinstance(obj, float):
        assert math.isfinite(obj), f"{where} = {obj}"
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _finite(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _finite(v, f"{where}[{i}]")


def check_outcome(argv, code, out, err, seconds):
    shown = " ".join(a if len(a) < 60 else a[:57] + "..." for a in argv)
    assert seconds < BOUND_S, f"gpucomm {shown} took {seconds:.1f} s"
    assert "Traceback" not in err and "Traceback" not in out, f"gpucomm {shown}:\n{err}"
    if code == 0:
        if "--format" in argv and argv[argv.index("--format") + 1:][:1] == ["json"]:
            _finite(json.loads(out))
        else:
            assert not _BAD_NUMBER.search(out), f"gpucomm {shown} printed:\n{out[-2000:]}"
    else:
        lines = err.strip("\n").splitlines()
        assert len(lines) == 1, f"gpucomm {shown} (exit {code}) wrote:\n{err[-3000:]}"
        assert "error:" in lines[0], lines[0]
        assert code == 1 or code == 2, (code, lines)


def in_process(strategy, max_examples):
    @settings(max_examples=max_examples, **SETTINGS)
    @given(data=st.data())
    def check(tmp_path_factory, data):
        tmp = tmp_path_factory.mktemp("cli")
        argv = data.draw(strategy(tmp), label="argv")
        if data.draw(st.integers(0, 3), label="json") == 0 and argv[0] != "bench":
            argv = argv + ["--format", "json"]
        check_outcome(argv, *run_in_process(argv))
    return check


test_sim_property = in_process(sim_argv, 60)
test_topo_property = in_process(topo_argv, 40)
test_algo_property = in_process(algo_argv, 60)
test_plan_property = in_process(plan_argv, 40)
test_hw_property = in_process(hw_argv, 15)
test_bench_refusals_property = in_process(bench_argv, 30)


@settings(max_examples=8, **SETTINGS)
@given(data=st.data())
def test_subprocess_sample(tmp_path_factory, data):
    """The real thing: `python -m gpucomm ...` in a fresh process, for a sample of commands."""
    tmp = tmp_path_factory.mktemp("cli-sub")
    strategy = data.draw(st.sampled_from([sim_argv, topo_argv, algo_argv, plan_argv,
                                          bench_argv]), label="command")
    argv = data.draw(strategy(tmp), label="argv")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "gpucomm", *argv], capture_output=True,
                           text=True, timeout=BOUND_S + 30, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"gpucomm {' '.join(argv)[:300]} did not finish in {BOUND_S + 30} s")
    check_outcome(argv, p.returncode, p.stdout, p.stderr, time.perf_counter() - t0 - 2.0)
