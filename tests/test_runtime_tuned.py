"""This host's tuned runtime options: `gpucomm bench --tune` measures and saves them
(`bench.tune_runtime`), every later run starts from them (`runtime.tuned`), the variables
still override them, and a file that is bad or from another host is refused or left unused."""
import os
import subprocess
import sys

import pytest
import yaml

from gpucomm.bench import tune_runtime
from gpucomm.errors import ConfigError
from gpucomm.runtime import options, tuned
from gpucomm.runtime.options import RuntimeOptions

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def _write(path, options_, host=None, fmt=tuned.FORMAT):
    doc = {"format": fmt, "host": tuned.fingerprint() if host is None else host,
           "tuned": "2026-12-03T00:00:00Z", "options": options_}
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.fixture
def fresh_options(monkeypatch):
    """`options.current()` reads again after the test changes the environment (and the
    options in force before the test come back after it)."""
    monkeypatch.setattr(options, "_active", None)
    monkeypatch.setattr(options, "_found", None)


def _reread() -> RuntimeOptions:
    options._active = None
    return options.current()


def test_a_tuned_file_sets_the_options_and_the_variables_override_it(tmp_path, monkeypatch,
                                                                     fresh_options):
    path = _write(tmp_path / "rt.yaml", {"piece_bytes": 128 << 10, "direct_min_bytes": 3 << 20})
    monkeypatch.setenv(tuned.VAR, path)
    got = _reread()
    assert (got.piece_bytes, got.direct_min_bytes) == (128 << 10, 3 << 20) != \
        (RuntimeOptions().piece_bytes, RuntimeOptions().direct_min_bytes)
    assert got.slice_bytes == RuntimeOptions().slice_bytes  # the rest: the defaults
    assert "tuned for this host" in tuned.read().note and path in tuned.read().note
    assert options.tuned_file() == tuned.read()  # bench's header: the file current() read
    options.use(RuntimeOptions())
    assert options.tuned_file() is None  # options given: no file behind them
    monkeypatch.setenv("GPUCOMM_PIECE_BYTES", str(64 << 10))
    got = _reread()
    assert (got.piece_bytes, got.direct_min_bytes) == (64 << 10, 3 << 20)


def test_no_file_or_off_gives_the_defaults(tmp_path, monkeypatch, fresh_options):
    monkeypatch.setenv(tuned.VAR, str(tmp_path / "none.yaml"))
    assert tuned.read() is None and _reread() == RuntimeOptions()
    monkeypatch.setenv(tuned.VAR, "off")
    assert tuned.path() is None and tuned.read() is None


def test_a_file_from_another_host_is_not_used(tmp_path, monkeypatch, fresh_options):
    other = dict(tuned.fingerprint(), cpu="Some Other CPU 9000")
    path = _write(tmp_path / "rt.yaml", {"piece_bytes": 256 << 10}, host=other)
    monkeypatch.setenv(tuned.VAR, path)
    found = tuned.read()
    assert found.values == {} and "another host" in found.note and "Some Other CPU" in found.note
    assert _reread() == RuntimeOptions()


def test_a_file_an_older_tune_wrote_is_set_aside(tmp_path, monkeypatch, fresh_options):
    """Format 1 chose the direct threshold among 512 KiB and 3 MiB only: its choice would
    override a better default, so it is not used, and the note says how to tune again."""
    path = _write(tmp_path / "rt.yaml", {"direct_min_bytes": 512 << 10}, fmt=1)
    monkeypatch.setenv(tuned.VAR, path)
    found = tuned.read()
    assert found.values == {} and "older" in found.note and "bench --tune` again" in found.note
    assert _reread() == RuntimeOptions()


@pytest.mark.parametrize("text, says", [
    ("format: 2\noptions: [1, 2\n", "not a readable tuned-options file"),
    ("format: 7\noptions: {}\n", "format 2"),
    ("just text\n", "format 2"),
    ("format: 2\noptions: {slice_bytes: 4096}\n", "piece_bytes, direct_min_bytes, ll_max_bytes"),
    ("format: 2\noptions: {ll_max_bytes: -1}\n", "options.ll_max_bytes must be an integer >= 0"),
    ("format: 2\noptions: {piece_bytes: 0}\n", "options.piece_bytes must be an integer >= 1"),
    ("format: 2\noptions: {piece_bytes: '1M'}\n", "got '1M'"),
])
def test_a_bad_file_is_refused_naming_it_and_the_way_out(tmp_path, text, says):
    path = tmp_path / "rt.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        tuned.read(str(path))
    assert says in str(e.value) and str(path) in str(e.value)
    assert "GPUCOMM_RUNTIME_YAML=off" in str(e.value)


