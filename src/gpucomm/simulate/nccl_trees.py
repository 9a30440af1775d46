"""NCCL's double binary tree across nodes: its shape (trees.cc), what the busiest node's NICs
carry, and the connections it opens on a modelled fabric (the tree's and nvls_tree's network
part; nccl.py times them, concurrent.py times several jobs' trees on shared cables)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from . import constants as K
from . import nccl_tuning
from .paths import PathTable, Routes

if TYPE_CHECKING:
    from ..topology import Topology
    from .fabric import FabricPolicy


def positions(placement: npt.ArrayLike, ranks: npt.ArrayLike) -> npt.NDArray[np.intp]:
    """Positions in the placement (schedule ranks) of topology ranks."""
    placed = np.asarray(placement, dtype=np.int64).reshape(-1)
    order = np.argsort(placed, kind="stable")
    return order[np.searchsorted(placed, np.asarray(ranks, dtype=np.int64), sorter=order)]


def dtree_parents(n: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Parent of each of n tree ranks (-1: the root) in NCCL's double binary tree (trees.cc
    ncclGetBtree / ncclGetDtree): tree 0 a binary tree over ranks by their lowest set bit,
    tree 1 the mirror of it (n even) or it shifted by one (n odd), so that a rank inner in
    one tree is a leaf in the other.

        >>> [p.tolist() for p in dtree_parents(4)]
        [[-1, 2, 0, 2], [1, 3, 1, -1]]
    """
    def btree_parent(r: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        # ncclGetBtree, every rank at once: r's lowest set bit is below n (r < n), so the
        # search for it ends there; its parent clears that bit and sets the next, or (past
        # the last rank) only clears it; rank 0 is the root
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        return np.where(r == 0, -1, np.where(up < n, up, r ^ bit))

    r = np.arange(n, dtype=np.int64)
    t0 = btree_parent(r)
    if n % 2:  # shifted: rank r plays (r - 1) mod n
        u = btree_parent((r - 1) % n)
        t1 = np.where(u < 0, -1, (u + 1) % n)
    else:  # mirrored: rank r plays n - 1 - r
        u = btree_parent(n - 1 - r)
        t1 = np.where(u < 0, -1, n - 1 - u)
    return t0, t1


def tree_net_factor(n: int) -> float:
    """Bytes the busiest node's NICs carry in each direction, per byte of the buffer, for NCCL's
    double binary tree across n nodes (trees.cc ncclGetDtree: dtree_parents). Each tree carries
    half the buffer (connect.cc connectTrees: the first half of the channels run tree 0, their
    copies tree 1); a node sends its half up to its parent (reduce) and down to each child
    (broadcast), and receives as much, so per direction it moves (children + has-parent) halves
    in each tree. 2 nodes: 1 (each node is the root of one tree and the leaf of the other);
    3: 1.5; 4 and more: 2 (a node inner in one tree, with two children and a parent).

        >>> [tree_net_factor(n) for n in (1, 2, 3, 4, 5, 8)]
        [0.0, 1.0, 1.5, 2.0, 2.0, 2.0]
    """
    if n < 2:
        return 0.0
    load = np.zeros(n)
    for parent in dtree_parents(n):
        has = parent >= 0
        load += (np.bincount(parent[has], minlength=n) + has) / 2
    return float(load.max())


def tree_fabric_slowdown(paths: PathTable, placement: npt.ArrayLike,
                         nodes: dict[int, list[int]], nvls: bool = False) -> float:
    """How much the fabric slows the network part of a tree (tree, or nvls_tree with `nvls`)
    against a fabric that never collides: 1 without a fabric model (topology.network None).
    A pipelined tree moves at its slowest edge's pace (fabric.FabricPolicy.pipeline_slowdown)
    over its connections (tree_routes)."""
    rows = tree_routes(paths, placement, nodes, nvls)
    if rows is None:
        return 1.0
    table, one = rows
    return one.pipeline_slowdown(table, paths.capacity)


def tree_run_channels(topology: Topology, nodes: int) -> int:
    """The channels NCCL splits a tree all-reduce's buffer over, each its own SM pipelining its
    share in chunks: what `tree` times (per-channel rates, Simple's cap, the fill) and reports.
    comm->nChannels (v2.23.4-1 src/enqueue.cc:1859 topoGetAlgoInfo
    starts nc at comm->nChannels, trims it only below nc x nThreads x threadThreshold bytes
    (:1878) and sets task->nMaxChannels to it (:1899); scheduleCollTasksToPlan spreads the
    bytes over those channels, at most comm->nChannels (:721, :736-:737), a 512 KiB Simple
    chunk at a time (calcCollChunking: stepSize = 4 MiB / NCCL_STEPS, no tree rule, :2009)). Across
    nodes that is the search's channels doubled by ncclTopoPostset (nccl_tuning
    .topology_coll_channels: 8 on 4 x 200G NICs, 16 on 8 x NDR), not TREE_CHANNELS; on one
    node, or nodes without NICs, TREE_CHANNELS."""
    searched = nccl_tuning.topology_coll_channels(topology) if nodes > 1 else None
    return searched or K.TREE_CHANNELS


def tree_routes(paths: PathTable, placement: npt.ArrayLike, nodes: dict[int, list[int]],
                nvls: bool = False) -> tuple[Routes, FabricPolicy] | None:
    """The route rows of the connections NCCL opens for a tree's network part (tree, or
    nvls_tree with `nvls`), and the policy that laid their lanes; None without a fabric model
    or on one node.

    The flows are the connections NCCL opens for the trees, each its own op (its queue pairs
    the fabric's lanes, fabric.FabricPolicy.per_connection), both binary trees' edges between
    nodes, up (reduce) and down (broadcast), at once, hashed, sprayed or adaptively routed as
    the network says. Every channel has its own connection to its tree peers (init.cc
    ncclTransportP2pConnect per channel; net.cc shares a connection only without a graph,
    i.e. for send/recv), and the channels fall on the rails as NCCL lays them out:
    - tree: the search's channels (one per NIC) are duplicated, the first half running tree
      0 and the copies tree 1 (connect.cc connectTrees, channel c and c + nChannels), so a
      rail carries the tree's channels (tree_run_channels: comm->nChannels) / 2 / rails
      connections of each tree (1 on 8 x NDR's 16
      channels and on 4 x 200G's 8); channel c leaves by rail c (mod the rails);
    - nvls_tree: every NVLS channel (NCCL_NVLS_NCHANNELS, 16) of a head rank talks to its
      tree peers, tree 0 on even channels and tree 1 on odd ones (connect.cc connectNvls,
      treeUp[c%2]), the head being the rank next to its rail's NIC: NVLS_CHANNELS / 2
      connections of each tree per rail (8).
    A connection's messages go round-robin over its queue pairs. An explicit
    `Network.connections` sets the connections per tree, per rail, instead."""
    fab = paths.fabric
    n = len(nodes)
    if fab is None or n < 2:
        return None
    heads = positions(placement, [v[0] for v in nodes.values()])
    rails = paths.rails_per_node
    run = tree_run_channels(paths.topo, n)
    per = fab.net.connections or max((K.NVLS_CHANNELS if nvls else run // rails) // 2, 1)
    src_parts, dst_parts, ch_parts = [], [], []
    for t, parent in enumerate(dtree_parents(n)):
        child = np.flatnonzero(parent >= 0)
        src = np.concatenate([heads[child], heads[parent[child]]])
        dst = np.concatenate([heads[parent[child]], heads[child]])
        # connection k of tree t on rail r: a channel number that leaves by rail r
        conn = (np.arange(per, dtype=np.int64) * 2 + t)[:, None] * rails + \
            np.arange(rails, dtype=np.int64)[None, :]
        ch_parts.append(np.repeat(conn.reshape(-1), len(src)))
        src_parts.append(np.tile(src, per * rails))
        dst_parts.append(np.tile(dst, per * rails))
    one = fab.per_connection()
    table = paths.routes(np.concatenate(src_parts), np.concatenate(dst_parts),
                         np.concatenate(ch_parts), fabric=one)
    return table, one
