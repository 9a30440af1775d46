"""Issue 25, items 1 and 5: a second job (`--other-job`) meets NCCL's default algorithms across
nodes, tree and nvls_tree, on the cables it shares. Both jobs' tree connections (the ones each
opens alone: rails, channels, queue pairs, hash) load the links together, and the job's tree
moves at its slowest edge under that load (simulate.concurrent.trees_together), recorded as a
bound of the job's timed run as the ring's second job is."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gpucomm.collectives import get_collective
from gpucomm.simulate import nccl, nccl_trees, predict
from gpucomm.simulate.core import path_table
from gpucomm.simulate.timed import phases, traced
from gpucomm.topology import build_topology
from gpucomm.topology.fabric import Network
from gpucomm.simulate.concurrent import other_job_groups, time_together, with_second_job

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
GPN = 8
SIZE = 1 << 30


def _cluster(nodes, leaf_ports, placement, routing="ecmp", **net):
    """DGX H100 nodes on a rail fabric whose leaves have exactly one uplink (leaf_ports nodes
    under a leaf, oversubscribed leaf_ports:1): a connection between two leaves has one path,
    whatever the hash, so the load on each cable is a count."""
    return build_topology("dgx-h100", nodes=nodes, nic="roce-400g", fabric="rail-2tier",
                          leaf_ports=leaf_ports, oversubscription=leaf_ports,
                          placement=placement, network=Network(routing=routing, **net))


def _jobs(topo, job_nodes, other_nodes):
    job = list(range(job_nodes * GPN))
    second = [list(g) for g in other_job_groups(tuple(job), job_nodes, other_nodes, GPN)]
    return job, second


def _tree_time(topo, job, algorithm, proto, slowdown):
    """The closed form on the job's placement with its network part slowed by `slowdown`."""
    pl = np.asarray(job, dtype=np.int64)
    fn = nccl.CLOSED[algorithm]
    return fn(get_collective("all_reduce"), SIZE, topo, pl, "float32", proto,
              path_table(topo, pl), "analytic", slowdown=slowdown).time_s


@pytest.mark.parametrize("algorithm", ["tree", "nvls_tree"])
@pytest.mark.parametrize("others", [1, 2])
def test_shared_cables_slow_the_tree_by_the_load_ratio(algorithm, others):
    # spread over 2 leaves per rail: the job's nodes 0 and 1 sit under leaf 0 and leaf 1, and
    # so does every 2-node group of the second job (nodes 2, 3; 4, 5). Each rail's uplink
    # and downlink carry, per direction, the job's tree connections of that rail: tree 2
    # (one per binary tree, NCCL's 16 tree channels over 8 NICs, halved), nvls_tree 16 (8
    # NVLS channels per tree); every group of the second job puts as many on the same
    # cable. So every shared cable carries (1 + others) times the job's own connections,
    # each at that share, while the job's NIC carries only its own: the network part
    # of the job's tree is exactly (1 + others) times slower.
    n = 2 * (1 + others)
    topo = _cluster(n, 1 + others, "spread")
    job, second = _jobs(topo, 2, 2 * others)
    assert len(second) == others
    r = predict("all_reduce", SIZE, topo, ranks=job, algorithm=algorithm, dtype="float32")
    assert r.algorithm == algorithm and r.timed.schedule is None
    pl = np.asarray(job)
    rows = nccl_trees.tree_routes(path_table(topo, pl), pl, nccl.node_groups(topo, pl),
                            algorithm == "nvls_tree")
    table, policy = rows
    cnt = np.bincount(table[table >= 0], minlength=len(policy.between))
    per_cable = 2 if algorithm == "tree" else 16
    assert set(cnt[policy.between & (cnt > 0)].tolist()) == {per_cable}
    assert nccl_trees.tree_fabric_slowdown(path_table(topo, pl), pl, nccl.node_groups(topo, pl),
                                     algorithm == "nvls_tree") == 1.0  # alone: NIC-paced
    assert r.time_s == pytest.approx(_tree_time(topo, job, algorithm, r.protocol, 1.0),
                                     rel=1e-12)
    out = with_second_job(r, topo, job, second)
    want = _tree_time(topo, job, algorithm, r.protocol, 1.0 + others)
    assert out.time_s == pytest.approx(want, rel=1e-12)
    # the 2-node tree's NICs carry the buffer once each way (trees.cc), so with one other
    # group on its cables it still runs at about its own pace (tree/simple at 1 GiB, near NCCL's
    # per-channel cap); two groups bind
    assert out.time_s > (1.0 if (algorithm, others) == ("tree", 1) else 1.2) * r.time_s
    # recorded as a bound of the timed run: the trace and HTML show it as a phase
    (why, t), = out.timed.bounds
    assert t == out.time_s and "second job" in why and algorithm in why
    assert phases(traced(out))[-1][2] == pytest.approx(out.time_s, rel=1e-12)
    assert out.busbw_GBps == pytest.approx(r.busbw_GBps * r.time_s / out.time_s, rel=1e-12)


