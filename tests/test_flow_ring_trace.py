"""A ring past core.FLOW_RING_OPS is timed by the flow model from its frontier; its trace
(`sim --trace`, simulate.timed.traced) comes from that same timed path (flow_ring.py), not
from the event loop, so the traced and untraced runs print one time."""
import json

import numpy as np
import pytest

from gpucomm.cli import main
from gpucomm.simulate import core, predict
from gpucomm.simulate.timed import traced
from gpucomm.topology import build_topology
from gpucomm.topology.fabric import Network


def _topo(nodes=4, routing="ecmp"):
    return build_topology("dgx-h100", nodes=nodes, nic="roce-400g", fabric="rail-2tier",
                          leaf_ports=2, placement="random", network=Network(routing=routing))


@pytest.mark.parametrize("collective, size, routing", [
    ("all_reduce", 64 << 20, "ecmp"), ("all_reduce", 1 << 30, "spray"),
    ("all_gather", 256 << 20, "ecmp"), ("reduce_scatter", (256 << 20) + 4096, "ecmp")])
def test_trace_of_a_frontier_ring_is_that_run(monkeypatch, collective, size, routing):
    monkeypatch.setattr(core, "FLOW_RING_OPS", 0)  # every ring through the frontier path
    res = predict(collective, size, _topo(routing=routing), algorithm="ring", model="flow")
    assert "max-min fair rate" in res.note
    run = traced(res)
    assert run.events == 0 and run.time_s == res.timed.simulated_s  # no event loop ran
    assert run.time_s == pytest.approx(res.time_s, rel=1e-12)
    ops_end = max(r.end_s for r in run.timeline)
    # the last landing is the frontier's end (the middle of two chunk sizes' ends within
    # 0.1% where chunks differ by an element)
    assert ops_end + res.timed.protocol.base_latency_s == pytest.approx(res.time_s, rel=1e-3)
    if size % (1 << 20) == 0:
        assert ops_end + res.timed.protocol.base_latency_s == pytest.approx(res.time_s,
                                                                            rel=1e-9)
    assert len(run.timeline) == res.ops


def test_ring_trace_keeps_the_recurrence():
    # an op starts once its rank's previous op left the wire and its data from r-1 landed
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(core, "FLOW_RING_OPS", 0)
    try:
        res = predict("all_gather", 64 << 20, _topo(), algorithm="ring", model="flow")
        run = traced(res)
    finally:
        monkeypatch.undo()
    p = res.nranks
    recs = run.timeline
    by = {(r.step, r.channel, r.src): r for r in recs}
    for r in recs:
        if r.step == 0:
            assert r.start_s == 0.0
            continue
        prev = by[(r.step - 1, r.channel, (r.src - 1) % p)]
        assert r.start_s >= prev.end_s * (1 - 1e-12)
        own = by[(r.step - 1, r.channel, r.src)]
        assert r.start_s >= own.start_s
    starts = np.array([r.start_s for r in recs])
    assert (starts > 0).any()


def test_sim_prints_the_same_time_with_and_without_trace(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(core, "FLOW_RING_OPS", 0)
    argv = ["sim", "--collective", "all_reduce", "--system", "dgx-h100", "--nodes", "4",
            "--nic", "roce-400g", "--fabric", "rail-2tier", "--leaf-ports", "2", "--placement",
            "random", "--routing", "ecmp", "-b", "64M", "-e", "64M", "--algorithm", "ring",
            "--sim-model", "flow", "--format", "json"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)["rows"][0]["time_us"]
    trace = tmp_path / "t.json"
    assert main(argv + ["--trace", str(trace)]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["time_us"] == plain
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    ends = [e["ts"] + e.get("dur", 0) for e in events if e.get("ph") == "X"]
    assert ends and max(ends) <= plain * (1 + 1e-6)


def test_a_trace_past_the_op_budget_is_refused(monkeypatch):
    from gpucomm.errors import ConfigError
    monkeypatch.setattr(core, "FLOW_RING_OPS", 0)
    monkeypatch.setattr(core, "FLOW_MAX_OPS", 100)
    res = predict("all_reduce", 64 << 20, _topo(), algorithm="ring", model="flow")
    with pytest.raises(ConfigError, match="trace"):
        traced(res)
