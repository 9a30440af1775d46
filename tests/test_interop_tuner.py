"""`gpucomm tune`: NCCL's example tuner CSV, read back: contiguous ranges, NCCL's names."""
import errno
import os

import pytest

from gpucomm.cli import main
from gpucomm.errors import ConfigError
from gpucomm.interop.tuner import (MAX_BYTES, NCCL_ALGORITHMS, NCCL_COLLECTIVES, NCCL_PROTOCOLS,
                                   parse_csv, to_csv)


@pytest.mark.parametrize("argv,nodes,nranks", [
    (["--system", "dgx-h100", "--nodes", "2"], 2, 16),
    (["--system", "dgx-a100", "--gpus-per-node", "4"], 1, 4),
])
def test_tuner_file_parses_back_contiguous_with_nccl_names(tmp_path, capsys, argv, nodes, nranks):
    out = tmp_path / "nccl_tuner.conf"
    assert main(["tune", *argv, "-e", "1G", "--output", str(out)]) == 0
    rules = parse_csv(out.read_text())
    by_shape = {}
    for r in rules:
        by_shape.setdefault((r["nNodes"], r["nRanks"], r["collective"]), []).append(r)
        assert r["algorithm"] in NCCL_ALGORITHMS and r["protocol"] in NCCL_PROTOCOLS
        assert r["channels"] >= 1  # explicit: the plugin turns -1 into 1 channel
    assert {c for n, p, c in by_shape if (n, p) == (nodes, nranks)} == \
        set(NCCL_COLLECTIVES.values())
    # the communicators a job splits the cluster into: 2..all GPUs of one node, and across
    # nodes 1..all GPUs of each
    assert {(n, p) for n, p, _ in by_shape} >= {(1, 2), (1, 4), (nodes, nranks)}
    if nodes > 1:
        assert (2, 2) in {(n, p) for n, p, _ in by_shape}  # one GPU per node (a DP group)
    for key, rs in by_shape.items():
        assert rs[0]["min_bytes"] == 0 and rs[-1]["max_bytes"] == MAX_BYTES
        for a, b in zip(rs, rs[1:]):
            assert b["min_bytes"] == a["max_bytes"] + 1, key
            assert (a["algorithm"], a["protocol"], a["channels"]) != \
                (b["algorithm"], b["protocol"], b["channels"])
    if nodes > 1:
        full = [r for r in rules if r["nNodes"] == nodes]
        assert "nvls" not in {r["algorithm"] for r in full}  # multi-node NVLS is NVLS_TREE


def test_tuner_channels_are_what_sim_reports(capsys):
    """Issue 24: on dgx-h100 x 2 the file said 1 channel for an all-reduce that `sim` runs on
    16; each rule's channels now equal sim's at the sizes the rule covers."""
    import json
    import re
    assert main(["tune", "--system", "dgx-h100", "--nodes", "2", "--collective", "all_reduce",
                 "--collective", "all_gather", "-e", "256M", "--no-sub-communicators",
                 "--format", "json"]) == 0
    rules = json.loads(capsys.readouterr().out)["rules"]
    names = {"allreduce": "all_reduce", "allgather": "all_gather"}
    rows = []
    for coll in names:  # probe sizes (powers of 2) and sizes between them (3 x 2^k)
        for first in ("1K", "3K"):
            assert main(["sim", "--collective", names[coll], "--system", "dgx-h100", "--nodes",
                         "2", "-b", first, "-e", "256M", "-f", "4", "--format", "json"]) == 0
            rows += [(coll, row) for row in json.loads(capsys.readouterr().out)["rows"]]
    for coll, row in rows:
        rule = next(r for r in rules if r["collective"] == coll and
                    r["min_bytes"] <= row["size"] <= r["max_bytes"])
        ch = int(re.search(r"(\d+)ch", row["reason"]).group(1))
        assert (rule["algorithm"], rule["protocol"], rule["channels"]) == \
            (row["algorithm"], row["protocol"], ch), row["size"]


def test_rule_boundaries_are_where_the_choice_switches_to_the_element():
    """Bisection between the power-of-two probes: the last size of a rule (one float per
    rank below the next rule's first) still gets the rule's choice, the next rule's first
    size the next choice."""
    from gpucomm.interop.tuner import TuneRequest, tune
    from gpucomm.simulate import predict
    from gpucomm.topology import build_topology
    topo = build_topology("dgx-h100", nodes=2)
    for coll, unit in (("all_reduce", 4), ("all_gather", 4 * 16)):
        rules = tune(TuneRequest(topology=topo, collectives=(coll,), sub_communicators=False,
                                 max_bytes=1 << 28))
        assert len(rules) >= 2
        for a, b in zip(rules, rules[1:]):
            assert b["min_bytes"] % unit == 0 and a["max_bytes"] == b["min_bytes"] - 1
            for size, rule in ((b["min_bytes"] - unit, a), (b["min_bytes"], b)):
                res = predict(coll, size, topo)
                assert (res.algorithm, res.protocol, res.timed.channels) == \
                    (rule["algorithm"], rule["protocol"], rule["channels"]), (coll, size)


