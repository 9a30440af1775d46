"""benchmarks/accuracy.py's NCCL column is NCCL's own tuning model over the channels NCCL's own
graphs have (tuning.cc busBw = graphs[a]->nChannels x bw): the ring graph's for ring, tree and
PAT, the NVLS graph's heads for NVLS and NVLSTree. It reads them from the topology alone, so
whatever gpucomm picks for a row, NCCL's estimate of that row is the same."""
import json
import math
from pathlib import Path

import pytest

from gpucomm.simulate import nccl_tuning as T
from gpucomm.simulate.nccl import nvls_heads
from gpucomm.topology import build_topology

from bench_modules import load


A = load("accuracy")
TABLES = {t["id"]: t for path in A.DATA for t in json.loads(Path(path).read_text())}
CLUSTER_B_8N = "nccltests309_h100_8n64g_ib_all_reduce_clusterB"  # 8 x 8 H100, 8 NDR per node
ONE_NODE = "xxrjun_h100_1n8g_all_reduce"  # one 8-GPU H100 node: gpucomm picks nvls


def _rows(table, monkeypatch=None, algorithm=None):
    if algorithm is not None:
        real = A.predict
        monkeypatch.setattr(A, "predict", lambda *a, **k: real(*a, **{**k, "algorithm": algorithm}))
    return A.evaluate([table])


@pytest.mark.parametrize("tid", [CLUSTER_B_8N, ONE_NODE])
def test_nccls_estimate_does_not_depend_on_gpucomms_pick(tid, monkeypatch):
    auto = _rows(TABLES[tid])
    ring = _rows(TABLES[tid], monkeypatch, "ring")
    assert {r["algorithm"] for r in ring} == {"ring"}
    assert {r["algorithm"] for r in auto} - {"ring"}  # gpucomm's own pick is not the ring
    assert [r["nccl_time_us"] for r in auto] == [r["nccl_time_us"] for r in ring]
    assert [r["nccl_choice"] for r in auto] == [r["nccl_choice"] for r in ring]


def test_graph_channels_are_the_ring_graphs_and_one_head_per_nic_gpu():
    assert A.nccl_graph_channels(build_topology("dgx-h100")) == (16, 8)
    multi = build_topology("dgx-h100", nodes=4, nic="ib-ndr", nics_per_node=8)
    assert A.nccl_graph_channels(multi) == (16, 8)
    four_nics = build_topology("dgx-h100", nodes=4, nic="ib-ndr", nics_per_node=4)
    assert A.nccl_graph_channels(four_nics) == (16, 4)
    # one node: NCCL drops the NICs (paths.cc ncclTopoTrimSystem), every GPU is a head
    assert nvls_heads(8, 4, 1) == 8 and nvls_heads(8, 4, 2) == 4 and nvls_heads(64, 64, 2) == 32


def test_nccls_estimate_of_one_row_by_hand():
    """Cluster B, 8 nodes, all-reduce 1 GiB: NCCL's model runs NVLSTree over the NVLS graph's
    8 heads (tuning.cc, snapshot 5067397)."""
    table = TABLES[CLUSTER_B_8N]
    row = next(r for r in _rows(table) if r["size"] == 1 << 30)
    heads, nodes, nranks = 8, 8, 64
    intra = 370.8 / heads  # bwIntra per channel: H100 NVLink, 18 x SM90_NVLINK_BW 20.6 GB/s
    inter = min(intra, 8 * 50.0 / heads)  # 8 NDR NICs at 50 GB/s each
    nvls_intra = intra * 0.85 * (heads - 1) / heads * 2  # nvlsEfficiency sm90; all-reduce x2
    bw = min(nvls_intra, inter, 45.5)  # perChMaxNVLSTreeBws Hopper, > 2 nodes: the cap binds
    algbw = heads * bw * nranks / (2 * (nranks - 1))  # busBw -> algBw: nRanks / nsteps
    lat = 25.0 + 2 * math.log2(nodes) * 20.9  # hwLat NVLink NVLS; 2 log2(nodes) x Net NVLSTree
    assert T.HW["nvlink"]["nvls_tree"][2] == 25.0 and T.HW["net"]["nvls_tree"][2] == 20.9
    want = lat + (1 << 30) / (1000 * algbw)
    assert want == pytest.approx(5957.898, abs=1e-3)
    assert row["nccl_choice"] == "nvls_tree/simple"
    assert row["nccl_time_us"] == pytest.approx(want, rel=1e-9)
