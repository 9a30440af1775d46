"""`gpucomm tune`: NCCL's example tuner CSV, read back: contiguous ranges, NCCL's names."""
import pytest

from gpucomm.cli import main
from gpucomm.errors import ConfigError
from gpucomm.interop.tuner import (MAX_BYTES, NCCL_ALGORITHMS, NCCL_COLLECTIVES, NCCL_PROTOCOLS,
                                   parse_csv)


@pytest.mark.parametrize("argv,nodes,nranks", [
    (["--system", "dgx-h100", "--nodes", "2"], 2, 16),
    (["--system", "dgx-a100", "--gpus-per-node", "4"], 1, 4),
])
def test_tuner_file_parses_back_contiguous_with_nccl_names(tmp_path, capsys, argv, nodes, nranks):
    out = tmp_path / "nccl_tuner.conf"
    assert main(["tune", *argv, "-e", "1G", "--output", str(out)]) == 0
    rules = parse_csv(out.read_text())
    by_coll = {}
    for r in rules:
        by_coll.setdefault(r["collective"], []).append(r)
        assert r["algorithm"] in NCCL_ALGORITHMS and r["protocol"] in NCCL_PROTOCOLS
        assert (r["nNodes"], r["nRanks"], r["channels"]) == (nodes, nranks, -1)
    assert set(by_coll) == set(NCCL_COLLECTIVES.values())
    for coll, rs in by_coll.items():
        assert rs[0]["min_bytes"] == 0 and rs[-1]["max_bytes"] == MAX_BYTES
        for a, b in zip(rs, rs[1:]):
            assert b["min_bytes"] == a["max_bytes"] + 1, coll
            assert (a["algorithm"], a["protocol"]) != (b["algorithm"], b["protocol"])
    if nodes > 1:
        assert "nvls" not in {r["algorithm"] for r in rules}  # multi-node NVLS is NVLS_TREE


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
