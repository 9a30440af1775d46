"""Issue 25, item 6: the contended flow model at cluster scale. A ring too long to simulate op
by op is answered from its frontier with every op at its max-min fair rate among a step's ops
(core.FLOW_RING_OPS); on clusters small enough for the event loop both must agree."""
import numpy as np
import pytest

from gpucomm.simulate import core, predict
from gpucomm.topology import build_topology
from gpucomm.topology.fabric import Network

GIB = 1 << 30


def _random(nodes, routing="ecmp", qps=1, leaf_ports=2):
    return build_topology("dgx-h100", nodes=nodes, nic="roce-400g", fabric="rail-2tier",
                          leaf_ports=leaf_ports, placement="random",
                          network=Network(routing=routing, qps_per_connection=qps))


def _both(monkeypatch, topo, size, **kw):
    """(event loop, frontier with max-min rates) for one ring all-reduce."""
    kw = dict(algorithm="ring", model="flow", **kw)
    whole = predict("all_reduce", size, topo, **kw)
    monkeypatch.setattr(core, "FLOW_RING_OPS", 0)
    return whole, predict("all_reduce", size, topo, **kw)


@pytest.mark.parametrize("nodes, size, routing", [(8, 4 * GIB, "ecmp"), (4, 64 << 20, "ecmp"),
                                                  (8, 4 * GIB, "spray")])
def test_ring_frontier_with_max_min_rates_is_the_event_loop(monkeypatch, nodes, size, routing):
    topo = _random(nodes, routing)
    whole, fast = _both(monkeypatch, topo, size)
    assert whole.events > 0 and fast.events == 0  # the event loop ran; the frontier did not
    assert "max-min fair rate" in fast.note and "max-min" not in whole.note
    assert fast.time_s == pytest.approx(whole.time_s, rel=1e-9)


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter"])
def test_the_other_rings_too(monkeypatch, collective):
    topo = _random(8)
    kw = dict(algorithm="ring", model="flow")
    whole = predict(collective, 4 * GIB, topo, **kw)
    monkeypatch.setattr(core, "FLOW_RING_OPS", 0)
    fast = predict(collective, 4 * GIB, topo, **kw)
    assert whole.events > 0 and fast.events == 0
    assert fast.time_s == pytest.approx(whole.time_s, rel=1e-9)


def test_ring_frontier_sees_the_hash(monkeypatch):
    # the contended answer is not the even split: ECMP's collisions slow it, as op by op
    monkeypatch.setattr(core, "FLOW_RING_OPS", 0)
    ecmp = predict("all_reduce", 4 * GIB, _random(8), algorithm="ring", model="flow")
    spray = predict("all_reduce", 4 * GIB, _random(8, "spray"), algorithm="ring", model="flow")
    more = predict("all_reduce", 4 * GIB, _random(8, qps=4), algorithm="ring", model="flow")
    assert ecmp.time_s > 1.3 * spray.time_s
    assert spray.time_s < more.time_s < ecmp.time_s


def test_max_min_is_progressive_filling():
    from gpucomm.simulate.flow import maxmin
    # links 0 (cap 3), 1 (cap 10); flow a on 0, b on 0 and 1, c on 1 twice (two lanes), d
    # capped at 1 on 1: a = b = 1.5 on link 0; d = 1; c's two shares fill link 1's rest
    m = np.array([[0, -1], [0, 1], [1, 1], [1, -1]])
    rate = maxmin(m, np.array([3.0, 10.0]), np.array([np.inf, np.inf, np.inf, 1.0]))
    assert rate == pytest.approx([1.5, 1.5, (10 - 1.5 - 1) / 2, 1.0])


def test_an_all_to_all_too_large_to_route_is_refused_before_it_is_built(monkeypatch):
    from gpucomm.errors import ConfigError
    from gpucomm.simulate import paths
    topo = _random(4)
    assert predict("all_to_all", 1 << 20, topo).time_s > 0
    monkeypatch.setattr(paths, "MAX_STEP_OPS", 32 * 32 - 1)  # 4 DGX H100: 32 ranks
    with pytest.raises(ConfigError, match="1,024 ops.*at most 1,023.*up to 31 ranks"):
        predict("all_to_all", 1 << 20, topo)
