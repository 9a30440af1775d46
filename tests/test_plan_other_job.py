"""Issue 25, item 5: a second job's placement as other jobs' load. `plan --other-job NODES`
puts a second job on NODES more nodes of the fabric (placed by --placement on the nodes the
job leaves); its groups, shaped like the job's, run the same collective at the same moment,
timed together with the job's groups by the same fabric model, so they slow the job exactly
where they share its cables."""
import pytest

from gpucomm.cli import main
from gpucomm.errors import ConfigError
from gpucomm.topology.fabric import Network
from gpucomm.workloads import steptime
from gpucomm.workloads.layout import Layout
from gpucomm.workloads.steptime import other_job_groups, plan

# llama3-8b on 16 DGX H100: tp 8, pp 2, dp 8 (one GPU per node along a rail); leaves of 4
LAYOUT = Layout(tp=8, pp=2, dp=8, seq=8192, global_batch=64)


def _plan(placement, other=0, routing="ecmp", leaf_ports=4):
    return plan("llama3-8b", "dgx-h100", 16, LAYOUT, "roce-400g", fabric="rail-2tier",
                leaf_ports=leaf_ports, placement=placement, network=Network(routing=routing),
                other_job=other)


def _alone(monkeypatch, placement, other):
    """The job alone on the same (job + other) nodes, the second job idle."""
    with monkeypatch.context() as m:
        m.setattr(steptime, "other_job_groups", lambda *a: [])
        return _plan(placement, other)


def _dp(p):
    return p.comm_time_s["DP"]


def test_a_second_job_on_other_leaves_changes_nothing():
    # packed: the job fills leaves 0-3, the second job leaves 4-7; in a rail-2tier fabric a
    # leaf's uplinks are its own, so no cable is shared
    alone, other = _plan("packed"), _plan("packed", 16)
    assert _dp(other) == pytest.approx(_dp(alone), rel=1e-9)
    assert other.step_time_s == pytest.approx(alone.step_time_s, rel=1e-9)


def test_a_second_job_on_shared_leaves_slows_the_job(monkeypatch):
    # spread: both jobs' nodes on every leaf, their DP rings hashed onto the same uplinks
    for placement in ("spread", "random"):
        alone, other = _alone(monkeypatch, placement, 16), _plan(placement, 16)
        assert _dp(other) > 1.05 * _dp(alone), placement
        assert other.step_time_s > alone.step_time_s
        dp = [c for c in other.comms if c.comm.kind == "DP"]
        assert all(c.together == 16 + 16 for c in dp)  # 16 of the job, 16 of the second


def test_random_placement_meets_the_second_job_where_packed_does_not():
    assert _dp(_plan("random", 16)) > 1.3 * _dp(_plan("packed", 16))


def test_spraying_a_full_bisection_fabric_absorbs_the_second_job(monkeypatch):
    # an even split over every uplink: a leaf's uplinks carry what its NICs send, no more
    alone = _alone(monkeypatch, "spread", 16)
    sprayed = _plan("spread", 16, routing="spray")
    assert _dp(sprayed) < _dp(alone)


