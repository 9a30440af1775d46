"""Issue 25, item 5: the planner times each group on the cluster's real leaf layout, with the
other groups of the job that run at the same moment, so routing, queue pairs, placement and
other jobs' load move its answer the way the fabric literature says they should."""
import pytest

from gpucomm.topology.fabric import Network
from gpucomm.workloads.layout import Layout
from gpucomm.workloads.steptime import Cluster, Timer, job_peers, make_cluster, plan

# llama3-8b on 16 DGX H100: tp 8 (in a node), pp 2, dp 8 (one GPU per node along a rail);
# leaves of 4 nodes, so a DP group spans leaves under any placement
LAYOUT = Layout(tp=8, pp=2, dp=8, seq=8192, global_batch=64)


def _plan(placement="random", leaf_ports=4, **net):
    return plan("llama3-8b", "dgx-h100", 16, LAYOUT, "roce-400g", fabric="rail-2tier",
                leaf_ports=leaf_ports, placement=placement, network=Network(**net))


@pytest.fixture(scope="module")
def plans():
    cases = {"ecmp": {}, "ecmp4": dict(qps_per_connection=4), "spray": dict(routing="spray"),
             "adaptive": dict(routing="adaptive"), "background": dict(background=0.3)}
    out = {k: _plan(**{"routing": "ecmp", **kw}) for k, kw in cases.items()}
    out["packed"] = _plan("packed", routing="ecmp")
    return out


def _dp(p):
    return p.comm_time_s["DP"]


def test_ecmp_with_one_qp_is_slower_than_spraying_and_adaptive_routing(plans):
    assert _dp(plans["ecmp"]) > 1.3 * _dp(plans["spray"])
    # per-packet adaptive routing loses what head-of-line blocking costs (the cell model,
    # simulate/fabric_ar.ar_share), far less than hashing does
    assert _dp(plans["spray"]) < _dp(plans["adaptive"]) < _dp(plans["ecmp"])
    assert plans["ecmp"].step_time_s > plans["spray"].step_time_s


def test_more_queue_pairs_help_ecmp(plans):
    assert _dp(plans["spray"]) <= _dp(plans["ecmp4"]) < _dp(plans["ecmp"])


def test_random_placement_is_slower_than_packed_under_ecmp(plans):
    assert _dp(plans["ecmp"]) > 1.3 * _dp(plans["packed"])
    assert plans["ecmp"].step_time_s > plans["packed"].step_time_s


def test_other_jobs_load_slows_the_step(plans):
    assert _dp(plans["background"]) > _dp(plans["ecmp"])
    assert plans["background"].step_time_s > plans["ecmp"].step_time_s


def test_groups_run_with_every_group_of_their_kind_in_the_job(plans):
    # the 16 DP groups (2 stages x 8 rails) reduce together on the real leaves, and the
    # pipeline's sends cross the spines hashed with the other sends of their boundary (on
    # k-node copies of the fabric only the groups on the same nodes met, and the sends
    # never collided)
    dp = [c for c in plans["ecmp"].comms if c.comm.kind == "DP"]
    assert dp and all(c.together == 16 for c in dp)
    pp = plans["ecmp"].comm_time_s["PP"]
    assert pp > 1.3 * plans["spray"].comm_time_s["PP"]


def test_a_group_under_one_leaf_is_not_hashed():
    # leaves of 8 nodes, packed: the 8-node DP group never leaves its leaf
    ecmp = _plan("packed", leaf_ports=8, routing="ecmp")
    spray = _plan("packed", leaf_ports=8, routing="spray")
    assert _dp(ecmp) == pytest.approx(_dp(spray), rel=1e-6)


def test_job_peers_are_disjoint_and_leave_their_nodes():
    from gpucomm.workloads.layout import validate
    from gpucomm.workloads.models import get_model
    lay = validate(get_model("llama3-8b"), LAYOUT, 128)
    for kind, n in (("dp_cp", 15), ("pp", 63), ("tp", 0)):  # pp: all of stage 0 sends
        ranks = (0, 8, 16, 24, 32, 40, 48, 56) if kind == "dp_cp" else \
            (0, 64) if kind == "pp" else tuple(range(8))
        peers = job_peers(lay, kind, ranks, 8)
        assert len(peers) == n
        every = [r for g in (ranks, *peers) for r in g]
        assert len(every) == len(set(every))


def test_the_timer_uses_the_whole_cluster_only_where_the_fabric_is_modelled():
    plain = Timer(make_cluster("dgx-h100", 16, "roce-400g"))
    leafy = Timer(make_cluster("dgx-h100", 16, "roce-400g", fabric="rail-2tier",
                               leaf_ports=4, placement="random", network=Network()))
    assert isinstance(leafy.cluster, Cluster) and not plain.whole and leafy.whole
    topo, groups = leafy.place([(0, 8)])
    assert topo.nodes == 16 and groups == [[0, 8]]
    topo, groups = plain.place([(8, 16)])
    assert topo.nodes == 2 and groups == [[0, 8]]
