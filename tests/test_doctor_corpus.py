"""`gpucomm doctor` on every raw public log of data/logs: no error, and the machine and the
collectives it infers are what the log's source states (data/logs/index.json)."""
import json
from pathlib import Path

import pytest

from gpucomm.cli import main
from gpucomm.interop.doctor import DoctorRequest, diagnose
from gpucomm.interop.nccltests import parse_logs

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
INDEX = json.loads((LOGS / "index.json").read_text())


def test_the_corpus_is_at_least_thirty_logs_each_with_a_source():
    assert len(INDEX) >= 30
    assert {e["file"] for e in INDEX} == {p.name for p in LOGS.glob("*.log")}
    assert all(e["source"].startswith("https://github.com/") and "/blob/" in e["source"]
               for e in INDEX)


@pytest.mark.parametrize("entry", INDEX, ids=lambda e: e["file"])
def test_doctor_infers_what_the_source_states(entry):
    path = LOGS / entry["file"]
    logs = parse_logs(path.read_text())
    found = [diagnose(DoctorRequest(log, name=str(path))) for log in logs]
    assert [d.collective for d in found] == entry["collectives"]
    for d in found:
        g = d.guess
        assert (g.gpu, g.nodes, g.gpus_per_node) == (entry["gpu"], entry["nodes"],
                                                     entry["gpus_per_node"])
        assert d.ratio is not None and d.ratio > 0
        if "nic" in entry:
            assert d.system.get("nic") == entry["nic"]
        if "nics_per_node" in entry:  # where the source states it and the log shows it
            assert d.system.get("nics_per_node") == entry["nics_per_node"]


def test_doctor_command_runs_on_several_logs_at_once(capsys):
    names = ["xxrjun-h100-smoke-2n-1g.log", "superbench-a100-nccl_alltoall.log",
             "aws-p5-2n-nccl2.22.3-tuner-efa.log"]
    assert main(["doctor", *(str(LOGS / n) for n in names), "--format", "json"]) == 0
    docs = json.loads(capsys.readouterr().out)["logs"]
    assert [d["collective"] for d in docs] == ["all_reduce", "sendrecv", "all_to_all",
                                               "all_reduce"]
