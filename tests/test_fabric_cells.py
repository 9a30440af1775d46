"""The cell model of adaptive routing (simulate/fabric_cells.py) and the share of a cable it
gives the fabric model under per-packet adaptive routing (simulate/fabric_ar.py)."""
import numpy as np
import pytest

from gpucomm.errors import ConfigError
from gpucomm.simulate.fabric_ar import AR_SWITCHES, ar_switching, clos_share, sendrecv_share
from gpucomm.simulate.fabric_cells import Clos, Switching, pair_rates

SMALL = Clos(leaves=4, hosts=4, spines=4)


def _pairs(clos: Clos, seed: int) -> np.ndarray:
    o = np.random.default_rng(seed).permutation(clos.nhosts)
    d = np.empty(clos.nhosts, dtype=np.int64)
    d[o[0::2]], d[o[1::2]] = o[1::2], o[0::2]
    return d


def _share(clos: Clos, sw: Switching, patterns: int = 4, cells: int = 300) -> float:
    dests = np.array([_pairs(clos, p) for p in range(patterns)])
    r = pair_rates(clos, dests, sw, cells=cells, warmup=cells, seed=1)
    return float(np.minimum(r, np.take_along_axis(r, dests, 1)).mean())


def test_a_lone_flow_runs_at_line_rate_and_no_host_beats_it():
    dest = np.arange(SMALL.nhosts)
    dest[0], dest[15] = 15, 0  # one pair across leaves; the rest send to themselves
    for choice in ("hash", "spray", "packet", "flowlet"):
        r = pair_rates(SMALL, dest, Switching(choice=choice, buffer=4, credit_rtt=2),
                       cells=200, warmup=50, seed=0)[0]
        assert r[0] == pytest.approx(1.0) and r[15] == pytest.approx(1.0)
        assert (r <= 1.0 + 1e-12).all()


def test_per_packet_adaptive_routing_beats_hashing_and_spraying():
    ecmp = _share(SMALL, Switching(choice="hash", buffer=8, credit_rtt=2))
    spray = _share(SMALL, Switching(choice="spray", buffer=8, credit_rtt=2))
    ar = _share(SMALL, Switching(choice="packet", buffer=8, credit_rtt=2))
    assert ecmp < spray < ar <= 1.0
    assert ecmp < 0.8


def test_adaptive_routing_loses_less_with_deeper_buffers():
    """What per-packet AR loses is head-of-line blocking behind a full ingress buffer."""
    clos = Clos(leaves=8, hosts=4, spines=4)
    shallow = _share(clos, Switching(choice="packet", buffer=3, credit_rtt=2))
    deep = _share(clos, Switching(choice="packet", buffer=32, credit_rtt=2))
    assert shallow < deep - 0.05


def test_a_stale_view_of_the_queues_costs_throughput():
    clos = Clos(leaves=8, hosts=4, spines=4)
    fresh = _share(clos, Switching(choice="packet", buffer=6, credit_rtt=2))
    stale = _share(clos, Switching(choice="packet", buffer=6, credit_rtt=2, reaction=32))
    assert stale < fresh - 0.015


def test_flowlets_that_never_idle_keep_their_first_path():
    """A saturated flow waits for credits only briefly: with a gap longer than any stall it
    never moves, so it keeps the path its leaf gave it at the start."""
    clos = Clos(leaves=8, hosts=4, spines=4)
    stuck = _share(clos, Switching(choice="flowlet", buffer=6, credit_rtt=2, gap=10_000))
    moving = _share(clos, Switching(choice="flowlet", buffer=6, credit_rtt=2, gap=0))
    ar = _share(clos, Switching(choice="packet", buffer=6, credit_rtt=2))
    assert stuck < moving <= ar + 0.02


def test_a_sendrecv_loop_waits_for_both_messages():
    """Pairs exchanging messages (MPI_Sendrecv in a loop) idle while the last cells fly, so
    they deliver less than streaming pairs; a lone pair idles a path's latency a message."""
    clos = Clos(leaves=4, hosts=4, spines=4)
    sw = Switching(choice="packet", buffer=8, credit_rtt=2)
    dests = np.array([_pairs(clos, p) for p in range(2)])
    streaming = pair_rates(clos, dests, sw, cells=400, warmup=100, seed=0)
    looped = pair_rates(clos, dests, sw, cells=400, warmup=100, seed=0, message=20)
    assert looped.mean() < streaming.mean()
    lone = np.arange(clos.nhosts)
    lone[0], lone[15] = 15, 0
    r = pair_rates(clos, lone, sw, cells=400, warmup=100, seed=0, message=20)[0]
    assert 0.5 < r[0] == r[15] < 1.0


