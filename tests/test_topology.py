"""Topologies: presets, PCIe boxes, rails, fat-trees, routing, YAML, bad input, `gpucomm topo`."""
import dataclasses
import json
import sys

import numpy as np
import pytest

from gpucomm.cli import main
from gpucomm.errors import ConfigError, TopologyError
from gpucomm.topology import (Device, Link, Topology, bisection_bandwidth, build_topology,
                              gpu_bandwidths, load_topology, preset_names)


def hops(topo, path):
    return [(topo.links[i].src, topo.links[i].dst) for i in path]


def devices_on(topo, path):
    return {topo.links[i].dst for i in path} | {topo.links[i].src for i in path}


def kinds_on(topo, path):
    return [topo.device(topo.links[i].dst).kind for i in path]


# ---- presets ---------------------------------------------------------------------------------
@pytest.mark.parametrize("system, gpu, nvlink_GBps, nic, nics, in_switch", [
    ("dgx-v100", "v100", 150, "ib-edr", 4, False),
    ("dgx-a100", "a100", 300, "ib-hdr", 8, False),
    ("dgx-h100", "h100", 450, "ib-ndr", 8, True),
    ("hgx-h200", "h200", 450, "ib-ndr", 8, True),
    ("dgx-b200", "b200", 900, "ib-ndr", 8, True),
    ("pcie", "l40s", 0, "roce-100g", 2, False)])
def test_presets_load_with_right_gpus_and_bandwidth(system, gpu, nvlink_GBps, nic, nics,
                                                     in_switch):
    t = build_topology(system)
    assert t.nranks == 8 and t.nodes == 1 and t.gpus_per_node == 8
    assert {t.rank_device(r).model for r in range(8)} == {gpu}
    assert t.in_switch_reduction is in_switch
    nic_models = [d.model for d in t.devices if d.kind == "nic"]
    assert nic_models == [nic] * nics
    for row in gpu_bandwidths(t):
        assert row["nvlink_Bps"] == nvlink_GBps * 1e9


def test_preset_list():
    assert set(preset_names()) >= {"dgx-v100", "dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200",
                                   "pcie"}


def test_nvswitch_gives_each_gpu_its_full_nvlink_both_ways():
    t = build_topology("dgx-h100")
    for a in range(8):
        for b in range(8):
            if a != b:
                path = t.route(a, b)
                assert kinds_on(t, path) == ["nvswitch", "gpu"]
                assert t.path_bandwidth(a, b) == pytest.approx(450e9 * 0.824)
    sw = [ln for ln in t.links if "nvswitch" in (ln.src + ln.dst)]
    assert len(sw) == 16 and {ln.bandwidth_Bps for ln in sw} == {450e9}


def test_nvlink_over_pcie_ratio_is_900_over_128():
    nv = build_topology("dgx-h100")
    pc = build_topology("pcie", pcie_gen=5)
    bw, _, _ = nv.link_arrays()
    pbw, _, _ = pc.link_arrays()
    nominal_nv = min(bw[list(nv.route(0, 1))])
    nominal_pc = min(pbw[list(pc.route(0, 2))])
    assert nominal_nv / nominal_pc == pytest.approx(900 / 128)
    assert round(nominal_nv / nominal_pc, 2) == 7.03


def test_dgx_v100_hybrid_cube_mesh():
    t = build_topology("dgx-v100")
    assert len(t.route(0, 3)) == 1 and t.links[t.route(0, 3)[0]].bandwidth_Bps == 50e9  # NV2
    assert len(t.route(0, 1)) == 1 and t.links[t.route(0, 1)[0]].bandwidth_Bps == 25e9  # NV1
    # 0 and 5 share no NVLink: through PCIe, the root complex and QPI
    assert "cpu" in kinds_on(t, t.route(0, 5)) and "gpu" not in kinds_on(t, t.route(0, 5))[:-1]
    assert t.path_bandwidth(0, 5) == pytest.approx(6e9, rel=0.01)   # NCCL's BDW QPI figure
    nvlinks = {}
    for ln in t.links:
        if ln.tech == "nvlink2":
            nvlinks[ln.src] = nvlinks.get(ln.src, 0) + ln.bandwidth_Bps
    assert set(nvlinks.values()) == {150e9}          # 6 links x 25 GB/s per GPU