@pytest.mark.parametrize("algorithm", ["tree", "nvls_tree"])
def test_a_second_job_on_other_leaves_changes_nothing(algorithm):
    # packed, 2 nodes a leaf: the job on leaves 0-1, the second job on leaves 2-3; a leaf's
    # uplinks are its own, so no cable is shared, even with hashing over 2 uplinks
    topo = build_topology("dgx-h100", nodes=8, nic="roce-400g", fabric="rail-2tier",
                          leaf_ports=2, placement="packed", network=Network(routing="ecmp"))
    job, second = _jobs(topo, 4, 4)
    r = predict("all_reduce", SIZE, topo, ranks=job, algorithm=algorithm, dtype="float32")
    assert with_second_job(r, topo, job, second) is r
    assert time_together("all_reduce", SIZE, topo, [job, *second], r) == pytest.approx(
        r.time_s, rel=1e-12)


def test_each_group_alone_is_the_prediction():
    # the trees timed together, one group at a time, are the closed form predict timed
    topo = _cluster(4, 2, "random", qps_per_connection=2, seed=3)
    job, second = _jobs(topo, 2, 2)
    for algorithm in ("tree", "nvls_tree"):
        r = predict("all_reduce", SIZE, topo, ranks=job, algorithm=algorithm, dtype="float32")
        assert time_together("all_reduce", SIZE, topo, [job], r) == pytest.approx(
            r.timed.simulated_s, rel=1e-12)


def test_a_single_node_nvls_meets_no_second_job():
    # nvls inside one node sends nothing over the network: nothing to slow
    topo = _cluster(2, 1, "packed")
    r = predict("all_reduce", SIZE, topo, ranks=list(range(GPN)), algorithm="nvls",
                dtype="float32")
    assert r.algorithm == "nvls"
    assert with_second_job(r, topo, list(range(GPN)), [list(range(GPN, 2 * GPN))]) is r


