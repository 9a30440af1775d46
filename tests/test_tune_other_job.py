"""Issue 25: `gpucomm tune --other-job NODES` writes the tuner file for a fabric a second job
shares. Each rule holds the (algorithm, protocol) pair fastest with the second job beside the
communicator, each pair timed as `gpucomm sim --other-job` times it (the same prediction,
slowed by simulate.concurrent.with_second_job): where the second job changes which pair is
fastest, the rule changes with it.

The cluster is fabjob8's hand case (tests/test_trees_other_job.py): DGX H100 nodes on a rail
fabric whose leaves have one uplink, spread placement, so the job's tree connections and the
second job's share every cable the job crosses. Alone (on the same 4-node cluster) nvls_tree
wins at 4 MiB, by a hair; with the second job its network part, NIC-bound, slows it, while
the 2-node tree with LL128 (each node's NICs carry the buffer once each way, trees.cc) is
held by NCCL's per-channel LL128 cap over its search's channels, not by the cables, and wins."""
import json

import pytest

from gpucomm.cli import main
from gpucomm.errors import ConfigError
from gpucomm.interop.tuner import MAX_LINE_BYTES, TuneRequest, parse_csv, tune
from gpucomm.simulate import predict
from gpucomm.simulate.concurrent import fastest_beside, other_job_groups, with_second_job
from gpucomm.simulate.sweep import predict_sizes
from gpucomm.topology import build_topology
from gpucomm.topology.fabric import Network

GPN = 8
FABRIC = ["--system", "dgx-h100", "--nic", "roce-400g", "--fabric", "rail-2tier",
          "--leaf-ports", "2", "--oversubscription", "2", "--routing", "ecmp", "--placement",
          "spread"]
PAIRS = [("tree", "ll"), ("tree", "ll128"), ("tree", "simple"), ("nvls_tree", "simple"),
         ("ring", "ll"), ("ring", "ll128"), ("ring", "simple")]
SIZES = [64, 64 << 10, 1 << 20, 2 << 20, 3 << 20, 8 << 20, 1 << 30]


@pytest.fixture(scope="module")
def shared():
    """The 2-node job and a second 2-node job beside it on the 4-node hand cluster."""
    topo = build_topology("dgx-h100", nodes=4, nic="roce-400g", fabric="rail-2tier",
                          leaf_ports=2, oversubscription=2, placement="spread",
                          network=Network(routing="ecmp"))
    job = list(range(2 * GPN))
    second = [list(g) for g in other_job_groups(tuple(job), 2, 2, GPN)]
    assert len(second) == 1
    return topo, job, second


def _beside(topo, job, second, size, algorithm, protocol):
    """What `gpucomm sim --other-job 2 --algorithm A --protocol P` times (cmd_sim's path)."""
    (alone,) = predict_sizes("all_reduce", [size], topo, ranks=job, algorithm=algorithm,
                             protocol=protocol, dtype="float32")
    return alone, with_second_job(alone, topo, job, second)


def _rule_at(rules, size):
    (r,) = [r for r in rules if r["min_bytes"] <= size <= r["max_bytes"]]
    return r["algorithm"], r["protocol"]


@pytest.fixture(scope="module")
def rules(shared):
    topo = shared[0]
    return tune(TuneRequest(topology=topo, collectives=("all_reduce",), other_job=2,
                            sub_communicators=False, max_bytes=1 << 30))


def test_each_rule_is_the_pair_fastest_with_the_second_job(shared, rules):
    topo, job, second = shared
    assert {(r["nNodes"], r["nRanks"]) for r in rules} == {(2, 16)}  # the job, not the cluster
    for size in SIZES:
        timed = {}
        for algorithm, protocol in PAIRS:
            alone, together = _beside(topo, job, second, size, algorithm, protocol)
            assert together.time_s >= alone.time_s
            timed[(algorithm, protocol)] = together.time_s
        best = min(timed, key=timed.__getitem__)
        assert _rule_at(rules, size) == best, (size, timed)
        # the chosen prediction is sim's object: the same time to the float, slower than alone
        got = fastest_beside("all_reduce", size, topo, job, second, dtype="float32")
        assert (got.algorithm, got.protocol) == best and got.time_s == timed[best]