# ---- PCIe box --------------------------------------------------------------------------------
def test_pcie_box_paths_cross_switch_root_complex_and_socket_link():
    t = build_topology("pcie")
    assert kinds_on(t, t.route(0, 1)) == ["pcie_switch", "gpu"]          # same switch
    assert kinds_on(t, t.route(0, 2)) == ["pcie_switch", "cpu", "pcie_switch", "gpu"]
    path = t.route(0, 4)                                                  # other socket
    assert [t.links[i].tech for i in path].count("upi-spr") == 1
    assert kinds_on(t, path) == ["pcie_switch", "cpu", "cpu", "pcie_switch", "gpu"]
    assert t.path_bandwidth(0, 2) == pytest.approx(32e9 * 0.85)
    assert t.path_bandwidth(0, 4) == pytest.approx(22e9, rel=0.01)         # NCCL SPR figure


def test_pcie_box_without_p2p_bounces_through_host_memory():
    t = build_topology("pcie", p2p=False)
    for a, b in ((0, 1), (0, 2), (0, 4), (5, 0)):
        for path in t.routes(a, b):
            ks = kinds_on(t, path)
            assert ks.count("memory") == 1 and ks[-1] == "gpu"
            assert "gpu" not in ks[:-1]
    with_p2p = build_topology("pcie")
    assert len(t.route(0, 1)) > len(with_p2p.route(0, 1))


@pytest.mark.parametrize("gen, GBps", [(3, 16), (4, 32), (5, 64), (6, 128)])
def test_pcie_generation(gen, GBps):
    t = build_topology("pcie", pcie_gen=gen, gpus_per_node=4)
    assert t.nranks == 4
    assert {ln.bandwidth_Bps for ln in t.links if ln.tech.startswith("pcie")} == {GBps * 1e9}
    assert t.path_bandwidth(0, 1) == pytest.approx(GBps * 1e9 * 0.85)


def test_pcie_box_other_gpu_model():
    t = build_topology("pcie", gpu="rtx4090", gpus_per_node=2, p2p=False)
    assert t.rank_device(0).model == "rtx4090" and not t.p2p
    with pytest.raises(ConfigError, match="does not fit dgx-h100"):
        build_topology("dgx-h100", gpu="a100")


def test_peer_access_follows_the_gpus_driver_unless_asked():
    """GeForce cards get no peer access from NVIDIA's driver (catalog peer_to_peer), so a 4090
    box bounces through host memory by default; p2p=True/False still decides when given."""
    assert not build_topology("pcie", gpu="rtx4090", gpus_per_node=2).p2p
    assert build_topology("pcie", gpu="rtx4090", gpus_per_node=2, p2p=True).p2p
    assert build_topology("pcie", gpu="l40s", gpus_per_node=2).p2p
    assert build_topology("dgx-h100").p2p and not build_topology("dgx-h100", p2p=False).p2p


# ---- clusters --------------------------------------------------------------------------------
def test_gpus_per_node_and_node_major_ranks():
    t = build_topology("dgx-h100", nodes=3, gpus_per_node=4)
    assert t.nranks == 12 and t.gpus_per_node == 4
    assert [t.node_of(r) for r in range(12)] == [0] * 4 + [1] * 4 + [2] * 4
    assert t.ranks[4] == "n1.gpu0"