def _cli(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-m", "gpucomm", *args], capture_output=True, text=True,
                       env=env, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p


SIM = ["sim", "--collective", "all_reduce", "--system", "dgx-h100", "--nodes", "2", "--nic",
       "roce-400g", "--fabric", "rail-2tier", "--leaf-ports", "2", "--oversubscription", "2",
       "--routing", "ecmp", "--placement", "spread", "-b", "1G", "-e", "1G", "-d", "float"]


@pytest.mark.parametrize("algorithm", ["tree", "nvls_tree", "auto"])
def test_cli_sim_times_nccls_trees_with_the_second_job(algorithm, tmp_path):
    # the hand case above through the command line: 2 + 2 nodes spread over 2 leaves, one
    # uplink a leaf, every cable the job's tree crosses shared with the second job: x2
    trace = tmp_path / "t.json"
    doc = json.loads(_cli(*SIM, "--algorithm", algorithm, "--other-job", "2", "--format",
                          "json", "--trace", str(trace)).stdout)
    (row,) = doc["rows"]
    assert doc["other_job"] == {"nodes": 2, "groups": 1}
    name = row["algorithm"].split("/")[0]
    assert name in ("tree", "nvls_tree")
    topo = _cluster(4, 2, "spread")
    job = list(range(2 * GPN))
    alone = _tree_time(topo, job, name, row["protocol"], 1.0)
    assert row["time_alone_us"] == pytest.approx(alone * 1e6, abs=2e-3)
    assert row["time_us"] == pytest.approx(
        _tree_time(topo, job, name, row["protocol"], 2.0) * 1e6, abs=2e-3)
    # the trace's last phase is the second job's bound, ending at the printed time
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    ends = [e["ts"] + e.get("dur", 0) for e in events if "second job" in str(e.get("name"))]
    assert ends and max(ends) == pytest.approx(row["time_us"], rel=1e-6)
    text = _cli(*SIM, "--algorithm", algorithm, "--other-job", "2").stdout
    assert "with the second job" in text and "(+" in text
    # every view's heading says the cluster holds two jobs, not only the 4-node cluster's name
    beside = "the job's 16 ranks beside a second job on 2 nodes"
    assert beside in text.splitlines()[0]
    html = tmp_path / "r.html"
    _cli(*SIM, "--algorithm", algorithm, "--other-job", "2", "--html", str(html))
    assert beside.replace("'", "&#x27;") in html.read_text()
    assert beside not in _cli(*SIM, "--algorithm", algorithm).stdout


def test_cli_plan_times_nccls_trees_with_the_second_job():
    # ZeRO 0: DP gradients are all-reduced across 16 nodes by NCCL's default (a tree closed
    # form); spread puts the second job under the same leaves
    base = ["plan", "--model", "llama3-8b", "--nodes", "16", "--tp", "8", "--pp", "1", "--seq",
            "8192", "--global-batch", "64", "--zero", "0", "--nic", "roce-400g", "--fabric",
            "rail-2tier", "--leaf-ports", "4", "--placement", "spread", "--routing", "ecmp",
            "--collectives", "--format", "json"]
    alone = json.loads(_cli(*base).stdout)
    other = json.loads(_cli(*base, "--other-job", "16").stdout)
    assert not any("--other-job" in w for w in other.get("warnings", []))

    def dp(doc):
        return [c for c in doc["collectives"] if c["kind"] == "DP"
                and c["algorithm"] in ("tree", "nvls_tree")]
    trees = dp(other)
    assert trees and all(c["groups_together"] > 1 for c in trees)
    assert any(c["second_job_slowdown"] > 1.0 for c in trees)
    assert other["second_job_slowdown_by_kind"]["DP"] > 1.0
    assert sum(c["total_s"] for c in trees) > sum(c["total_s"] for c in dp(alone))


def test_pfc_pauses_of_the_second_job_hold_the_job_s_tree_back():
    # without congestion control (PFC alone) senders send at line rate until paused: where
    # the second job's two trees hash into an incast on a spine-to-leaf port, the links before
    # it pause, and the job's nvls_tree connections on those links are held to the hot
    # port's share (head-of-line victims, FabricPolicy.pause_caps), below their own pace.
    # With DCQCN nothing pauses; the job alone never holds itself back (its own hot ports
    # are on its own links)
    out = {}
    for cc in ("dcqcn", "none"):
        topo = build_topology("dgx-h100", nodes=12, nic="roce-400g", fabric="rail-2tier",
                              leaf_ports=2, placement="random",
                              network=Network(routing="ecmp", seed=4, cc=cc, lossless=True))
        job, second = _jobs(topo, 4, 8)
        r = predict("all_reduce", SIZE, topo, ranks=job, algorithm="nvls_tree",
                    dtype="float32")
        out[cc] = (r.time_s, with_second_job(r, topo, job, second).time_s)
    assert out["none"][0] == out["dcqcn"][0]
    assert out["dcqcn"][1] > out["dcqcn"][0]
    assert out["none"][1] > 1.05 * out["dcqcn"][1]
