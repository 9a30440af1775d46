"""nccl-tests' command line on `gpucomm sim` and `gpucomm bench` (issue 27, item 5): a pasted
nccl-tests line means what it means to nccl-tests; gpucomm's own options are long, the short
ones mean the same in every command, and old spellings give a one-line hint."""
from __future__ import annotations

import argparse
import json

import pytest

from gpucomm.cli import build_parser, main
from gpucomm.cli._nccltests import FLAGS, PERF_TESTS, _Retired, collective_of

# nccl-tests' getopt_long string (src/common.cu, release 2.19), verbatim
NCCL_TESTS_GETOPT = "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:"
NCCL_TESTS_LETTERS = {c for c in NCCL_TESTS_GETOPT if c.isalpha()} - {"h"}
EXAMPLE = ("all_reduce_perf -b 8 -e 1M -f 2 -g 8 -t 1 -n 20 -w 5 -c 1 -o sum -d float -a 0 -z 0 "
           "-G 0").split()


def run(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's errors
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_the_issues_pasted_line_prints_nccl_tests_rows_and_one_note(capsys):
    code, out, err = run(capsys, "sim", *EXAMPLE)
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [8 << k for k in range(18)]  # 8 B .. 1 MiB by 2
    assert all(int(r[1]) == int(r[0]) // 4 and r[2:4] == ["float", "sum"] for r in rows)
    notes = [line for line in err.splitlines() if "note:" in line]
    assert len(notes) == 1 and err.count("\n") == 1
    for flag in ("-n 20", "-w 5", "-c 1", "-a 0", "-z 0"):  # no effect on a prediction
        assert flag in notes[0]
    for flag in ("-g", "-t", "-G", "-o", "-d", "-b", "-e", "-f"):  # these do
        assert f"{flag} " not in notes[0]


def test_the_flag_table_is_nccl_tests_getopt_string():
    assert {f.short[1] for f in FLAGS} == NCCL_TESTS_LETTERS
    assert len(FLAGS) == len(NCCL_TESTS_LETTERS)


@pytest.mark.parametrize("command", ["sim", "bench"])
def test_every_nccl_tests_flag_parses_short_and_long(command):
    parser = build_parser([command])
    value = {"-b": "8", "-e": "1M", "-i": "1K", "-f": "2", "-o": "sum", "-d": "float",
             "-r": "0", "-J": "out.json", "-T": "30"}
    for f in FLAGS:
        v = value.get(f.short, "1")
        for spelling in (f.short, f.long[0]):
            ns = parser.parse_args([command, "all_reduce_perf", spelling, v])
            assert getattr(ns, f.dest) is not None, spelling


@pytest.mark.parametrize("test, collective", sorted(PERF_TESTS.items()))
def test_the_binary_is_the_collective(test, collective):
    assert collective_of(test, None) == collective
    assert collective_of(f"./build/{test}_mpi", None) == collective
    assert collective_of(test, collective) == collective


def test_a_test_name_and_a_different_collective_are_refused(capsys):
    code, _, err = run(capsys, "sim", "all_gather_perf", "--collective", "all_reduce")
    assert code == 2 and "all_gather_perf tests all_gather but --collective is all_reduce" in err
    code, _, err = run(capsys, "sim", "alltoallv_perf")
    assert code == 2 and "unknown nccl-tests binary 'alltoallv_perf'" in err


def _subparsers(parser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield prefix + (name,), sub
                yield from _subparsers(sub, prefix + (name,))


def test_short_options_mean_one_thing_in_every_command():
    """A short option names the same option everywhere, and a letter nccl-tests uses means
    what it means to nccl-tests (or is retired with a hint)."""
    long_of = {f.short: f.long[0] for f in FLAGS}
    dest_of = {f.short: f.dest for f in FLAGS}
    meaning: dict[str, set] = {}
    for path, sub in _subparsers(build_parser()):
        for action in sub._actions:
            shorts = [o for o in action.option_strings if len(o) == 2 and o != "-h"]
            if not shorts or isinstance(action, _Retired):
                continue
            longs = sorted(o for o in action.option_strings if o.startswith("--"))
            for s in shorts:
                meaning.setdefault(s, set()).add(action.dest)
                if s[1] in NCCL_TESTS_LETTERS:
                    assert long_of[s] in action.option_strings, (path, s, longs)
    for short, names in meaning.items():
        if short in dest_of:
            assert names == {dest_of[short]}, (short, names)
        else:
            assert len(names) == 1, (short, names)


@pytest.mark.parametrize("argv, hint", [
    (["sim", "-c", "all_reduce"], "`-c` now means --check, as in nccl-tests; use --collective"),
    (["bench", "-c", "all_gather"], "use --collective"),
    (["sim", "-p", "group_size=2"], "use --param NAME=VALUE"),
    (["sim", "--model", "flow"], "the simulator's model is --sim-model"),
    (["doctor", "x.log", "--model", "flow"], "--sim-model"),
    (["tune", "-c", "all_reduce"], "use --collective"),
    (["tune", "-o", "t.conf"], "`-o` now means --op, as in nccl-tests; use --output"),
    (["doctor", "x.log", "-N", "2"], "use --nodes"),
    (["topo", "show", "-N", "2"], "use --nodes"),
    (["topo", "export", "-o", "x.yaml"], "use --output"),
    (["algo", "show", "ring", "all_reduce", "-n", "4"], "use --ranks"),
    (["algo", "run", "ring", "all_reduce", "-p", "channels=2"], "use --param"),
    (["algo", "export", "ring", "all_reduce", "-o", "x.xml"], "use --output"),
    (["algo", "import", "x.xml", "-N", "2"], "use --nodes"),
    (["algo", "verify", "-c", "all_reduce"], "use --collective"),
    (["demo", "-n", "3"], "use --ranks"),
    (["launch", "-n", "2", "x.py"], "use --nproc"),
    (["report", "a.json", "-o", "r.html"], "use --output"),
    (["sweep", "g.yaml", "-o", "r.jsonl"], "use --output"),
])
def test_old_spellings_give_a_one_line_hint(capsys, argv, hint):
    code, out, err = run(capsys, *argv)
    assert code == 2 and not out and err.count("\n") == 1 and hint in err, err


def test_sim_minus_n_upper_is_run_cycles_and_the_note_names_nodes(capsys):
    code, _, err = run(capsys, "sim", "-N", "2", "-b", "8", "-e", "8")
    assert code == 0 and "-N 2" in err and "nodes are --nodes" in err


def test_step_bytes_and_factor_as_nccl_tests(capsys):
    def sizes(*flags):
        code, out, err = run(capsys, "sim", "-b", "1K", "-e", "4K", *flags, "--format", "json")
        assert code == 0, err
        return [r["size"] for r in json.loads(out)["rows"]]
    assert sizes("-i", "1K") == [1024, 2048, 3072, 4096]
    assert sizes("-f", "2", "-i", "1K") == [1024, 2048, 4096]  # a factor > 1 wins over -i
    assert sizes() == [1024, 2048, 4096]


def test_threads_times_gpus_must_fill_the_node(capsys):
    code, _, err = run(capsys, "sim", "-g", "3", "-e", "8")
    assert code == 2 and "-g 3 = 3 GPUs per process does not divide the 8 GPUs per node" in err
    assert run(capsys, "sim", "-t", "2", "-g", "4", "-e", "8")[0] == 0


def test_output_file_writes_the_json_document(capsys, tmp_path):
    out = tmp_path / "r.json"
    code, stdout, _ = run(capsys, "sim", "-b", "1K", "-e", "2K", "-J", out)
    doc = json.loads(out.read_text())
    assert code == 0 and [r["size"] for r in doc["rows"]] == [1024, 2048] and "#" in stdout
    code, _, err = run(capsys, "sim", "-J", tmp_path / "r.txt")
    assert code == 2 and "-J/--output_file" in err


def test_cuda_graph_flag_and_its_long_spelling_agree(capsys):
    one = json.loads(run(capsys, "sim", "-b", "8", "-e", "8", "-g", "8", "-G", "1",
                         "--format", "json")[1])["rows"][0]["time_us"]
    two = json.loads(run(capsys, "sim", "-b", "8", "-e", "8", "-g", "8", "--cuda-graph",
                         "--format", "json")[1])["rows"][0]["time_us"]
    assert one == two
    code, _, err = run(capsys, "sim", "-G", "0", "--cuda-graph")
    assert code == 2 and "disagree" in err


def test_hypercube_perf_is_an_all_gather_by_recursive_doubling(capsys):
    code, out, _ = run(capsys, "sim", "hypercube_perf", "-b", "1M", "-e", "1M", "--format",
                       "json")
    doc = json.loads(out)
    assert code == 0 and doc["collective"] == "all_gather"
    assert doc["rows"][0]["algorithm"] == "recursive_doubling"


def test_unsigned_nccl_tests_types_are_known(capsys):
    for name in ("uint32", "uint64"):
        code, out, _ = run(capsys, "sim", "-d", name, "-b", "64", "-e", "64", "--format", "json")
        assert code == 0 and json.loads(out)["rows"][0]["type"] == name


def test_bench_takes_a_pasted_line_and_doctor_reads_its_output(tmp_path, monkeypatch):
    """A pasted all_gather_perf line on CPU ranks: -N cycles, -C's header, -J's file, the
    per-rank count, one note for -R, and the log parses back."""
    import os
    import subprocess
    import sys

    from gpucomm.interop.nccltests import parse_log
    host = tmp_path / "host.yaml"
    host.write_text("bandwidth_Bps: 10.0e9\nlatency_s: 2.0e-5\n")
    src = os.path.join(os.path.dirname(__file__), "..", "src")
    env = dict(os.environ, GPUCOMM_HOST_YAML=str(host),
               PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "bench.json"
    p = subprocess.run([sys.executable, "-m", "gpucomm", "bench", "all_gather_perf", "-g", "2",
                        "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "-N", "2", "-C", "1",
                        "-R", "1", "-J", str(out)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("note:") == 1 and "-R 1" in p.stderr
    log = parse_log(p.stdout)
    assert log.collective == "all_gather" and log.nranks == 2
    assert [(r["size"], r["count"]) for r in log.rows] == [(1024, 128)] * 2  # -N 2
    assert "cputime" in p.stdout and json.loads(out.read_text())["rows"][0]["count"] == 128


def test_mulsum_is_nccl_tests_premulsum_and_its_check_can_fail(tmp_path, monkeypatch):
    """-o mulsum: each rank's input times nccl-tests' scalar (1 even, 2 odd), then summed;
    run on CPU ranks it checks clean, and a plain sum fails the same check."""
    import numpy as np

    from gpucomm import dtypes as dt
    from gpucomm.bench import run_bench
    from gpucomm.bench.sweep import count_wrong, pattern
    from gpucomm.collectives import get_collective
    host = tmp_path / "host.yaml"
    host.write_text("bandwidth_Bps: 10.0e9\nlatency_s: 2.0e-5\n")
    monkeypatch.setenv("GPUCOMM_HOST_YAML", str(host))
    rows = run_bench("shm", 3, "all_reduce", [96], op="mulsum", iters=1, warmup=1,
                     dtype="bfloat16")
    assert rows[0]["redop"] == "mulsum" and rows[0]["wrong"] == rows[0]["ip_wrong"] == 0
    coll, f32 = get_collective("all_reduce"), dt.get_dtype("float32")
    ins = [pattern(q, 24, f32, "sum", 1) for q in range(3)]
    assert [dt.premul_scalar(q) for q in range(4)] == [1, 2, 1, 2]
    premul = sum(x * dt.premul_scalar(q) for q, x in enumerate(ins))
    assert count_wrong(coll, premul, 0, 3, 24, f32, "mulsum", 0, salt=1) == 0
    assert count_wrong(coll, np.sum(ins, axis=0), 0, 3, 24, f32, "mulsum", 0, salt=1) > 0
