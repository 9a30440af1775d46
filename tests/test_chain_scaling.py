"""NCCL's ring broadcast and reduce across nodes (issue 23): a pipelined chain per channel.

A chain's time is about hops x per-hop latency + size / bandwidth: linear in the nodes at small
sizes, about flat in them at large ones. Held against the published ABCI 2.0 broadcast_perf
logs (data/logs/abci-v100-*n-broadcast.log: 4 V100 per node, 2 to 32 nodes).
"""
from pathlib import Path

import pytest

from gpucomm.algorithms import build
from gpucomm.interop.nccltests import parse_logs
from gpucomm.simulate import predict
from gpucomm.topology import build_topology

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
KIB64 = 64 << 10


def _time_us(coll, nbytes, nodes, proto="ll", system="dgx-h100", **kw):
    topo = build_topology(system, nodes=nodes, **kw)
    return predict(coll, nbytes, topo, algorithm="ring", protocol=proto).time_us


@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
def test_small_chain_time_grows_linearly_in_nodes(coll):
    t = {n: _time_us(coll, KIB64, n) for n in (4, 8, 16, 32)}
    # each added node adds its hops (7 NVLink, 1 network) at the same cost: equal slopes
    slopes = [(t[b] - t[a]) / (b - a) for a, b in ((4, 8), (8, 16), (16, 32))]
    assert max(slopes) / min(slopes) < 1.1, (t, slopes)
    assert t[32] / t[4] < 8.5  # 8x the nodes, not 64x (the quadratic growth was 36x)


@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
def test_large_chain_time_is_about_flat_in_nodes(coll):
    one, two, four = (_time_us(coll, 256 << 20, n, proto="auto") for n in (1, 2, 4))
    assert two / one < 1.2 and four / one < 1.3, (one, two, four)


@pytest.mark.parametrize("nodes", [2, 8, 32])
def test_published_abci_broadcast_of_64_kib_within_2x(nodes):
    (log,) = parse_logs((LOGS / f"abci-v100-{nodes}n-broadcast.log").read_text())
    (row,) = [r for r in log.rows if r["size"] == KIB64]
    pred = _time_us("broadcast", KIB64, nodes, system="dgx-v100", gpus_per_node=4)
    assert 0.5 < pred / row["time_us"] < 2.0, (pred, row["time_us"])


def test_small_chain_runs_on_the_channels_nccl_keeps_and_large_on_all_nics():
    topo = build_topology("dgx-h100", nodes=2)
    small = predict("broadcast", KIB64, topo, algorithm="ring", protocol="ll").timed
    # enqueue.cc: 64 KiB < 2 x 512 threads x (8 B x 16 ranks) keeps one channel
    assert small.channels == 1 and small.schedule.channels == 1
    large = predict("broadcast", 256 << 20, topo, algorithm="ring", protocol="simple")
    # 16 NCCL channels as one schedule channel per NIC rail, two lanes each: the chains cross
    # between the nodes on all 8 NICs
    assert large.timed.channels == 16 and large.timed.schedule.channels == 8
    busy = large.link_busy_s
    nic_out = [i for i, link in enumerate(topo.links)
               if topo.device(link.src).kind == "nic" and topo.device(link.dst).kind == "switch"
               and busy.get(i, 0.0) > 0]
    assert len(nic_out) == 8


def test_pipeline_unit_is_a_simple_chunk_or_an_ll_trip():
    from gpucomm.simulate.protocol import chain_pipeline_bytes, ring_threads
    assert chain_pipeline_bytes("simple", 1 << 30, 16, 16) == (16, 512 << 10)
    # LL: 8 B a thread; 64 KiB on 256 ranks keeps 1 channel and 96 threads (3 warps)
    assert ring_threads("ll", KIB64, 256, 1) == 96
    assert chain_pipeline_bytes("ll", KIB64, 256, 16) == (1, 96 * 8)
    assert chain_pipeline_bytes("ll128", 1 << 30, 16, 16) == (16, 640 * 60)


@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
def test_multi_channel_chain_moves_each_channels_share_once(coll):
    from gpucomm.verify import verify
    for p in (2, 5):
        for root in range(p):
            sched = verify(build(coll, "ring", p, root=root, chunks=3, channels=4))
            assert sched.total_chunks == 12 and sched.channels == 4
            assert sched.nops == 4 * 3 * (p - 1)
