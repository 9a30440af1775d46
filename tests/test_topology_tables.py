"""Clusters of identical nodes built as columns (topology/tables.py) are the same topology as
the one-object-per-link construction: same devices, links, ranks, routes; the router's shortcuts
(node 0's segments shifted, the switch-only fabric search) give the routes of a full search."""
import ast
import pathlib
import pickle

import numpy as np
import pytest

from gpucomm.topology import Topology, build_topology
from gpucomm.topology import build as build_mod
from gpucomm.topology.fabric import rail_2tier
from gpucomm.topology.tables import DeviceTable, LinkTable

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"

CLUSTERS = [
    dict(system="dgx-h100", nodes=3),
    dict(system="dgx-h100", nodes=5, fabric="fat-tree", leaf_ports=16, oversubscription=2.0),
    dict(system="dgx-h100", nodes=4, fabric="rail-2tier", leaf_ports=2),
    dict(system="dgx-a100", nodes=3, nic="roce-400g", nics_per_node=2),
    dict(system="pcie", nodes=3, gpus_per_node=4, nic="ib-ndr", p2p=False),
    dict(system="pcie", nodes=2, pcie_gen=5),
    dict(system="polaris", nodes=4),
    dict(system="mi300x", nodes=2),
    dict(system="dgx-v100", nodes=2, gpus_per_node=3),
    dict(system="dgx-b200", nodes=1),
]


def _eager(t: Topology, opts: dict) -> Topology:
    """The same cluster, node by node with a Device and a Link object each (the construction
    partitions still use), without the replica marker: every route is searched in full."""
    one = build_topology(**{**opts, "nodes": 1})
    tmpl = one.devices.template
    block = (list(tmpl), [build_mod.Link(ln.src[3:], ln.dst[3:], ln.bandwidth_Bps, ln.latency_s,
                                         ln.tech, ln.efficiency) for ln in one.links],
             [r[3:] for r in one.ranks])
    affinity = dict(zip(block[2], (a[3:] for a in one.nic_affinity)))
    nodes, fabric = opts["nodes"], opts.get("fabric", "rail")
    if fabric == "rail-2tier":
        devices, links, ranks, aff = build_mod._blocks([block], affinity, nodes, "rail", 1.0, 32)
        devices = devices[:nodes * len(tmpl)]
        links = links[:nodes * len(block[1])]
        nics = [d.name for d in tmpl if d.kind == "nic"]
        fdev, flinks = rail_2tier(nodes, nics, [d.model for d in tmpl if d.kind == "nic"],
                                  opts.get("oversubscription", 1.0), opts["leaf_ports"])
        devices, links = devices + fdev, links + flinks
    else:
        devices, links, ranks, aff = build_mod._blocks(
            [block], affinity, nodes, fabric, opts.get("oversubscription", 1.0),
            opts.get("leaf_ports", 32))
    return Topology(name=t.name, devices=tuple(devices), links=tuple(links), ranks=tuple(ranks),
                    gpus_per_node=t.gpus_per_node, nodes=t.nodes,
                    in_switch_reduction=t.in_switch_reduction, p2p=t.p2p,
                    nic_affinity=tuple(aff))


@pytest.mark.parametrize("opts", CLUSTERS, ids=lambda o: "-".join(map(str, o.values())))
def test_columns_are_the_object_by_object_cluster(opts):
    t = build_topology(**opts)
    assert isinstance(t.devices, DeviceTable) and isinstance(t.links, LinkTable)
    ref = _eager(t, opts)
    assert t.devices == ref.devices and ref.devices == t.devices
    assert t.links == ref.links and tuple(t.links) == ref.links
    assert [t.links[i] for i in range(len(t.links))] == list(ref.links)
    assert t == ref and hash(t) == hash(ref)
    assert (t.ranks, t.nic_affinity) == (ref.ranks, ref.nic_affinity)
    for name in ("gpu0", "nic0"):   # lookups by name, through the table's index
        full = f"n{t.nodes - 1}.{name}"
        if full in {d.name for d in ref.devices}:
            assert t.index_of(full) == ref.index_of(full)
    assert [np.array_equal(a, b) for a, b in zip(t.link_arrays(), ref.link_arrays())] == \
        [True] * 3
    assert str(t) == str(ref)


