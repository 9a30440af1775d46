"""gpucomm.grid, the engine under `gpucomm sweep`, called as a library: points of a spec,
run by a plain function on this process, local worker processes, resumed from the file."""
import json

import pytest

from gpucomm.errors import ConfigError
from gpucomm.grid import MAX_POINTS, done_keys, expand, run_grid

SPEC = {"command": "square", "fixed": {"offset": 1}, "grid": {"x": [1, 2, 3], "y": [0, 10]}}


def _argv(words, options):
    return (words[0], options["x"] + options["y"] + options.get("offset", 0))


def square(argv):
    """A runner: {"result": n * n}, or an error for a negative n."""
    _, n = argv
    return {"error": f"{n} is negative"} if n < 0 else {"result": n * n}


def _points(spec=SPEC):
    return expand(spec, commands=("square",), argv=_argv)


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_points_are_the_cartesian_product_with_the_fixed_options():
    command, points = _points()
    assert command == "square" and len(points) == 6
    assert [p.argv[1] for p in points] == [2, 12, 3, 13, 4, 14]
    assert points[0].options == {"offset": 1, "x": 1, "y": 0}
    assert points[0].key == json.dumps({"offset": 1, "x": 1, "y": 0}, sort_keys=True)


@pytest.mark.parametrize("spec,field", [
    ({"command": "rm"}, "command"), ({"command": "square", "grid": {"x": 3}}, "'x'"),
    ({"command": "square", "other": 1}, "other"), ([1], "mapping"),
    ({"command": "square", "grid": {"a": list(range(101)), "b": list(range(100))}},
     str(MAX_POINTS))])
def test_bad_specs_are_refused_naming_the_field(spec, field):
    with pytest.raises(ConfigError, match=field):
        _points(spec)


def test_a_line_per_point_errors_counted_and_a_torn_file_resumed(tmp_path):
    _, points = _points({"command": "square", "grid": {"x": [3, -1, 2], "y": [0]}})
    out = tmp_path / "r.jsonl"
    stats = run_grid(points, out, square, workers=1)
    assert stats == {"total": 3, "skipped": 0, "ran": 3, "errors": 1}
    assert [ln.get("result", ln.get("error")) for ln in _lines(out)] == [9, "-1 is negative", 4]
    text = out.read_text().splitlines(keepends=True)
    out.write_text(text[0] + text[1][:10])  # interrupted in the second line
    assert done_keys(out) == {points[0].key}
    seen = []
    stats = run_grid(points, out, square, workers=1, on_point=lambda p, a: seen.append(p))
    assert stats["skipped"] == 1 and stats["ran"] == 2 and seen == points[1:]
    assert len(_lines(out)) == 3


def test_worker_processes_answer_as_this_process(tmp_path):
    _, points = _points()
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    run_grid(points, one, square, workers=1)
    stats = run_grid(points, two, square, workers=2)
    assert stats == {"total": 6, "skipped": 0, "ran": 6, "errors": 0}
    assert {x["key"]: x["result"] for x in _lines(one)} == \
        {x["key"]: x["result"] for x in _lines(two)}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_refused_point_stops_the_grid_with_nothing_written(tmp_path, workers):
    _, points = _points()
    out = tmp_path / "r.jsonl"

    def check(point):
        if point.argv[1] == 14:
            raise ConfigError("point 14 refused")
    with pytest.raises(ConfigError, match="14"):
        run_grid(points, out, square, workers=workers, check=check)
    assert not out.exists()
