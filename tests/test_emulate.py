"""The network-namespace harness: set-up and clean-up, measurement, topology, a 2x2 run, faults.

Needs root, `ip` and `tc`; skips with the reason elsewhere. One emulated cluster (2 hosts x 2
ranks, 1 Gbit/s) serves the whole module.
"""
import json
import os
import subprocess
import sys
import time

import pytest

from gpucomm.emulate import ClusterSpec, EmulatedCluster, available, emulated_topology_dict
from gpucomm.emulate import netns
from gpucomm.emulate.cluster import Measured
from gpucomm.errors import ConfigError

OK, WHY = available()
needs_netns = pytest.mark.skipif(not OK, reason=WHY or "network namespaces available")
RATE = 1e9


def _torch_missing():
    try:
        import torch.distributed  # noqa: F401
    except ImportError as e:
        return f"torch is not installed ({e})"
    return ""


@pytest.fixture(scope="module")
def cluster():
    if not OK:
        pytest.skip(WHY)
    with EmulatedCluster(ClusterSpec(hosts=2, ranks_per_host=2, rate_bps=RATE)) as c:
        yield c


def _lines(results, tag):
    out = []
    for _, stdout, _ in results:
        for line in stdout.splitlines():
            if line.startswith(tag + " "):
                out.append(json.loads(line[len(tag) + 1:]))
    return out


def test_spec_is_validated():
    with pytest.raises(ConfigError, match="hosts"):
        ClusterSpec(hosts=1)
    with pytest.raises(ConfigError, match="tbf, htb"):
        ClusterSpec(qdisc="netem")
    with pytest.raises(ConfigError, match="bridge=False"):
        ClusterSpec(hosts=3, bridge=False)


def test_topology_from_measurements_routes_over_the_shaped_link():
    spec = ClusterSpec(hosts=2, ranks_per_host=2, rate_bps=RATE)
    m = Measured(40e-6, 119e6, 10e-6, 2e9)
    from gpucomm.topology import Topology
    topo = Topology.from_dict(emulated_topology_dict(spec, m))
    assert topo.nranks == 4 and topo.nodes == 2 and topo.gpus_per_node == 2
    assert topo.path_bandwidth(0, 2) == pytest.approx(119e6)  # nominal 125e6 x efficiency
    assert topo.path_bandwidth(0, 1) == pytest.approx(2e9)
    assert topo.path_latency(0, 2) == pytest.approx(40e-6)  # the measured one-way latency
    assert topo.path_latency(0, 1) == pytest.approx(10e-6)


@needs_netns
def test_namespaces_are_removed_even_when_the_body_fails():
    c = EmulatedCluster(ClusterSpec(bridge=False, qdisc="htb"))
    with pytest.raises(RuntimeError, match="boom"):
        with c:
            assert set(c.hosts) <= set(netns.list_ns())
            assert "htb" in c.qdiscs[(c.hosts[0], "eth0")]
            raise RuntimeError("boom")
    assert not set(c.hosts) & set(netns.list_ns())


@needs_netns
def test_sweep_removes_leftovers_of_dead_runs():
    dead = 2 ** 22 + 12345  # above the default pid_max: no process has this id
    name = f"{netns.PREFIX}{dead}-h0"
    netns.add_ns(name)
    assert name in netns.list_ns()
    assert name in netns.sweep()
    assert name not in netns.list_ns()


@needs_netns
def test_measured_link_matches_the_shaping(cluster, tmp_path):
    m = cluster.measure(nbytes=8 << 20, pings=200)
    # The shaped rate is the bottleneck: never above it (TCP carries at most 1448/1514 of it),
    # and far above what a loaded 2-core machine could make of an unshaped veth's share. The
    # lower bound is loose on purpose: CPU load from other work must not fail this test.
    assert 0.5 * RATE / 8 < m.inter_bandwidth_Bps <= 1.01 * RATE / 8
    assert m.intra_bandwidth_Bps > 3 * m.inter_bandwidth_Bps  # loopback is not shaped
    assert 0 < m.intra_latency_s < 5e-3 and 0 < m.inter_latency_s < 5e-3
    text = cluster.write_topology(tmp_path / "emu.yaml", m)
    from gpucomm.topology import Topology
    topo = Topology.load(tmp_path / "emu.yaml")
    assert topo.path_bandwidth(1, 3) == pytest.approx(m.inter_bandwidth_Bps)
    assert "tbf" in text and "rate 1Gbit" in text