def test_the_score_is_the_median_per_round_ratio_and_a_winner_must_gain_3_percent():
    base = {(1, "t"): [1.0, 2.0, 1.0], (2, "t"): [4.0, 4.0, 8.0]}
    half = {k: [t / 2 for t in v] for k, v in base.items()}
    # 2% faster in one round and 40% in another: the median of the ratios is 0.98
    near = {k: [v[0] * 0.98, v[1] * 0.6, v[2] * 1.1] for k, v in base.items()}
    scores = tune_runtime.score({0: base, 1: half, 2: near})
    assert scores == pytest.approx([1.0, 0.5, 0.98])
    cands = [{"piece_bytes": 1}, {"piece_bytes": 2}, {"piece_bytes": 3}]
    assert tune_runtime.choose(cands, scores) == 1
    assert tune_runtime.choose(cands, [1.0, 1.5, 0.98]) == 0  # 2% is noise: the defaults stay


def test_the_small_message_path_keeps_the_sizes_up_to_the_first_it_does_not_win():
    on = {(256, "t"): [1.0, 1.0, 1.0], (256, "ip"): [1.0, 1.0, 1.0],
          (1024, "t"): [1.0, 3.0, 1.0], (1024, "ip"): [1.0, 1.0, 1.0],
          (4096, "t"): [2.0, 2.0, 2.0], (4096, "ip"): [2.0, 2.0, 2.0],
          (8192, "t"): [1.0, 1.0, 1.0], (8192, "ip"): [1.0, 1.0, 1.0]}
    off = {k: [2.0, 2.0, 2.0] for k in on}
    reach, ratios = tune_runtime.ll_crossover({0: on, 1: off})
    # 1 KiB: one slow round does not move the median; 4 KiB ties (1.0): the path stops there,
    # though it wins again at 8 KiB
    assert ratios == pytest.approx({256: 0.5, 1024: 0.5, 4096: 1.0, 8192: 0.5})
    assert reach == 1024
    assert tune_runtime.ll_crossover({0: off, 1: on})[0] == 0  # it never wins: off


def test_a_tuned_small_message_reach_of_0_turns_the_path_off(tmp_path, monkeypatch,
                                                             fresh_options):
    monkeypatch.setenv(tuned.VAR, _write(tmp_path / "rt.yaml", {"ll_max_bytes": 0}))
    assert _reread().ll_max_bytes == 0


def test_the_candidates_start_with_the_defaults_and_hold_each_pair_once():
    cands = tune_runtime.candidates()
    d = RuntimeOptions()
    assert cands[0] == {"piece_bytes": d.piece_bytes, "direct_min_bytes": d.direct_min_bytes}
    assert len({tuple(sorted(c.items())) for c in cands}) == len(cands) == \
        len(tune_runtime.PIECES) * len(tune_runtime.DIRECT_MINS)


def test_tuning_with_nowhere_to_save_is_refused(monkeypatch):
    monkeypatch.setenv(tuned.VAR, "off")
    with pytest.raises(ConfigError, match="GPUCOMM_RUNTIME_YAML=off: there is nowhere"):
        tune_runtime.tune()


def _cli(*args, env):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]),
             **env)
    return subprocess.run([sys.executable, "-m", "gpucomm", *args], capture_output=True,
                          text=True, env=e, timeout=300)


def test_bench_tune_saves_what_later_runs_use(tmp_path):
    """The CLI as users run it: `bench --tune quick` times every candidate on 2 real ranks and
    saves a file for this host; a later `bench` runs with its values and says so."""
    path = str(tmp_path / "rt.yaml")
    env = {tuned.VAR: path}
    p = _cli("bench", "--tune", "quick", env=env)
    assert p.returncode == 0, p.stderr
    assert f"saved {path}" in p.stdout and "round 2/2 done" in p.stderr
    doc = yaml.safe_load(open(path))
    assert doc["host"] == tuned.fingerprint()
    assert len(doc["candidates"]) == len(tune_runtime.candidates())
    assert all(c["median_us"]["4MiB"] > 0 and c["median_us"]["4MiB in place"] > 0
               for c in doc["candidates"])
    small = doc["small_messages"]
    assert set(small["time_vs_general"]) == set(tune_runtime.LL_SIZES)
    assert small["ll_max_bytes"] in (0, *tune_runtime.LL_SIZES)
    assert doc["options"].get("ll_max_bytes", RuntimeOptions().ll_max_bytes) == \
        small["ll_max_bytes"]
    want = RuntimeOptions.from_env({}, tuned=doc["options"])
    p = _cli("bench", "-b", "1M", "-e", "1M", "-n", "2", "-w", "1", env=env)
    assert p.returncode == 0, p.stderr
    assert f"# gpucomm runtime options: {want.describe()}" in p.stdout
    assert f"tuned for this host by gpucomm bench --tune ({doc['tuned']}, {path})" in p.stdout