@pytest.mark.parametrize("opts", CLUSTERS, ids=lambda o: "-".join(map(str, o.values())))
def test_routes_equal_a_full_search(opts):
    t = build_topology(**opts)
    ref = _eager(t, opts)
    assert t.cache.replica is not None and ref.cache.replica is None
    R = t.nranks
    for s in range(R):
        for d in range(R):
            assert t.routes(s, d) == ref.routes(s, d), (s, d)
    src, dst = np.meshgrid(np.arange(R), np.arange(R))
    for ch in range(3):
        assert np.array_equal(t.route_matrix(src.ravel(), dst.ravel(), ch),
                              ref.route_matrix(src.ravel(), dst.ravel(), ch))
    assert t.router.ports() == ref.router.ports()


def test_switch_graph_search_equals_the_whole_fabric():
    t = build_topology("dgx-h100", nodes=6, fabric="rail-2tier", leaf_ports=2)
    r = t.router
    switches = [i for i, n in enumerate(r.node) if n == -1]
    for x in switches:
        full, full_preds = r._sssp(x, False, False)
        part, part_preds = r._sssp(x, False, True)
        assert len(part) < len(full)   # the NICs are left out
        for y in switches:
            assert full.get(y) == part.get(y) and full_preds.get(y) == part_preds.get(y)


def test_big_cluster_stays_columnar():
    t = build_topology("dgx-h100", nodes=2000)   # 16,000 GPUs
    nlinks = t.cache.replica[1]
    assert t.nranks == 16000 and len(t.links) == 2000 * nlinks + 2 * 16000 + 2 * 8 * 8
    assert t.links._items is None and t.devices._items is None   # no object per link made
    hops = [(t.links[i].src, t.links[i].dst) for i in t.route(0, 15999)]
    assert hops[0][0] == t.ranks[0] and hops[-1][1] == t.ranks[15999]
    assert all(a[1] == b[0] for a, b in zip(hops, hops[1:]))
    assert t.links[-1].dst.startswith("rail") and t.links[len(t.links) - 1] == t.links[-1]


def test_tables_behave_as_tuples():
    t = build_topology("dgx-h100", nodes=2)
    links, devices = t.links, t.devices
    as_tuple = tuple(links)
    assert links[-1] == as_tuple[-1] and links[2:5] == as_tuple[2:5]
    assert links[::-7] == as_tuple[::-7]
    with pytest.raises(IndexError):
        links[len(links)]
    assert as_tuple[3] in links and links != as_tuple[:-1] and links != "x"
    assert devices.index(devices[7]) == 7 and len(devices) == len(tuple(devices))
    same, other = build_topology("dgx-h100", nodes=2), build_topology("dgx-h100", nodes=2,
                                                                       oversubscription=2.0)
    assert same == t and hash(same) == hash(t) and same.links._items is None   # by columns
    assert other != t and other.devices == t.devices and other.links != t.links
    back = pickle.loads(pickle.dumps(t))
    assert back == t and back.route(0, 9) == t.route(0, 9) and back.devices[9] == devices[9]


def test_topology_modules_have_no_import_cycle():
    """model -> routing/yamlio/tables -> elements, never back (issue 15)."""
    folder = SRC / "gpucomm" / "topology"
    graph = {}
    for path in folder.glob("*.py"):
        mods = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                mods.add(node.module.split(".")[0])
        graph[path.stem] = mods & {p.stem for p in folder.glob("*.py")}

    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for m in graph.get(todo.pop(), ()):
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        return seen
    for mod in graph:
        assert mod not in reach(mod), f"topology/{mod}.py imports itself through a cycle"
    assert "model" not in reach("routing") | reach("yamlio") | reach("elements")
