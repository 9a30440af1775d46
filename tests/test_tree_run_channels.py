"""The channels a tree all-reduce runs on across nodes (simulate/nccl.py tree_run_channels):
NCCL runs the tree on comm->nChannels (v2.23.4-1 src/enqueue.cc:1859, :1899), the search's
channels doubled (nccl_tuning.topology_coll_channels), so on nodes of 4 x 200G NICs each of 8
channels, not 16, pipelines its share in 512 KiB Simple chunks. The tree is timed on that one
count (its fill, per-channel rates, Simple's cap) and every view reports it."""
import pytest

from gpucomm.interop.tuner import TuneRequest, tune
from gpucomm.simulate import constants as K
from gpucomm.simulate import nccl, nccl_tuning, predict
from gpucomm.topology import build_topology

MIB = 1 << 20


def alps(nodes: int):
    return build_topology("cray-ex254n", nodes=nodes, gpus_per_node=4, nic="slingshot-200g")


def test_the_tree_runs_on_nccls_collective_channels_across_nodes():
    two = alps(2)
    assert nccl.tree_run_channels(two, 2) == nccl_tuning.topology_coll_channels(two) == 8
    assert nccl.tree_run_channels(alps(1), 1) == K.TREE_CHANNELS
    dgx = build_topology("dgx-h100", nodes=2)
    assert nccl.tree_run_channels(dgx, 2) == nccl_tuning.topology_coll_channels(dgx) == 16


def test_the_fill_stops_growing_once_each_of_the_8_channels_holds_a_chunk(monkeypatch):
    """From 8 x 512 KiB = 4 MiB the fill is constant: 8 MiB pays half the fill 16 channels
    would (one chunk per channel there, two here); below 4 MiB nothing changes."""
    topo = alps(2)

    def t(size, channels=None):
        if channels is not None:  # the fill alone on `channels` (the rest as the tree runs)
            fill = nccl._tree_fill
            monkeypatch.setattr(nccl, "_tree_fill",
                                lambda shape, proto, size, _, *rest: fill(shape, proto, size,
                                                                          channels, *rest))
        out = predict("all_reduce", size, topo, algorithm="tree", protocol="simple",
                      nccl_version="2.23.4").time_s
        monkeypatch.undo()
        return out

    assert t(2 * MIB) == pytest.approx(t(2 * MIB, 16), rel=1e-12)
    assert t(8 * MIB) == pytest.approx(t(8 * MIB, 8), rel=1e-12)
    # at 8 MiB a channel's share is 512 KiB x 16 / channels: the fill F on 16 channels (one
    # chunk each, store and forward), F/2 on 8, F/4 on 4
    assert t(8 * MIB, 16) - t(8 * MIB) == pytest.approx(2 * (t(8 * MIB) - t(8 * MIB, 4)),
                                                         rel=1e-6)
    # the Alps 2-node log (data/logs/alps-gh200-2n-all_reduce.log) ran 8 MiB in 300 us; the
    # 16-channel fill predicted 676 us
    assert t(8 * MIB) * 1e6 < 450


def test_the_tree_is_timed_and_reported_on_the_channels_it_runs():
    """One count for the tree: its per-channel rates and Simple's cap (NCCL's perChMaxTreeBw,
    per channel) count the channels the fill counts, and `sim`, the timed run and the tuner
    file report them: 8 on Alps's 4 NICs, 4 on Polaris's 2, 16 on one node."""
    for topo, nodes, want in ((alps(2), 2, 8), (alps(1), 1, K.TREE_CHANNELS),
                              (build_topology("polaris", nodes=2), 2, 4)):
        assert nccl.tree_run_channels(topo, nodes) == want
        for size in (64 << 10, 64 * MIB):
            r = predict("all_reduce", size, topo, algorithm="tree", protocol="simple")
            assert r.nccl_channels == r.timed.channels == want
            assert r.reason.startswith(f"tree/simple {want}ch")
    rules = tune(TuneRequest(topology=alps(2), collectives=("all_reduce",),
                             sub_communicators=False))
    trees = [r for r in rules if r["algorithm"] == "tree" and r["nNodes"] == 2]
    assert trees and all(r["channels"] == 8 for r in trees)


def test_the_simple_cap_counts_the_channels_the_tree_runs(monkeypatch):
    """Polaris at 4 nodes (A100, NCCL's N4 column): 4 channels x perChMaxTreeBw 17.8 GB/s
    bound the chain inside the node, which 16 channels did not. The NICs still set the
    bandwidth term; the chain's rate shows in the fill's chain hops (a chunk at the chain's
    rate each), so with the fill's chunks held at 4 channels the tree is slower on 4."""
    topo = build_topology("polaris", nodes=4)
    fill = nccl._tree_fill

    def t(channels=None):
        if channels is not None:
            monkeypatch.setattr(nccl, "tree_run_channels", lambda *_: channels)
            monkeypatch.setattr(nccl, "_tree_fill",
                                lambda shape, proto, size, _, *rest: fill(shape, proto, size, 4,
                                                                          *rest))
        out = predict("all_reduce", 4 * MIB, topo, algorithm="tree", protocol="simple").time_s
        monkeypatch.undo()
        return out

    assert nccl.tree_run_channels(topo, 4) == 4
    assert t() == pytest.approx(t(4), rel=1e-12)
    assert t() > t(16) * 1.01


def test_the_trees_connections_are_those_of_the_channels_it_runs():
    """Each channel opens its own connection to its tree peers (connect.cc connectTrees: channel
    c runs tree 0, c + nChannels tree 1): on Snellius's 4 x HDR's 8 channels one connection of
    each tree per rail, per edge and direction, as on 8 x NDR's 16 (nccl_trees.tree_routes)."""
    import numpy as np

    from gpucomm.simulate import nccl_trees
    from gpucomm.simulate.core import path_table
    from gpucomm.topology.fabric import Network
    for gpus, nics, nic in ((4, 4, "ib-hdr"), (8, 8, "ib-ndr")):
        topo = build_topology("dgx-h100", nodes=4, gpus_per_node=gpus, nics_per_node=nics,
                              nic=nic, fabric="rail-2tier", leaf_ports=2,
                              network=Network(routing="ecmp"))
        pl = np.arange(topo.nranks)
        table, _ = nccl_trees.tree_routes(path_table(topo, pl), pl, nccl.node_groups(topo, pl))
        edges = sum(int((p >= 0).sum()) for p in nccl_trees.dtree_parents(4))  # both trees
        assert nccl.tree_run_channels(topo, 4) == 2 * nics
        assert len(table) == 2 * edges * nics  # up and down, one connection per rail
