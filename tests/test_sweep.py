"""`gpucomm sweep`: grids of CLI runs, streamed as JSON lines, resumable, local or on Dask."""
import json

import pytest

from gpucomm.cli import main
from gpucomm.cli._grid import expand, run_point
from gpucomm.grid import run_grid
from gpucomm.errors import ConfigError

SPEC = {"command": "sim",
        "fixed": {"collective": "all_reduce", "minbytes": "1M", "maxbytes": "1M",
                  "algorithm": "ring"},
        "grid": {"nodes": [1, 2], "protocol": ["ll", "simple"], "p2p": [True, False]}}


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_grid_is_the_cartesian_product_of_options():
    command, points = expand(SPEC)
    assert command == "sim" and len(points) == 8
    assert len({p.key for p in points}) == 8
    argv = points[-1].argv
    assert argv[0] == "sim" and "--no-p2p" in argv and argv[-2:] == ("--format", "json")
    assert argv[argv.index("--nodes") + 1] == "2"


def test_grid_keys_of_one_letter_are_nccl_tests_short_flags():
    """`f: 4` is -f 4 (it was `--f`, "ambiguous option"); nccl-tests' long names with `_` are
    accepted as written or with `-`."""
    command, points = expand({"command": "sim", "fixed": {"b": "1K", "e": "4K",
                                                          "agg_iters": 2},
                              "grid": {"f": [2, 4]}})
    argv = points[0].argv
    assert argv[argv.index("-f") + 1] == "2" and "--agg-iters" in argv


@pytest.mark.parametrize("spec,field", [
    ({"command": "rm"}, "command"), ({"grid": {"nodes": 3}}, "nodes"),
    ({"grid": {"nodes": [1, "x"]}}, "--nodes"), ({"grid": {"colour": [1]}}, "--colour"),
    ({"fixed": {"a": 1}, "extra": 1}, "extra"), ("nodes: 1", "mapping")])
def test_bad_grids_are_refused_naming_the_field(spec, field):
    with pytest.raises(ConfigError, match=field.replace("-", r"\-")):
        expand(spec)


def test_sweep_streams_a_line_per_point_and_resumes(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    import yaml
    grid.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "results.jsonl"
    assert main(["sweep", str(grid), "--output", str(out), "-j", "1"]) == 0
    lines = _lines(out)
    assert len(lines) == 8
    for ln in lines:
        row = ln["result"]["rows"][0]
        assert row["algorithm"] == "ring" and row["protocol"] == ln["point"]["protocol"]
    # interrupted after 3 points, the 4th torn in half: a rerun adds exactly the rest
    text = out.read_text().splitlines(keepends=True)
    out.write_text("".join(text[:3]) + text[3][:25])
    assert main(["sweep", str(grid), "--output", str(out), "-j", "1"]) == 0
    again = _lines(out)
    assert len(again) == 8 and {x["key"] for x in again} == {x["key"] for x in lines}
    assert "5 point(s) run, 3 already" in capsys.readouterr().err


def test_a_failing_point_is_a_line_with_its_error(tmp_path):
    _, points = expand({"command": "sim", "grid": {"nodes": [1], "algorithm": ["nope"]}})
    out = tmp_path / "r.jsonl"
    stats = run_grid(points, out, run_point, workers=1)
    assert stats["errors"] == 1
    (line,) = _lines(out)
    assert "nope" in line["error"] and "result" not in line


def test_local_worker_processes_give_the_one_process_results(tmp_path):
    _, points = expand(SPEC)
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    run_grid(points, one, run_point, workers=1)
    stats = run_grid(points, two, run_point, workers=2)     # forked workers, points in pairs
    assert stats == {"total": 8, "skipped": 0, "ran": 8, "errors": 0}
    lines = _lines(two)
    assert sorted(x["key"] for x in lines) == sorted(p.key for p in points)
    assert {x["key"]: x["result"] for x in lines} == \
        {x["key"]: x["result"] for x in _lines(one)}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_point_refused_by_the_parser_stops_the_sweep_with_nothing_written(tmp_path, workers):
    """Checked as the workers start (run_grid's `check`): the last point's bad option is
    found after others were handed out, and still no line and no file is written."""
    from gpucomm.cli._grid import point_checker
    spec = {"command": "sim", "fixed": {"minbytes": "1M", "maxbytes": "1M"},
            "grid": {"nodes": [1] * 9 + ["x"], "protocol": ["ll", "simple"]}}
    command, points = expand(spec, check=False)
    out = tmp_path / "r.jsonl"
    with pytest.raises(ConfigError, match=r"\-\-nodes"):
        run_grid(points, out, run_point, workers=workers, check=point_checker(command))
    assert not out.exists()


def test_sweep_refuses_a_bad_grid_in_one_line(tmp_path, capsys):
    import yaml
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"command": "sim", "grid": {"nodes": [1, 2, "x"]}}))
    out = tmp_path / "r.jsonl"
    assert main(["sweep", str(grid), "--output", str(out), "-j", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--nodes" in err[0] and not out.exists()


def test_points_run_on_a_local_dask_cluster_of_two_workers(tmp_path):
    distributed = pytest.importorskip("distributed")
    _, points = expand(SPEC)
    local = tmp_path / "local.jsonl"
    run_grid(points, local, run_point, workers=1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        remote = tmp_path / "dask.jsonl"
        stats = run_grid(points, remote, run_point, cluster=cluster.scheduler_address)
        assert stats == {"total": 8, "skipped": 0, "ran": 8, "errors": 0}
    by_key = {x["key"]: x["result"] for x in _lines(local)}
    assert {x["key"]: x["result"] for x in _lines(remote)} == by_key


def test_an_unreachable_cluster_is_one_error(tmp_path):
    pytest.importorskip("distributed")
    _, points = expand(SPEC)
    with pytest.raises(ConfigError, match="Dask scheduler"):
        run_grid(points, tmp_path / "r.jsonl", run_point, cluster="tcp://127.0.0.1:9")


class _Stream:
    def __init__(self, tty):
        self.tty, self.text = tty, []

    def isatty(self):
        return self.tty

    def write(self, s):
        self.text.append(s)
        return len(s)

    def flush(self):
        pass


@pytest.mark.parametrize("tty", [True, False])
def test_progress_shows_only_on_a_terminal_and_only_when_slow(tty, monkeypatch):
    from gpucomm.cli import progress
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    stream = _Stream(tty)
    with progress.Progress(3, "sizes", stream=stream) as bar:
        for k in range(3):
            bar.advance(f"{k} B")
    assert bool("".join(stream.text)) == tty
    quick = _Stream(True)
    monkeypatch.setattr(progress, "DELAY_S", 60.0)
    with progress.Progress(3, "sizes", stream=quick) as bar:
        bar.advance()
    assert quick.text == []