def test_the_second_job_changes_the_choice(shared, rules):
    topo, job, second = shared
    size = 4 << 20
    alone = predict("all_reduce", size, topo, ranks=job, dtype="float32")
    assert (alone.algorithm, alone.protocol) == ("nvls_tree", "simple")
    assert _rule_at(rules, size) == ("tree", "ll128")
    tree = _beside(topo, job, second, size, "tree", "ll128")
    nvls_tree = _beside(topo, job, second, size, "nvls_tree", "simple")
    assert nvls_tree[0].time_s < tree[0].time_s  # alone nvls_tree is faster
    assert tree[1].time_s < nvls_tree[1].time_s  # beside the second job the tree is
    assert nvls_tree[1].time_s / nvls_tree[0].time_s > 1.01  # its network part is shared
    assert tree[1].time_s == tree[0].time_s  # the tree's LL128 cap, not the cables, holds it


def test_cli_tune_rules_match_cli_sim_times(capsys):
    assert main(["tune", *FABRIC, "--nodes", "2", "--collective", "all_reduce",
                 "--no-sub-communicators", "-e", "64M", "--other-job", "2", "--format",
                 "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["other_job"] == {"nodes": 2} and (doc["nodes"], doc["nranks"]) == (2, 16)
    size = 2 << 20
    times = {}
    for algorithm, protocol in [("tree", "ll128"), ("nvls_tree", "simple")]:
        assert main(["sim", *FABRIC, "--nodes", "2", "--collective", "all_reduce", "-b", "2M",
                     "-e", "2M", "-d", "float", "--algorithm", algorithm, "--protocol",
                     protocol, "--other-job", "2", "--format", "json"]) == 0
        (row,) = json.loads(capsys.readouterr().out)["rows"]
        assert row["time_us"] >= row["time_alone_us"]  # tree/LL128: held by its cap alone
        times[(algorithm, protocol)] = (row["time_us"], row["time_alone_us"])
    assert times[("nvls_tree", "simple")][0] > times[("nvls_tree", "simple")][1]
    times = {pair: t[0] for pair, t in times.items()}
    assert _rule_at(doc["rules"], size) == min(times, key=times.__getitem__)
    assert main(["tune", *FABRIC, "--nodes", "2", "--collective", "all_reduce",
                 "--no-sub-communicators", "-e", "64M", "--other-job", "2"]) == 0
    csv = capsys.readouterr().out
    assert "a second job on 2 more nodes" in csv
    assert parse_csv(csv) == doc["rules"]  # the file NCCL's plugin reads: the same rules
    assert max(map(len, csv.splitlines())) <= MAX_LINE_BYTES


def test_communicators_inside_one_node_meet_no_second_job(shared):
    topo = shared[0]
    kw = {"topology": topo, "collectives": ("all_reduce",), "max_bytes": 64 << 20}
    one_node = [r for r in tune(TuneRequest(**kw, other_job=2)) if r["nNodes"] == 1]
    assert one_node and one_node == [r for r in tune(TuneRequest(**kw)) if r["nNodes"] == 1]


@pytest.mark.parametrize("argv, message", [
    (["--system", "dgx-h100", "--nodes", "2", "--other-job", "2"],
     "--other-job needs a modelled fabric"),
    ([*FABRIC, "--nodes", "2", "--other-job", "1"], "needs --nodes >= 2 and at least 2 nodes"),
    ([*FABRIC, "--nodes", "1", "--other-job", "2"], "needs --nodes >= 2"),
    ([*FABRIC, "--nodes", "2", "--other-job", "0"], "argument --other-job: 0 must be >= 1"),
])
def test_tune_refuses_as_sim_does_in_one_line(capsys, argv, message):
    errors = []
    for command in ("tune", "sim"):
        try:
            rc = main([command, *argv, "--collective", "all_reduce"])
        except SystemExit as e:  # argparse's refusal of the option's value
            rc = e.code
        assert rc == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
        errors.append(err.split(":", 1)[1].replace(f"gpucomm {command} --help", "--help"))
    assert errors[0] == errors[1]  # one message, whichever command


def test_the_library_refuses_a_second_job_on_every_node(shared):
    with pytest.raises(ConfigError, match="leave the job at least one"):
        tune(TuneRequest(topology=shared[0], other_job=4))