def test_rail_alignment():
    t = build_topology("dgx-h100", nodes=2)
    for i in range(8):
        path = t.route(i, 8 + i)
        names = devices_on(t, path)
        assert {f"n0.nic{i}", f"rail{i}", f"n1.nic{i}"} <= names
        assert not any(n.startswith("spine") for n in names)
        assert len(t.routes(i, 8 + i)) == 1
    # across rails: out by my NIC, over a spine, in by the peer's NIC
    names = devices_on(t, t.route(0, 11))
    assert {"n0.nic0", "rail0", "rail3", "n1.nic3"} <= names
    assert any(n.startswith("spine") for n in names)
    assert t.path_bandwidth(0, 8) == pytest.approx(50e9 * 0.96)


def test_nic_override_and_affinity():
    t = build_topology("dgx-h100", nodes=2, nic="roce-400g", nics_per_node=4)
    nics = [d for d in t.devices if d.kind == "nic"]
    assert len(nics) == 8 and {d.model for d in nics} == {"roce-400g"}
    assert t.nic_affinity[:8] == tuple(f"n0.nic{i // 2}" for i in range(8))
    assert f"n0.nic{3}" in devices_on(t, t.route(7, 15))
    same = build_topology("dgx-h100", nodes=2, nic="efa-100g")
    assert {d.model for d in same.devices if d.kind == "nic"} == {"efa-100g"}
    assert same.path_bandwidth(0, 8) == pytest.approx(12.5e9 * 0.85)
    pc = build_topology("pcie", nodes=2, nic="tcp-100g", nics_per_node=1)
    assert pc.nic_affinity[:8] == ("n0.nic0",) * 8


def test_fewer_gpus_with_fewer_nics_spread_over_all_nics():
    # 4 of a DGX A100's GPUs with 2 NICs (Polaris-like): GPU i uses NIC floor(i*2/4), and each
    # NIC sits on the PCIe switch of the GPUs that use it
    t = build_topology("dgx-a100", nodes=2, gpus_per_node=4, nics_per_node=2)
    assert t.nic_affinity[:4] == ("n0.nic0", "n0.nic0", "n0.nic1", "n0.nic1")
    parents = {ln.src: ln.dst for ln in t.links if ln.src in ("n0.nic0", "n0.nic1")
               and ln.dst.startswith("n0.")}
    gpu_parent = {ln.src: ln.dst for ln in t.links if ln.src in ("n0.gpu0", "n0.gpu2")
                  and ln.dst.startswith("n0.pcie")}
    assert parents == {"n0.nic0": gpu_parent["n0.gpu0"], "n0.nic1": gpu_parent["n0.gpu2"]}
    assert "n0.nic1" in devices_on(t, t.route(2, 6)) and "n0.nic0" in devices_on(t, t.route(0, 4))
    # the preset's own NICs keep their slots: GPU i of a DGX A100 uses nic i
    own = build_topology("dgx-a100", nodes=2, gpus_per_node=4)
    assert own.nic_affinity[:4] == tuple(f"n0.nic{i}" for i in range(4))
    # more NICs than GPUs in use: each GPU's share fused into one NIC (NCCL NIC fusion)
    wide = build_topology("dgx-h100", nodes=2, gpus_per_node=2, nics_per_node=4)
    assert wide.nic_affinity[:2] == ("n0.nic0", "n0.nic1")
    assert wide.device("n0.nic0").model == "ib-ndr*2"


def test_fat_tree_oversubscription_reduces_bisection():
    full = build_topology("dgx-h100", nodes=16, fabric="fat-tree")
    half = build_topology("dgx-h100", nodes=16, fabric="fat-tree", oversubscription=2)
    quarter = build_topology("dgx-h100", nodes=16, fabric="fat-tree", oversubscription=4)
    b1, b2, b4 = (bisection_bandwidth(t) for t in (full, half, quarter))
    assert b1 == pytest.approx(64 * 50e9)     # 8 nodes x 8 NICs x 50 GB/s
    assert b2 == pytest.approx(b1 / 2) and b4 == pytest.approx(b1 / 4)


