"""Chrome traces and link utilisation: counters that integrate to the simulator's busy time,
and NVLS drawn as the chunks the model streams."""
import json

import numpy as np
import pytest

from gpucomm.algorithms import build
from gpucomm.simulate import predict, simulate
from gpucomm.topology import build_topology
from gpucomm.report.links import link_usage
from gpucomm.report.trace import LINKS_PID, nvls_chunk_bytes, trace_events, write_trace


@pytest.fixture(scope="module")
def two_nodes():
    return build_topology("dgx-h100", nodes=2)


@pytest.mark.parametrize("model", ["analytic", "flow"])
def test_link_usage_integrates_to_link_busy(two_nodes, model):
    r = simulate(build("all_reduce", "ring", 16, channels=4), two_nodes, 1 << 26, model=model,
                 trace=True)
    u = link_usage(r, two_nodes)
    assert set(u.links) == set(r.link_busy_s)  # every link the simulator charged, no other
    busy = u.busy_s()
    for ln in u.links:
        assert busy[ln] == pytest.approx(r.link_busy_s[ln], rel=1e-9)
    edges, grid = u.binned(50)
    assert grid.shape == (len(u.links), 50)
    assert np.allclose((grid * np.diff(edges)).sum(axis=1), [busy[ln] for ln in u.links])
    assert grid.min() >= 0
    # both NVLink and the NIC rails carry a 2-node ring
    assert any("nvlink" in n for n in u.names) and any("nic" in n for n in u.names)


@pytest.mark.parametrize("protocol", ["simple", "ll"])
def test_flow_rates_are_exact_and_never_exceed_a_link(two_nodes, protocol):
    from gpucomm.simulate.constants import WIRE_EFFICIENCY
    sched = build("all_reduce", "ring", 16, channels=4)
    r = simulate(sched, two_nodes, 1 << 24, model="flow", trace=True, protocol=protocol)
    u = link_usage(r, two_nodes, sched)
    assert u.method == "flow rates" and set(u.links) == set(r.link_busy_s)
    busy = u.busy_s()
    for ln in u.links:  # the wire carries payload / wire efficiency
        assert busy[ln] == pytest.approx(r.link_busy_s[ln] / WIRE_EFFICIENCY[protocol],
                                         rel=1e-9)
    peak = max(float(x.max()) for x in u.util)
    assert peak <= 1 + 1e-9 and min(float(x.min()) for x in u.util) >= 0


def test_flow_contention_fills_the_shared_link_exactly():
    """All-to-all on a PCIe box without P2P: flows share the host links; max-min fills them
    to exactly 1, never more (op averages would show up to ~2 here)."""
    topo = build_topology("pcie", gpus_per_node=4, p2p=False)
    sched = build("all_to_all", "direct", 4)
    r = simulate(sched, topo, 1 << 24, model="flow", trace=True)
    exact = link_usage(r, topo, sched)
    assert max(float(x.max()) for x in exact.util) == pytest.approx(1.0, abs=1e-9)
    averaged = link_usage(r, topo)
    assert averaged.method == "op averages"
    assert max(float(x.max()) for x in averaged.util) > 1.2
    for ln in exact.links:
        assert exact.busy_s()[ln] == pytest.approx(averaged.busy_s()[ln], rel=1e-9)


def test_one_flow_alone_runs_at_its_own_rate():
    """A 2-rank exchange through the NVSwitch: each link carries one op, at its rate."""
    topo = build_topology("dgx-h100")
    r = simulate(build("sendrecv", "direct", 2), topo, 1 << 26, model="flow", trace=True)
    u = link_usage(r, topo)
    assert len(u.links) == 4  # each GPU's link to and from the switch
    (_, _, _, _, _, start, end, nbytes) = r.timeline[0]
    for cap, t, util in zip(u.capacity, u.times, u.util):
        assert list(t) == [start, end]
        assert util[0] == pytest.approx(nbytes / (end - start) / cap)
        assert 0.5 < util[0] <= 1.0


def test_trace_has_a_counter_track_per_link(two_nodes, tmp_path):
    sched = build("all_reduce", "ring", 16)
    r = simulate(sched, two_nodes, 1 << 22, model="flow", trace=True)
    path = tmp_path / "t.json"
    write_trace(r, path, two_nodes, schedule=sched)
    events = json.loads(path.read_text())["traceEvents"]
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["pid"] for e in counters} == {LINKS_PID}
    names = {e["name"] for e in counters}
    assert len(names) == len(r.link_busy_s)
    # the counter of one link, integrated, is its busy time
    name = sorted(names)[0]
    pts = sorted((e["ts"], e["args"]["utilisation"]) for e in counters if e["name"] == name)
    integral = sum(u * (t1 - t0) for (t0, u), (t1, _) in zip(pts, pts[1:])) * 1e-6
    u = link_usage(r, two_nodes, sched)
    assert integral == pytest.approx(u.busy_s()[u.links[u.names.index(name)]], rel=1e-4)
    assert max(e["args"]["utilisation"] for e in counters) <= 1.0
    assert pts[-1][1] == 0.0  # every link goes idle at the end


@pytest.mark.parametrize("nodes, size", [(1, 1 << 30), (1, 1 << 20), (2, 1 << 28)])
def test_nvls_events_are_the_models_chunks(nodes, size):
    topo = build_topology("dgx-h100", nodes=nodes)
    r = predict("all_reduce", size, topo, algorithm="nvls" if nodes == 1 else "nvls_tree")
    events = [e for e in trace_events(r, topo) if e["ph"] == "X"]
    assert {e["cat"] for e in events} == {"nvls"}
    p = r.nranks
    end_us = r.time_s * 1e6
    body_us = max(r.link_busy_s.values()) * 1e6
    for rank in range(p):
        mine = [e for e in events if e["pid"] == rank]
        loads = [e for e in mine if e["name"].startswith("load-reduce")]
        stores = [e for e in mine if e["name"].startswith("multicast")]
        # every byte of the rank's share is reduced once and multicast once
        assert sum(e["args"]["bytes"] for e in loads) == size // p
        assert sum(e["args"]["bytes"] for e in stores) == size // p
        assert len({e["tid"] for e in mine}) <= 16  # NCCL's NVLS channels
        assert max(e["ts"] + e["dur"] for e in mine) == pytest.approx(end_us)
        assert min(e["ts"] for e in loads) == pytest.approx(end_us - body_us)
        assert any(e["name"].startswith("inter-node tree") for e in mine) == (nodes > 1)
    chunk = nvls_chunk_bytes(size, p // nodes)
    assert max(e["args"]["bytes"] for e in events if "bytes" in e["args"]) >= chunk
    counters = {e["name"] for e in trace_events(r, topo) if e["ph"] == "C"}
    assert len(counters) == len(r.link_busy_s)


def test_nvls_chunk_shrinks_for_small_messages():
    assert nvls_chunk_bytes(1 << 30, 8) == 128 * 1024
    assert nvls_chunk_bytes(1 << 20, 8) == 16 * 1024
