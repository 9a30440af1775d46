"""benchmarks/calibration.py --published reads a published table as the nccl-tests log it was
printed from: same sizes and times, the machine the table states (issue 23)."""
import json

import pytest

from gpucomm.interop.doctor import diagnose

from bench_modules import load


@pytest.fixture(scope="module")
def bench():
    return load("calibration")


def test_a_table_reads_back_as_its_log(bench):
    tables = {e["id"]: e for e in json.loads(bench.PUBLISHED.read_text())}
    for _, train, held, flags in bench.PAIRS:
        for source in (train, held):
            if source.endswith(".log"):
                assert (bench.LOGS / source).is_file()
                continue
            table = tables[source]
            (req,) = bench.source_requests(source, flags, tables)
            assert [(r["size"], r["time_us"]) for r in req.log.good_rows] == \
                [(r["bytes"], pytest.approx(r["time_us"], abs=0.01)) for r in table["rows"]]
            system = diagnose(req).system
            assert (system["nodes"], system["gpus_per_node"]) == \
                (table["nodes"], table["gpus_per_node"])
            assert req.nccl_version == bench.table_version(table)
            assert req.nccl_version is None or req.nccl_version in table["nccl_version"]


def test_an_index_entry_passes_on_what_its_source_states(bench):
    """The NCCL version and the NCCL_ALGO a run forced, where the source states what the log
    does not print, reach doctor as its flags would (Together's H100 'ring' config)."""
    index = {e["file"]: e for e in json.loads((bench.LOGS / "index.json").read_text())}
    (req,) = bench.requests(index["together-h100-1n-all_reduce-ring.log"])
    assert (req.algorithm, req.nccl_version) == ("ring", "2.26.2")
    assert {r.get("algorithm") for r in diagnose(req).rows} == {"ring"}
    (auto,) = bench.requests(index["abci-a100-1n-8g-all_reduce.log"])
    assert (auto.algorithm, auto.nccl_version) == (None, "2.8.4")