def test_fat_tree_ecmp_spreads_channels_over_spines():
    t = build_topology("dgx-h100", nodes=16, fabric="fat-tree")
    alts = t.routes(0, 127)
    assert len(alts) == 4                     # 4 leaves -> 4 spines, all tied
    spines = {next(n for n in devices_on(t, t.route(0, 127, c)) if n.startswith("spine"))
              for c in range(32)}
    assert len(spines) > 1
    assert all(t.route(0, 127, c) in alts for c in range(8))
    assert t.route(0, 127, 5) == t.route(0, 127, 5)       # deterministic


def test_route_matrix_matches_route():
    t = build_topology("dgx-h100", nodes=4, fabric="fat-tree", leaf_ports=16)
    rng = np.random.default_rng(0)
    s = rng.integers(0, t.nranks, 500)
    d = rng.integers(0, t.nranks, 500)
    c = rng.integers(0, 4, 500)
    m = t.route_matrix(s, d, c)
    assert m.dtype == np.int32 and m.shape[0] == 500
    for k in range(500):
        row = tuple(int(x) for x in m[k] if x >= 0)
        assert row == t.route(int(s[k]), int(d[k]), int(c[k]))
        assert (m[k][len(row):] == -1).all()
    assert t.route(3, 3) == () and (t.route_matrix([3], [3])[0] == -1).all()


@pytest.mark.parametrize("kwargs", [
    dict(system="pcie", nodes=2, p2p=False),
    dict(system="dgx-v100", nodes=3),
    dict(system="polaris", nodes=3, fabric="fat-tree", leaf_ports=2),
    dict(system="dgx-a100", nodes=2, nics_per_node=1, nic="roce-200g"),
])
def test_route_matrix_matches_route_everywhere(kwargs):
    t = build_topology(**kwargs)
    s, d = np.meshgrid(np.arange(t.nranks), np.arange(t.nranks))
    s, d = s.ravel(), d.ravel()
    c = np.arange(len(s)) % 3
    m = t.route_matrix(s, d, c)
    for k in range(len(s)):
        path = t.route(int(s[k]), int(d[k]), int(c[k]))
        assert tuple(int(x) for x in m[k] if x >= 0) == path
        assert path in t.routes(int(s[k]), int(d[k]))
        if path:   # a path is connected and goes from the source GPU to the destination GPU
            ends = [(t.links[i].src, t.links[i].dst) for i in path]
            assert ends[0][0] == t.ranks[s[k]] and ends[-1][1] == t.ranks[d[k]]
            assert all(a[1] == b[0] for a, b in zip(ends, ends[1:]))


