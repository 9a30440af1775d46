"""Property-based fuzzing of everything gpucomm reads (issue 29): YAML (topology, model, grid),
nccl-tests logs, MSCCL XML, saved JSON and numeric flags, in-process and bounded in time.

The contract, for any input: a value, or a GpucommError of one line (exit 2 and one line of
stderr for a command) — never another exception, never more than DEADLINE_MS an example,
and nothing left running or mapped in /dev/shm. Examples are derandomized (the same ones on
every run, so CI is stable) and few; tests/test_hostile_corpus.py keeps the cases found.
"""
import json
import os
import resource
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucomm.cli import main
from gpucomm.errors import GpucommError
from gpucomm.inputs import load_json, load_yaml, parse_float, parse_int
from gpucomm.interop.msccl import from_msccl_xml
from gpucomm.topology import Topology
from gpucomm.verify import verify
from gpucomm.workloads.models import ModelConfig

DEADLINE_MS = 5000
FUZZ = settings(max_examples=60, deadline=DEADLINE_MS, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
RSS_GROWTH_LIMIT = 1 << 30   # the whole module may grow this process by at most 1 GiB

# scalars a hostile file holds: huge and tiny numbers, non-finite floats, odd strings
huge_ints = st.sampled_from([0, -1, 1, 2**31, 2**63, 10**400, -(10**400)])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), huge_ints,
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([1e-300, 1e308, -0.0, 5e-324]),
                    st.text(max_size=12), st.sampled_from(["", "²", "١٢", "nvlink4", "gpu"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)


@pytest.fixture(scope="module", autouse=True)
def bounded_memory_and_no_leftovers():
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    shm0 = set(_shm())
    yield
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0 < RSS_GROWTH_LIMIT
    assert not _staying(shm0), "shared memory left behind"


def _shm():
    try:
        return [n for n in os.listdir("/dev/shm") if n.startswith("gpucomm-")]
    except OSError:
        return []


def _staying(before: set, within_s: float = 10.0) -> set:
    """gpucomm segments that were not there `before` and stay `within_s`: under pytest -n a
    job of another worker's test holds its segments for moments while its ranks map them
    (one such run failed here on six of them), a leak holds them for good."""
    stay, deadline = set(_shm()) - before, time.monotonic() + within_s
    while stay and time.monotonic() < deadline:
        time.sleep(0.05)
        stay &= set(_shm())
    return stay


def _dump(obj) -> str:
    try:
        return yaml.safe_dump(obj)
    except (yaml.YAMLError, RecursionError):
        return "{}"


# ---- YAML ---------------------------------------------------------------------------------
@FUZZ
@given(st.text(max_size=300))
def test_any_text_is_yaml_or_one_line_error(text):
    try:
        load_yaml(text, "fuzz.yaml")
    except GpucommError as e:
        assert "\n" not in str(e)


links = st.fixed_dictionaries({"src": st.sampled_from(["g0", "g1", "sw", "n0", 3]),
                               "dst": st.sampled_from(["g0", "g1", "sw", "n0"])},
                              optional={"tech": st.sampled_from(["nvlink4", "pcie5", "bogus"]),
                                        "bandwidth_Bps": scalars, "bandwidth_GBps": scalars,
                                        "latency_s": scalars, "latency_us": scalars,
                                        "efficiency": scalars, "count": scalars,
                                        "duplex": scalars})
devices = st.fixed_dictionaries({"name": st.sampled_from(["g0", "g1", "sw", "n0", ""]),
                                 "kind": st.sampled_from(["gpu", "nic", "pcie_switch",
                                                          "nvswitch", "tpu"])},
                                optional={"node": scalars, "model": scalars})
topologies = st.fixed_dictionaries(
    {"devices": st.lists(devices, max_size=5), "links": st.lists(links, max_size=6)},
    optional={"name": scalars, "nodes": scalars, "gpus_per_node": scalars,
              "in_switch_reduction": scalars, "p2p": scalars, "ranks": values,
              "nic_affinity": values, "extra": values})


@FUZZ
@given(topologies)
def test_any_topology_yaml_is_a_topology_or_one_line_error(data):
    try:
        topo = Topology.from_yaml(_dump(data))
        topo.check_routes()
    except GpucommError as e:
        assert "\n" not in str(e)
        return
    for ln in topo.links:   # what was accepted is physical
        assert 1e6 <= ln.bandwidth_Bps <= 1e14 and 0 <= ln.latency_s <= 1
    assert topo.nodes * topo.gpus_per_node >= len(topo.ranks) >= 1


MODEL = {"name": "m", "layers": 2, "hidden": 64, "ffn": 128, "heads": 4, "vocab": 100}


@FUZZ
@given(st.dictionaries(st.sampled_from(sorted(ModelConfig.__dataclass_fields__)), scalars,
                       max_size=4), values)
def test_any_model_yaml_is_a_model_or_one_line_error(changes, extra):
    data = {**MODEL, **changes}
    try:
        m = ModelConfig.from_dict(load_yaml(_dump(data), "model.yaml"), "model.yaml")
    except GpucommError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(m.tied_embeddings, bool) and m.head_dim >= 1 and m.params > 0


# ---- grids, JSON, logs, XML ---------------------------------------------------------------
@FUZZ
@given(st.fixed_dictionaries({}, optional={
    "command": st.sampled_from(["sim", "plan", "topo show", "bogus", "", 7]),
    "fixed": values, "grid": st.dictionaries(st.sampled_from(
        ["nodes", "maxbytes", "seeds", "system", "collective"]), values, max_size=3)}))
def test_any_grid_expands_or_is_one_line_error(spec):
    from gpucomm.cli._grid import expand
    try:
        _, points = expand(load_yaml(_dump(spec), "grid.yaml"), "grid.yaml")
    except GpucommError as e:
        assert "\n" not in str(e)
        return
    assert len(points) <= 10_000


@FUZZ
@given(st.integers(0, 200), st.sampled_from(["[", "{\"a\":"]), st.text(max_size=20))
def test_json_depth_is_refused_before_parsing(depth, opener, tail):
    text = opener * depth + tail
    try:
        load_json(text, "result.json")
    except GpucommError as e:
        assert "\n" not in str(e)


row = st.tuples(st.sampled_from(["8", "1048576", "2199023255552", "-8", "1e400", "x"]),
                st.sampled_from(["nan", "inf", "-1", "12.5", "0", "1e308"]),
                st.sampled_from(["0", "inf", "N/A", "-3", "1e20"]))


# nccl-tests rows with nan, inf, negative or oversize values, and an absurd nGpus header:
# doctor flags or refuses them in one line (issue 29 item 4), never a traceback
@settings(max_examples=15, deadline=30_000, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rows=st.lists(row, min_size=1, max_size=6),
       header=st.sampled_from(["", "# nThread 1 nGpus 100000000000000000000 minBytes 8 "
                                   "maxBytes 8 step: 2(factor)\n"]))
def test_doctor_of_any_log_answers_or_errs_in_one_line(rows, header, tmp_path_factory,
                                                       capsys):
    lines = [f"{s:>12} {int(s) // 4 if s.isdigit() else 1:>12} float sum -1 {t:>8} 1.5 1.5 "
             f"{w} {t} 1.5 1.5 {w}" for s, t, w in rows]
    path = tmp_path_factory.mktemp("fuzz") / "log.txt"
    path.write_text("# Collective test starting: all_reduce_perf\n" + header
                    + "\n".join(lines) + "\n")
    code = main(["doctor", str(path), "--format", "json"])
    err = capsys.readouterr().err
    assert code in (0, 1, 2)
    if code == 2:
        assert err.count("\n") == 1 and "Traceback" not in err, err


step = st.fixed_dictionaries({"s": st.integers(-1, 3).map(str),
                              "type": st.sampled_from(["s", "r", "re", "rrc", "cpy", "nop", "x"]),
                              "srcbuf": st.sampled_from(["i", "o", "s"]),
                              "srcoff": st.integers(-1, 3).map(str),
                              "dstbuf": st.sampled_from(["i", "o", "s"]),
                              "dstoff": st.integers(-1, 3).map(str),
                              "cnt": st.sampled_from(["1", "0", "99999999999", "-2", "١"]),
                              "depid": st.integers(-1, 2).map(str),
                              "deps": st.integers(-1, 2).map(str),
                              "hasdep": st.sampled_from(["0", "1"])})


def _xml(ngpus, chunks, tbs):
    def attrs(d):
        return " ".join(f'{k}="{v}"' for k, v in d.items())
    gpus = "".join(
        f'<gpu id="{g}" i_chunks="{chunks}" o_chunks="0" s_chunks="{chunks}">'
        + "".join(f'<tb id="{t}" send="{(g + 1) % 2}" recv="{(g + 1) % 2}" chan="0">'
                  + "".join(f"<step {attrs(s)}/>" for s in steps) + "</tb>"
                  for t, steps in enumerate(tbs)) + "</gpu>" for g in range(2))
    return f'<algo name="f" proto="Simple" nchannels="1" ngpus="{ngpus}" coll="allreduce">' \
           f"{gpus}</algo>"


@FUZZ
@given(st.sampled_from(["2", "0", "-1", "65537", "9" * 40]),
       st.sampled_from(["1", "2", "0", "1000000000", "x"]),
       st.lists(st.lists(step, max_size=4), max_size=2))
def test_any_msccl_xml_imports_or_is_one_line_error(ngpus, chunks, tbs):
    try:
        sched = from_msccl_xml(_xml(ngpus, chunks, tbs))
        verify(sched)
    except GpucommError as e:
        assert "\n" not in str(e)


# ---- numeric flags, through the commands' own parsers --------------------------------------
numbers = st.one_of(st.integers(-2**70, 2**70).map(str), huge_ints.map(str),
                    st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.sampled_from(["2**63", "1e308", "²", "١٢", "", " 7 ", "0x10", "1_000",
                                     "-0", "9" * 400]))
FLAGS = [("sim", "--seeds", "seeds"), ("topo show", "--leaf-ports", "leaf_ports"),
         ("topo show", "--oversubscription", "oversubscription"),
         ("topo show", "--nics-per-node", "nics_per_node"),
         ("plan --model llama3-8b", "--oversubscription", "oversubscription"),
         ("bench", "-n", "iters"), ("bench", "-m", "agg_iters"), ("bench", "-w", "warmup"),
         ("bench", "-G", "cudagraph"), ("bench", "--timeout", "timeout"),
         ("sweep g.yaml -o r.jsonl", "-j", "workers"), ("sim", "-e", "maxbytes"),
         ("algo show ring all_reduce", "--ranks", "ranks"),
         ("topo show", "--loss-rate", "loss_rate")]


@FUZZ
@given(flag=st.sampled_from(FLAGS), text=numbers)
def test_numeric_flags_parse_in_range_or_refuse_in_one_line(flag, text, capsys):
    from gpucomm.cli import build_parser
    words, name, dest = flag[0].split(), flag[1], flag[2]
    try:
        args = build_parser(words).parse_args([*words, name, text])
    except SystemExit as e:
        err = capsys.readouterr().err
        assert e.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        return
    value = getattr(args, dest)
    assert isinstance(value, (int, float)) and abs(value) <= 1 << 40, (name, text, value)


@FUZZ
@given(numbers)
def test_parse_int_and_parse_float_keep_their_range(text):
    for parse, lo, hi in ((parse_int, 1, 1000), (parse_float, 0.5, 10.0)):
        try:
            v = parse(text, "x", lo, hi)
        except GpucommError as e:
            assert "\n" not in str(e) and f"{lo}" in str(e)
        else:
            assert lo <= v <= hi


# ---- whole commands, in-process: one line or an answer ------------------------------------
@settings(max_examples=12, deadline=30_000, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=topologies)
def test_topo_show_of_any_file_answers_or_errs_in_one_line(data, tmp_path_factory, capsys):
    path = tmp_path_factory.mktemp("fuzz") / "t.yaml"
    path.write_text(_dump(data))
    code = main(["topo", "show", "--topology", str(path), "--format", "json"])
    out, err = capsys.readouterr()
    if code == 0:
        assert json.loads(out)["ranks"] >= 1
    else:
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
