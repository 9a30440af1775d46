"""Every view of a prediction shows the run whose time `gpucomm sim` printed (simulate.timed).

For a matrix of presets x NCCL algorithm x collective x size: the Chrome trace's span, the HTML
report's timeline and its link heatmap's time axis equal the printed time within 1%, and the
traced ops reproduce what was timed (the time before any bound) within 1%.
benchmarks/timed_views.py counts the same over the CLI (`gpucomm sim --trace --html`).
"""
import json

import numpy as np
import pytest

from gpucomm.errors import ConfigError
from gpucomm.report.data import trace_data
from gpucomm.report.trace import trace_doc
from gpucomm.simulate import predict
from gpucomm.simulate.timed import phases, traced
from gpucomm.topology import build_topology

SYSTEMS = {"dgx-v100": dict(system="dgx-v100"), "pcie-no-p2p": dict(system="pcie", p2p=False),
           "gb200-nvl72": dict(system="gb200-nvl72"), "mi300x": dict(system="mi300x"),
           "dgx-h100x2": dict(system="dgx-h100", nodes=2), "polaris": dict(system="polaris")}
ALGORITHMS = ("auto", "ring", "tree", "nvls", "nvls_tree", "pat")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv",
               "all_to_all")
SIZES = (1 << 16, 64 << 20)
_TOPOS: dict = {}


def topo(name):
    if name not in _TOPOS:
        _TOPOS[name] = build_topology(**SYSTEMS[name])
    return _TOPOS[name]


def span_us(events):
    return max(e["ts"] + e["dur"] for e in events) - min(0.0, min(e["ts"] for e in events))


def check(res, t):
    """(what disagrees with the printed time, ...) for one prediction."""
    printed = res.time_s * 1e6
    run = traced(res)
    bad = []
    if abs(run.time_s - res.timed.simulated_s) > 0.01 * res.timed.simulated_s:
        bad.append(f"ops {run.time_s * 1e6:.2f} us, timed {res.timed.simulated_s * 1e6:.2f}")
    doc = json.loads(json.dumps(trace_doc(run, t)))
    span = span_us([e for e in doc["traceEvents"] if e["ph"] == "X"])
    if abs(span - printed) > 0.01 * printed or doc["otherData"]["time_us"] != printed:
        bad.append(f"trace span {span:.2f} us")
    html = trace_data(run, t)
    h = span_us([{"ts": o[4], "dur": o[5]} for o in html["ops"] + html["after_ops"]])
    if abs(h - printed) > 0.01 * printed:
        bad.append(f"html timeline {h:.2f} us")
    if "links" in html and abs(html["links"]["edges_us"][-1] - printed) > 0.01 * printed:
        bad.append(f"heatmap {html['links']['edges_us'][-1]:.2f} us")
    return bad


@pytest.mark.parametrize("system", SYSTEMS)
def test_trace_html_and_heatmap_show_the_printed_time(system):
    t = topo(system)
    wrong, n = [], 0
    for coll in COLLECTIVES:
        for alg in ALGORITHMS if coll not in ("sendrecv", "all_to_all") else ("auto",):
            for size in SIZES:
                try:
                    res = predict(coll, size, t, algorithm=alg)
                except ConfigError:
                    continue  # NCCL would not run it here
                n += 1
                wrong += [f"{coll} {alg} {size}: printed {res.time_s * 1e6:.2f} us, {b}"
                          for b in check(res, t)]
    assert n >= 8
    assert not wrong, "\n".join(wrong)


def test_flow_model_views_show_the_printed_time_with_exact_link_rates():
    t = topo("dgx-h100x2")
    res = predict("all_reduce", 1 << 20, t, algorithm="ring", model="flow")
    assert not check(res, t)
    html = trace_data(traced(res), t)
    assert html["links"]["method"] == "flow rates"  # the recorded rates, not op averages


def test_a_bound_is_drawn_after_the_ops_and_named():
    # 8 B on 8 GPUs driven by one thread each: the host's launches set the time
    t = topo("dgx-v100")
    res = predict("all_reduce", 8, t, algorithm="ring", gpus_per_thread=8)
    assert res.timed.bounds and res.timed.bounds[-1][0].startswith("host")
    spans = phases(traced(res))
    assert spans[-1][2] == pytest.approx(res.time_s) and "host" in spans[-1][0]
    assert not check(res, t)


def test_the_timed_value_holds_what_sim_reports():
    t = topo("dgx-h100x2")
    res = predict("all_reduce", 64 << 20, t)
    timed = res.timed
    assert timed.algorithm == res.algorithm and timed.protocol.name == res.protocol
    assert f"{timed.channels}ch" in res.reason
    assert timed.nics == 8 and timed.topology is t
    assert timed.time_s == res.time_s
    # a p2p limit that recomputes the same time keeps the printed value exactly
    p2p = predict("sendrecv", 1 << 16, topo("dgx-v100"))
    assert p2p.timed.time_s == p2p.time_s and not p2p.timed.bounds
    ring = predict("all_reduce", 64 << 20, topo("dgx-v100"), algorithm="ring").timed
    # no NVSwitch: NCCL's ring search lays each channel's ring out on its own
    assert ring.schedule is not None and np.asarray(ring.placement).shape == (6, 8)
    assert ring.channels == int(ring.schedule.channels * ring.lanes)


def test_a_result_without_a_timed_run_is_refused_by_name():
    from gpucomm.algorithms import build
    from gpucomm.simulate import simulate
    res = simulate(build("all_reduce", "ring", 4), topo("dgx-v100"), 1024)
    with pytest.raises(ValueError, match="no timed run"):
        traced(res)


@pytest.mark.parametrize("system,coll", [("dgx-v100", "all_gather"), ("dgx-v100", "all_reduce"),
                                         ("mi300x", "reduce_scatter"),
                                         ("dgx-h100x2", "broadcast")])
def test_algo_export_writes_the_timed_schedule_on_its_ring_orders(system, coll):
    from gpucomm.interop.msccl import timed_schedule
    from gpucomm.verify import verify
    res = predict(coll, 64 << 20, topo(system), algorithm="ring")
    sched = timed_schedule(res)
    verify(sched)  # each channel's ring order moved onto the GPUs, still the collective
    assert sched.channels == res.timed.schedule.channels
    rows = np.atleast_2d(res.timed.placement)
    if len(rows) > 1:  # the rings differ per channel: so do the exported channels' peers
        ch0 = {(int(a), int(b)) for st in sched.steps() for a, b, c in
               zip(st.src, st.dst, st.channel) if c == 0}
        ch1 = {(int(a), int(b)) for st in sched.steps() for a, b, c in
               zip(st.src, st.dst, st.channel) if c == 1}
        assert ch0 != ch1


def test_algo_export_with_a_system_exports_what_sim_timed(capsys, tmp_path):
    from gpucomm.cli import main
    out = tmp_path / "a.xml"
    assert main(["algo", "export", "auto", "all_gather", "--system", "dgx-v100", "--size",
                 "64M", "--output", str(out)]) == 0
    res = predict("all_gather", 64 << 20, topo("dgx-v100"))
    assert res.reason in capsys.readouterr().err
    text = out.read_text()
    assert f'proto="{res.protocol.capitalize()}"' in text.replace("Ll", "LL")
    assert main(["algo", "export", "auto", "all_reduce", "--system", "dgx-h100", "--size",
                 "1G"]) == 2  # NVLS: a closed form, nothing to export
    assert "closed form" in capsys.readouterr().err