def test_other_job_groups_are_shaped_like_the_group_and_disjoint():
    ranks = (0, 8, 16, 24, 32, 40, 48, 56)  # nodes 0..7, GPU 0
    groups = other_job_groups(ranks, 16, 16, 8)
    assert len(groups) == 2 * 8  # 2 blocks of 8 nodes x 8 GPU indices
    every = [r for g in groups for r in g]
    assert len(every) == len(set(every)) and min(every) >= 16 * 8 and max(every) < 32 * 8
    assert all(len({r // 8 for r in g}) == 8 and len({r % 8 for r in g}) == 1 for g in groups)
    assert other_job_groups(tuple(range(8)), 16, 16, 8) == []  # inside a node: no fabric
    assert other_job_groups(ranks, 16, 4, 8) == []  # a second job smaller than the group


def test_other_job_needs_a_fabric_model_and_contention():
    with pytest.raises(ConfigError, match="modelled fabric"):
        plan("llama3-8b", "dgx-h100", 16, LAYOUT, "roce-400g", other_job=16)
    with pytest.raises(ConfigError, match="no-contention"):
        plan("llama3-8b", "dgx-h100", 16, LAYOUT, "roce-400g", fabric="rail-2tier",
             leaf_ports=4, contention=False, other_job=16)
    with pytest.raises(ConfigError, match="node count"):
        _plan("packed", -1)


def test_cli_flag_is_validated(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--model", "llama3-8b", "--nodes", "2", "--other-job", "x"])
    assert "--other-job" in capsys.readouterr().err
    assert main(["plan", "--model", "llama3-8b", "--nodes", "16", "--tp", "8", "--pp", "2",
                 "--seq", "8192", "--global-batch", "64", "--nic", "roce-400g", "--fabric",
                 "rail-2tier", "--leaf-ports", "4", "--placement", "spread", "--other-job",
                 "16", "--format", "json"]) == 0


def _sim(capsys, placement, other=None, *extra):
    argv = ["sim", "--collective", "all_reduce", "--system", "dgx-h100", "--nodes", "4", "--nic",
            "roce-400g", "--fabric", "rail-2tier", "--leaf-ports", "2", "--routing", "ecmp",
            "-b", "256M", "-e", "256M", "--algorithm", "ring", "--placement", placement,
            "--format", "json", *extra] + ([] if other is None else ["--other-job", str(other)])
    assert main(argv) == 0
    import json
    return json.loads(capsys.readouterr().out)


def test_sim_second_job_slows_the_job_only_where_it_shares_leaves(capsys):
    packed = _sim(capsys, "packed", 4)
    assert packed["other_job"] == {"nodes": 4, "groups": 1} and packed["nranks"] == 32
    (row,) = packed["rows"]
    assert row["time_us"] == pytest.approx(row["time_alone_us"], rel=1e-9)  # other leaves
    (row,) = _sim(capsys, "spread", 4)["rows"]
    assert row["time_us"] > 1.2 * row["time_alone_us"]  # both jobs under every leaf
    (row,) = _sim(capsys, "spread", 8)["rows"]  # two groups of the second job, slower alone
    # than the job (they share cables among themselves): only how far the union runs past
    # them is charged to the job (simulate.concurrent.without_second_job)
    assert row["time_us"] >= row["time_alone_us"]


def test_a_slower_second_job_is_not_charged_to_the_job():
    from gpucomm.simulate.concurrent import without_second_job
    assert without_second_job(10.0, 4.0, 8.0) == pytest.approx(5.0)  # union 25% past it
    assert without_second_job(10.0, 4.0, 10.0) == 4.0  # the second job's own pace
    assert without_second_job(10.0, 8.0, 4.0) == 10.0  # the job the slower: the union's end
    assert without_second_job(10.0, None, 4.0) == 10.0


def test_sim_second_job_is_refused_where_it_cannot_be_timed(capsys):
    base = ["sim", "--collective", "all_reduce", "--system", "dgx-h100", "--nodes", "4", "--nic",
            "roce-400g", "--fabric", "rail-2tier", "--leaf-ports", "2", "-b", "256M", "-e",
            "256M", "--placement", "spread"]
    for extra, why in ((["--other-job", "2"], "at least 4 nodes"),
                       (["--other-job", "4", "--seeds", "2"], "--seeds")):
        assert main(base + extra) == 2
        assert why in capsys.readouterr().err
    assert main(["sim", "--system", "dgx-h100", "--nodes", "2", "-b", "1M", "-e", "1M",
                 "--other-job", "2"]) == 2
    assert "modelled fabric" in capsys.readouterr().err


def test_nccls_trees_meet_the_second_job_and_the_jobs_own_groups(monkeypatch):
    # ZeRO 0: the DP gradients are all-reduced by NCCL's tree (a closed form). Its connections
    # meet those of the job's other DP groups and of the second job's on the cables they
    # share (simulate.concurrent.trees_together): timed together, slowed by the second job against
    # the job alone on the same cluster, and no warning
    lay = Layout(tp=8, pp=1, dp=16, seq=8192, global_batch=64, zero=0)

    def run(other):
        return plan("llama3-8b", "dgx-h100", 16, lay, "roce-400g", fabric="rail-2tier",
                    leaf_ports=4, placement="spread", network=Network(routing="ecmp"),
                    other_job=other)
    p = run(16)
    with monkeypatch.context() as m:
        m.setattr(steptime, "other_job_groups", lambda *a: [])
        idle = run(16)
    trees = [c for c in p.comms if c.algorithm in ("tree", "nvls_tree")
             and len({r // 8 for r in c.ranks}) > 1]
    assert trees and all(c.together > 1 for c in trees)
    assert any(c.second_job > 1.0 for c in trees)
    assert _dp(p) > _dp(idle) and p.second_job_by_kind["DP"] > 1.0
    assert not any("--other-job" in w for w in p.warnings)


def test_pfc_pauses_of_the_second_job_hold_a_tree_schedule_back(capsys):
    # NCCL's double binary tree as a schedule is timed side by side with the second job's,
    # step by step; without congestion control (PFC alone, --cc none) a port the two jobs'
    # flows oversubscribe pauses the links before it, and the job's tree edges on those links
    # are held to the hot flows' share (head-of-line victims, simulate/fabric.py pause_caps).
    # With DCQCN there are no pauses; the job alone meets no pause either way.
    rows = {cc: _sim(capsys, "random", 4, "--algorithm", "double_binary_tree", "--cc",
                     cc)["rows"][0] for cc in ("dcqcn", "none")}
    assert rows["none"]["time_alone_us"] == pytest.approx(rows["dcqcn"]["time_alone_us"],
                                                          rel=1e-9)
    assert rows["none"]["time_us"] > rows["dcqcn"]["time_us"] * 1.004


def test_plan_says_how_much_the_second_job_slows_each_kind(monkeypatch, capsys):
    alone, other = _alone(monkeypatch, "spread", 16), _plan("spread", 16)
    ratio = other.second_job_by_kind
    assert ratio["DP"] == pytest.approx(_dp(other) / _dp(alone), rel=1e-9) and ratio["DP"] > 1
    assert "TP" not in ratio  # inside a node: no second job's traffic
    assert _plan("packed", 16).second_job_by_kind == {}  # on its own leaves
    assert other.to_dict()["second_job_slowdown_by_kind"] == ratio
    assert main(["plan", "--model", "llama3-8b", "--nodes", "16", "--tp", "8", "--pp", "2",
                 "--seq", "8192", "--global-batch", "64", "--nic", "roce-400g", "--fabric",
                 "rail-2tier", "--leaf-ports", "4", "--placement", "spread", "--routing",
                 "ecmp", "--other-job", "16"]) == 0
    assert f"DP x{ratio['DP']:.2f}" in capsys.readouterr().out