def test_route_matrix_on_a_big_cluster_is_vectorised():
    t = build_topology("dgx-h100", nodes=128)
    R = t.nranks
    s = np.repeat(np.arange(0, R, 7), 64)
    d = np.tile(np.arange(0, R, 16), len(s) // 64)
    m = t.route_matrix(s, d)
    assert m.shape[0] == len(s)
    for k in (0, 1, 777, len(s) - 1):
        assert tuple(int(x) for x in m[k] if x >= 0) == t.route(int(s[k]), int(d[k]))


def test_path_latency_and_link_arrays():
    t = build_topology("dgx-h100", nodes=2)
    bw, lat, eff = t.link_arrays()
    assert bw.shape == lat.shape == eff.shape == (len(t.links),)
    assert t.path_latency(0, 1) == pytest.approx(0.6e-6)
    assert t.path_latency(0, 8) == pytest.approx(4 * 0.25e-6 + 2 * 0.5e-6)


def test_topology_is_a_hashable_value():
    a, b = build_topology("dgx-a100"), build_topology("dgx-a100")
    a.route(0, 1)   # filling a's cache does not change equality
    assert a == b and hash(a) == hash(b)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.name = "x"


# ---- YAML --------------------------------------------------------------------------------------
def test_yaml_round_trip(tmp_path):
    t = build_topology("dgx-b200", nodes=2, fabric="fat-tree", oversubscription=2,
                       gpus_per_node=6)
    again = Topology.from_yaml(t.to_yaml())
    assert again == t and again.nic_affinity == t.nic_affinity
    path = tmp_path / "t.yaml"
    t.save(path)
    loaded = load_topology(path)
    assert loaded == t
    assert loaded.route(0, 7) == t.route(0, 7)


def test_yaml_hand_written_with_catalog_techs():
    t = Topology.from_yaml("""
name: two-h100
devices:
  - {name: g0, kind: gpu, node: 0, model: h100}
  - {name: g1, kind: gpu, node: 0, model: h100}
links:
  - {src: g0, dst: g1, tech: nvlink4, count: 4, duplex: true}
""")
    assert t.nranks == 2 and t.nodes == 1 and len(t.links) == 2
    assert t.links[0].bandwidth_Bps == 100e9 and t.links[0].efficiency == 0.824
    assert t.route(1, 0) == (1,)


def test_one_node_yaml_replicated_from_cli(tmp_path, capsys):
    node = tmp_path / "node.yaml"
    build_topology("dgx-a100").save(node)
    assert main(["topo", "show", "--topology", str(node), "--nodes", "2",
                 "--format", "json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["ranks"] == 16 and info["nodes"] == 2


BAD_YAML = [
    ("devices: [{name: g0, kind: gpu}]", "missing field 'links'"),
    ("devices: [{kind: gpu}]\nlinks: []", "missing field 'name'"),
    ("devices: [{name: g0, kind: tpu}]\nlinks: []", "unknown kind 'tpu'.*allowed: gpu"),
    ("devices: [{name: g0, kind: gpu}, {name: g1, kind: gpu}]\n"
     "links: [{src: g0, dst: g2, tech: nvlink4}]", "dangling: no device named 'g2'"),
    ("devices: [{name: g0, kind: gpu}, {name: g1, kind: gpu}]\nlinks: [{src: g0, tech: pcie5}]",
     "missing field 'dst'"),
    ("devices: [{name: g0, kind: gpu}, {name: g1, kind: gpu}]\nlinks: [{src: g0, dst: g1}]",
     "missing field 'bandwidth_Bps'"),
    ("devices: [{name: g0, kind: gpu}, {name: g1, kind: gpu}]\n"
     "links: [{src: g0, dst: g1, tech: nvlink9}]", "unknown link technology 'nvlink9'"),
    ("devices: [{name: g0, kind: gpu}]\nlinks: []\ncolour: red", "unknown field 'colour'"),
    ("devices: [{name: g0, kind: gpu}, {name: g0, kind: gpu}]\nlinks: []", "duplicate"),
    ("devices: [{name: g0, kind: gpu}, {name: g1, kind: gpu}]\n"
     "links: [{src: g0, dst: g1, bandwidth_GBps: -1, latency_us: 1}]", "bandwidth_GBps -1 is out"),
    ("devices: [{name: s, kind: gpu, node: -1}]\nlinks: []", "only kind 'switch'"),
    ("devices: [nope]\nlinks: []", "must be a mapping"),
    ("[1, 2", "not valid YAML"),
]


@pytest.mark.parametrize("text, message", BAD_YAML)
def test_bad_yaml_is_a_one_line_topology_error(text, message):
    with pytest.raises(TopologyError, match=message) as info:
        Topology.from_yaml(text)
    assert "\n" not in str(info.value)


def test_no_route_between_two_ranks():
    t = Topology.from_yaml("""
devices: [{name: g0, kind: gpu}, {name: g1, kind: gpu}, {name: g2, kind: gpu}]
links: [{src: g0, dst: g1, tech: nvlink4, duplex: true}, {src: g1, dst: g2, tech: nvlink4}]
""")
    assert t.route(0, 1) == (0,)
    with pytest.raises(TopologyError, match=r"no route from rank 0 \(g0\) to rank 2 \(g2\)"):
        t.route(0, 2)       # a GPU does not forward: g1 is not a router
    with pytest.raises(TopologyError, match="no route"):
        t.check_routes()
    two_nodes = Topology.from_yaml("""
devices: [{name: a, kind: gpu, node: 0}, {name: b, kind: gpu, node: 1}]
links: []
""")
    with pytest.raises(TopologyError, match="node 0 has no link to the fabric"):
        two_nodes.route(0, 1)
    with pytest.raises(TopologyError, match="out of range"):
        t.route(0, 3)


@pytest.mark.parametrize("kwargs, message", [
    (dict(system="dgx-x"), "unknown system preset 'dgx-x'; allowed: cray-ex254n, dgx-a100"),
    (dict(system="dgx-h100", nodes=2, nic="ib-foo"), "unknown NIC 'ib-foo'; allowed: ib-edr"),
    (dict(system="dgx-h100", gpus_per_node=9), "gpus_per_node 9 is more than dgx-h100 has: "
                                               "allowed 1..8"),
    (dict(system="pcie", pcie_gen=7), "pcie_gen 7 not allowed"),
    (dict(system="dgx-h100", nodes=2, fabric="torus"), "unknown fabric 'torus'"),
    (dict(system="dgx-h100", nodes=2, oversubscription=0.5), "oversubscription 0.5"),
    (dict(system="dgx-h100", nodes=0), "nodes 0 not allowed"),
])
def test_bad_builder_input(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        build_topology(**kwargs)


def test_value_checks():
    with pytest.raises(TopologyError, match="unknown kind"):
        Device("x", "tpu", 0)
    with pytest.raises(TopologyError, match="efficiency"):
        Link("a", "b", 1e9, 0.0, "custom", efficiency=1.5)
    with pytest.raises(TopologyError, match="not a GPU"):
        Topology("t", (Device("c", "cpu", 0),), (), ("c",), 1, 1)


# ---- CLI -----------------------------------------------------------------------------------------
def test_cli_show_json(capsys):
    assert main(["topo", "show", "--system", "dgx-h100", "--nodes", "2", "--format",
                 "json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["ranks"] == 16 and info["in_switch_reduction"] is True
    assert info["bisection_GBps"] == 400.0
    row = info["per_gpu_GBps"][3]
    assert (row["nvlink"], row["to_nic"], row["to_host"], row["nic"]) == \
        (450.0, 50.0, 64.0, "n0.nic3")


def test_cli_show_table_and_route(capsys):
    assert main(["topo", "show", "--system", "pcie", "--no-p2p", "--pcie-gen", "3"]) == 0
    out = capsys.readouterr().out
    assert "p2p off" in out and "bisection" in out and "pcie3" in out
    assert main(["topo", "route", "--system", "pcie", "--no-p2p", "0", "1"]) == 0
    assert "mem" in capsys.readouterr().out


@pytest.mark.parametrize("argv, word", [
    (["topo", "show", "--system", "nope"], "nope"),
    (["topo", "show", "--nic", "ib-foo", "--nodes", "2"], "ib-foo"),
    (["topo", "show", "--gpus-per-node", "9"], "allowed 1..8"),
    (["topo", "show", "--topology", "/nonexistent/t.yaml"], "cannot read"),
])
def test_cli_bad_input_exit_2_one_line(argv, word, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and word in err


def test_cli_plot(tmp_path, capsys, monkeypatch):
    out = tmp_path / "t.png"
    pytest.importorskip("matplotlib")
    assert main(["topo", "show", "--system", "dgx-v100", "--plot", str(out)]) == 0
    assert out.stat().st_size > 1000
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # as if not installed
    assert main(["topo", "show", "--plot", str(tmp_path / "u.png")]) == 2
    assert "needs matplotlib" in capsys.readouterr().err


def test_cli_export_then_load(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    assert main(["topo", "export", "--system", "hgx-h200", "--nodes", "2", "--output", str(f)]) == 0
    assert load_topology(f) == build_topology("hgx-h200", nodes=2)


def test_polaris_preset_nvlink_mesh_and_slingshot():
    t = build_topology("polaris", nodes=2)
    assert t.nranks == 8 and t.gpus_per_node == 4
    assert all(len(t.route(a, b)) == 1 for a in range(4) for b in range(4) if a != b)
    assert t.links[t.route(0, 1)[0]].bandwidth_Bps == 100e9      # 4 NVLink3 links per pair
    assert t.path_bandwidth(0, 4) == pytest.approx(25e9 * 0.94)   # Slingshot 200G
    assert t.nic_affinity[:4] == ("n0.nic0", "n0.nic0", "n0.nic1", "n0.nic1")


def test_cray_ex254n_four_gh200_all_to_all_nvlink_no_nvswitch_one_nic_per_gpu():
    """CSCS Alps' node: 6 NVLink4 links per GPU pair (150 GB/s per direction), no NVSwitch
    (no NVLS), each GPU's Slingshot NIC behind its own Grace (GPU -C2C-> Grace -PCIe-> NIC)."""
    t = build_topology("cray-ex254n", nodes=2)
    assert t.nranks == 8 and t.gpus_per_node == 4 and not t.in_switch_reduction
    assert {t.rank_device(r).model for r in range(8)} == {"gh200"}
    assert all(len(t.route(a, b)) == 1 for a in range(4) for b in range(4) if a != b)
    assert t.links[t.route(0, 1)[0]].bandwidth_Bps == 150e9
    assert not any(d.kind == "nvswitch" for d in t.devices)
    assert t.nic_affinity[:4] == ("n0.nic0", "n0.nic1", "n0.nic2", "n0.nic3")
    hops = [(t.links[i].src, t.links[i].dst) for i in t.route(0, 4)]
    assert hops[:2] == [("n0.gpu0", "n0.grace0"), ("n0.grace0", "n0.nic0")]
    assert t.path_bandwidth(0, 4) == pytest.approx(25e9 * 0.94)   # Slingshot 200G


def test_docs_example_loads():
    from pathlib import Path
    doc = Path(__file__).resolve().parents[1] / "docs" / "topology-yaml.md"
    text = doc.read_text()
    example = text.split("## Example", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    t = Topology.from_yaml(example)
    assert t.nranks == 2 and t.links[0].bandwidth_Bps == 100e9
    assert kinds_on(t, t.route(0, 1)) == ["gpu"]
    assert t.router.ports()[0] == t.index_of("nic0")


def test_several_nics_per_gpu_are_fused_as_nccl_runs_them():
    """16 x 100G RoCE for 8 GPUs (OCI BM.GPU4.8) or 32 x 100G EFA (AWS p5): NCCL fuses the
    ports next to a GPU into one virtual NIC (aws-ofi-nccl stripes them), so each GPU gets
    M/K times a port, not one port with the others idle."""
    from gpucomm.hardware import get_nic
    from gpucomm.simulate import predict
    t = build_topology("dgx-a100", nodes=2, nic="roce-100g", nics_per_node=16)
    nics = [d for d in t.devices if d.kind == "nic"]
    assert len(nics) == 16 and {d.model for d in nics} == {"roce-100g*2"}  # 8 per node
    fused = get_nic("roce-100g*2")
    assert fused.bandwidth_Bps == 2 * get_nic("roce-100g").bandwidth_Bps and fused.is_nic
    one = build_topology("dgx-a100", nodes=2, nic="roce-200g", nics_per_node=8)
    ring = {n: predict("all_reduce", 8 << 30, topo, algorithm="ring").busbw_GBps
            for n, topo in (("2x100", t), ("1x200", one))}
    assert ring["2x100"] == pytest.approx(ring["1x200"], rel=0.02)
    with pytest.raises(ConfigError, match="N >= 2"):
        get_nic("roce-100g*1")
    with pytest.raises(ConfigError, match="unknown NIC"):
        get_nic("nvlink4*2")