def _fault_run(cluster, tmp_path, port, victim, cut, timeout, check=False):
    """Launch the 4 ranks in `fault` mode; cut a link once all are up. (FAULT lines, CHECK
    lines, seconds from the cut or the death to the end of the last rank)."""
    ready = tmp_path / f"ready{port}"
    ready.mkdir()
    procs = cluster.launch([sys.executable, "-m", "gpucomm.emulate.worker", "fault",
                            "--victim", str(victim), "--ready", str(ready), "--timeout",
                            str(timeout), "--duration", "60"] + (["--check"] if check else []),
                           port=port, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    deadline = time.monotonic() + 60
    while len(os.listdir(ready)) < 4:
        assert time.monotonic() < deadline and all(p.poll() in (None, 0) for p in procs), \
            "ranks did not come up"
        time.sleep(0.05)
    t0 = time.monotonic()
    if cut is not None:
        cluster.cut(cut)
    try:
        results = cluster.wait(procs, timeout=timeout + 30)
    finally:
        if cut is not None:
            cluster.restore(cut)
    return _lines(results, "FAULT"), _lines(results, "CHECK"), time.monotonic() - t0


DEAD_TIMEOUT = 3.0


@pytest.fixture(scope="module")
def dead_rank_run(cluster, tmp_path_factory):
    """One launch: every all-reduce algorithm checked across the hosts, then rank 3 dies."""
    if _torch_missing():
        pytest.skip(_torch_missing())
    return _fault_run(cluster, tmp_path_factory.mktemp("dead"), 29610, victim=3, cut=None,
                      timeout=DEAD_TIMEOUT, check=True)


@needs_netns
def test_all_reduce_across_emulated_hosts_is_correct(dead_rank_run):
    _, checks, _ = dead_rank_run
    assert len(checks) == 4, checks
    assert all(c["failures"] == 0 and c["cases"] >= 8 for c in checks), checks
    assert "hierarchical" in checks[0]["algorithms"]


@needs_netns
def test_dead_rank_fails_the_others_naming_it(dead_rank_run):
    faults, _, elapsed = dead_rank_run
    timeout = DEAD_TIMEOUT
    assert sorted(f["rank"] for f in faults) == [0, 1, 2], faults
    assert elapsed < timeout + 10
    for f in faults:
        assert f["failed"] and f["error"] in ("TransportError", "CommTimeout"), f
        assert "rank 3" in f["message"], f


@needs_netns
def test_cut_link_fails_every_rank_within_the_timeout(cluster, tmp_path):
    if _torch_missing():
        pytest.skip(_torch_missing())
    timeout = 2.0
    faults, _, elapsed = _fault_run(cluster, tmp_path, 29620, victim=-1, cut=1,
                                    timeout=timeout)
    print("\n".join(f["message"] for f in faults))
    assert sorted(f["rank"] for f in faults) == [0, 1, 2, 3], faults
    assert elapsed < timeout + 10
    for f in faults:
        assert f["failed"] and f["error"] in ("TransportError", "CommTimeout"), f
    # ranks whose ring neighbour sits across the cut name a rank on the other host
    across = {0: ("rank 3",), 2: ("rank 1",)}
    for f in faults:
        if f["rank"] in across:
            assert any(r in f["message"] for r in across[f["rank"]]), f


def test_sim_groups_hierarchical_by_the_emulated_hosts(tmp_path):
    """predict(algorithm="hierarchical") takes the topology's ranks per host as group_size
    (the builder's own default would make 2 hosts x 2 ranks one group, a ring), and
    `gpucomm sim --param group_size=4` overrides it."""
    from gpucomm.simulate import predict, simulate
    from gpucomm.algorithms import build
    from gpucomm.topology import Topology
    spec = ClusterSpec(hosts=2, ranks_per_host=2)
    d = emulated_topology_dict(spec, Measured(150e-6, 119e6, 100e-6, 0.5e9))
    path = tmp_path / "emulated.yaml"
    import yaml
    path.write_text(yaml.safe_dump(d))
    topo = Topology.load(str(path))
    size = 4 << 20
    got = predict("all_reduce", size, topo, algorithm="hierarchical", protocol="simple").time_s
    by_host = simulate(build("all_reduce", "hierarchical", 4, group_size=2), topo, size,
                       protocol="simple").time_s
    one_group = simulate(build("all_reduce", "hierarchical", 4, group_size=4), topo, size,
                         protocol="simple").time_s
    assert got == pytest.approx(by_host) and got < 0.95 * one_group
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))

    def sim(*extra):
        p = subprocess.run([sys.executable, "-m", "gpucomm", "sim", "--topology", str(path),
                            "--algorithm", "hierarchical", "--protocol", "simple", "-b", "4M",
                            "-e", "4M", "--format", "json", *extra], capture_output=True,
                           text=True, env=env, timeout=60)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["rows"][0]["time_us"]
    assert sim() == pytest.approx(got * 1e6, rel=1e-6)
    assert sim("--param", "group_size=4") == pytest.approx(one_group * 1e6, rel=1e-6)
    bad = subprocess.run([sys.executable, "-m", "gpucomm", "sim", "--topology", str(path),
                          "--algorithm", "ring", "--param", "group_size=2", "-e", "8"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "no parameter 'group_size'" in bad.stderr