def test_a_name_cannot_inject_a_rule_and_every_line_fits_the_plugin_buffer():
    rules = [{"collective": "allreduce", "min_bytes": 0, "max_bytes": MAX_BYTES,
              "algorithm": "ring", "protocol": "simple", "channels": 4, "nNodes": 1,
              "nRanks": 8, "numPipeOps": -1, "regBuff": -1}]
    evil = ("box,0,9,tree,ll,1,1,8\nallreduce,0,99,tree,ll,1,1,8\r\x00" + "é,x" * 400)
    text = to_csv(rules, f"rules for {evil}")
    lines = text.splitlines()
    assert all(len(line.encode()) + 1 < 256 for line in lines)  # fgets(line, 256): whole
    data = [line for line in lines if not line.startswith("#")]
    assert data == ["allreduce,0,9223372036854775807,ring,simple,4,1,8,-1,-1"]
    assert all("," not in line for line in lines if line.startswith("#"))
    assert len(parse_csv(text)) == 1


def test_json_and_one_collective(capsys):
    import json
    assert main(["tune", "--system", "dgx-h100", "--collective", "all_reduce", "-e", "64M",
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["collective"] for r in doc["rules"]} == {"allreduce"} and doc["nranks"] == 8


@pytest.mark.parametrize("line,needle", [
    ("allreduce,0,10,ring,ll,-1,1,8", None),
    ("allreduce,0,10,warp,ll,-1,1,8,-1,-1", "algorithm 'warp'"),
    ("alltoall,0,10,ring,ll,-1,1,8,-1,-1", "collective 'alltoall'"),
    ("allreduce,0,10,ring,ll256,-1,1,8,-1,-1", "protocol 'll256'"),
    ("allreduce,10,0,ring,ll,-1,1,8,-1,-1", "min_bytes 10 > max_bytes 0"),
    ("allreduce,0,x,ring,ll,-1,1,8,-1,-1", "not an integer"),
])
def test_parse_csv_names_the_problem(line, needle):
    if needle is None:
        assert parse_csv(line)[0]["regBuff"] == -1
        return
    with pytest.raises(ConfigError, match=needle):
        parse_csv(line)


def test_tune_refuses_a_collective_nccl_cannot_tune(capsys):
    assert main(["tune", "--system", "dgx-h100", "--collective", "all_to_all"]) == 2
    assert "allowed are" in capsys.readouterr().err


def test_tune_drops_each_placements_simulator_state_before_the_next():
    # each sub-communicator is a placement of its own; what the simulator kept for them all
    # (a path table each) held 15 GB on 2,048 nodes, and 16,384 nodes ran out of memory
    from gpucomm.interop.tuner import TuneRequest, tune
    from gpucomm.simulate.caches import topology_memo
    from gpucomm.topology import build_topology
    topo = build_topology(system="dgx-h100", nodes=4)
    rules = tune(TuneRequest(topology=topo, collectives=("all_reduce",), min_bytes=1,
                             max_bytes=1 << 20, dtype="float32", model="analytic",
                             sub_communicators=True))
    assert {r["nRanks"] for r in rules} >= {2, 8, 32}
    assert not topology_memo(topo).paths


def test_tune_output_is_checked_before_the_work_and_not_ignored_with_json(tmp_path, capsys):
    # --output to a missing folder or a folder failed only after the rules were computed
    # (seconds; minutes on a large cluster); with --format json it was ignored unsaid
    for out, says in ((tmp_path / "no" / "x.conf", "--output: cannot write"),
                      (tmp_path, "is a directory: give a file name in it")):
        assert main(["tune", "--nodes", "2048", "--output", str(out)]) == 2
        assert says in capsys.readouterr().err
    assert main(["tune", "--output", str(tmp_path / "x.conf"), "--format", "json"]) == 2
    assert "give one of them" in capsys.readouterr().err
    assert not (tmp_path / "x.conf").exists()


def test_tune_output_is_the_rules_it_prints_written_all_at_once(tmp_path, capsys, monkeypatch):
    # --output was written with a plain open('w'): a write that failed part-way (a full disk)
    # left half a rules file where the old one was
    argv = ["tune", "--system", "dgx-a100", "--gpus-per-node", "4", "--collective", "all_reduce"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    out = tmp_path / "nccl_tuner.conf"
    out.write_text("the old rules\n")
    assert main([*argv, "--output", str(out)]) == 0
    assert out.read_text() == printed and os.listdir(tmp_path) == ["nccl_tuner.conf"]
    out.write_text("the old rules\n")

    def full_disk(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "replace", full_disk)
    assert main([*argv, "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {str(out)!r}: No space left on device" in err
    assert out.read_text() == "the old rules\n" and os.listdir(tmp_path) == ["nccl_tuner.conf"]