def test_g_and_h_loop_pays_for_deep_queues_that_streaming_hides():
    """In a Sendrecv loop a pair waits for both messages, so the queues a deep buffer lets
    build cost it; streaming hides them. A lone pair's loop is the yardstick (<= 1 share)."""
    clos = Clos(leaves=8, hosts=4, spines=4)
    deep = Switching(choice="packet", buffer=64, credit_rtt=4)
    loop = sendrecv_share(clos, deep, message=32, cells=640, patterns=2)
    assert (loop < clos_share(clos, deep, patterns=2) - 0.02).all()
    assert (loop > 0.3).all() and (loop <= 1.0).all()


def test_flowlets_with_path_feedback_move_off_remote_collisions_between_messages():
    """A leaf choosing a flowlet's spine by its own up-port queues cannot see a collision on
    a spine's down-link; CONGA's leaf-to-leaf feedback (the larger of the up- and down-port
    queue of each path, here a round trip old) can, but only when a pair idles longer than
    the gap between its messages: with a gap longer than the loop's idle time the flowlet
    keeps the spine it took at the start."""
    clos = Clos(leaves=8, hosts=8, spines=8)

    def loop(view: str, gap: int) -> float:
        sw = Switching(choice="flowlet", buffer=6, credit_rtt=4, gap=gap, view=view,
                       reaction=8)
        return float(sendrecv_share(clos, sw, message=32, cells=640, patterns=8).mean())

    path = loop("path", 12)
    assert path > loop("local", 12) + 0.05
    assert path > loop("path", 10_000) + 0.04


@pytest.mark.parametrize("bad, match", [
    (lambda: Switching(choice="random", buffer=4), "choice 'random' not allowed"),
    (lambda: Switching(choice="packet", buffer=0), "buffer 0 not allowed"),
    (lambda: Switching(choice="flowlet", buffer=4, view="global"), "view 'global' not allowed"),
    (lambda: Switching(choice="packet", buffer=4, view="path"), "'path' only with choice"),
    (lambda: Clos(leaves=0, hosts=2, spines=2), "leaves 0 not allowed"),
    (lambda: pair_rates(SMALL, np.zeros(3, dtype=np.int64), Switching(choice="hash", buffer=2),
                        cells=10, warmup=0, seed=0), "each of the 16 hosts"),
    (lambda: pair_rates(SMALL, np.zeros(16, dtype=np.int64), Switching(choice="hash", buffer=2),
                        cells=0, warmup=0, seed=0), "cells 0 not allowed"),
    (lambda: pair_rates(SMALL, (np.arange(16) + 1) % 16, Switching(choice="hash", buffer=2),
                        cells=5, warmup=0, seed=0, message=4), "only for hosts in pairs"),
])
def test_bad_input_is_refused_by_name(bad, match):
    with pytest.raises(ConfigError, match=match):
        bad()


def test_each_setting_takes_its_buffer_from_its_source():
    ib = ar_switching("adaptive", 50e9, 0.5e-6, 4096)
    sx = ar_switching("spectrum-x", 50e9, 0.5e-6, 4096)
    assert ib.credit_rtt == 13 and ib.buffer == 14  # 2 x 0.5 us x 50 GB/s / 4 KiB, + 1
    assert sx.buffer == int(AR_SWITCHES["spectrum-x"].buffer_bytes // 4096) == 244
    small = Clos(leaves=4, hosts=4, spines=4)
    assert clos_share(small, ib) < clos_share(small, sx) <= 1.0


def test_the_fabric_model_carries_the_cell_models_share():
    """One path: a cable's payload capacity under per-packet AR is the cell model's share on
    the fabric's own shape; spraying keeps the full cable."""
    from gpucomm.simulate.fabric_ar import ar_share
    from gpucomm.simulate.paths import PathTable
    from gpucomm.topology import build_topology
    from gpucomm.topology.fabric import Network

    def cables(routing: str) -> tuple[np.ndarray, PathTable]:
        topo = build_topology("dgx-h100", nodes=16, gpus_per_node=1, nics_per_node=1,
                              nic="ib-ndr", fabric="rail-2tier", leaf_ports=4,
                              network=Network(routing=routing))
        p = PathTable(topo)
        return p.capacity[p.fabric.between], p

    spray, _ = cables("spray")
    ar, p = cables("adaptive")
    k = np.flatnonzero(p.fabric.between)[0]
    share = ar_share(p.topo.router, "adaptive", float(spray[0]), float(p.latency[k]), 4096)
    assert 0.5 < share < 1.0
    assert ar == pytest.approx(spray * share)
