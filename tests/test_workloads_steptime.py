"""The step-time model on its own (no simulator): bubble, overlap, HBM-bound decode."""
from types import SimpleNamespace

import pytest

from gpucomm.errors import ConfigError
from gpucomm.workloads import Layout, get_model, memory_per_gpu, step_comms, validate
from gpucomm.workloads import steptime as stm
from gpucomm.workloads.compute import logits_flops

GPU = SimpleNamespace(name="fake", bf16_flops=1e15, hbm_bandwidth_Bps=3e12, hbm_bytes=80e9)


def cluster(gpus: int) -> stm.Cluster:
    return stm.Cluster("fake", gpus // 8, None, 8, GPU)


def run(model, lay, times: dict | None = None):
    """The step with every collective taking times[kind] seconds per call (default 0)."""
    model = get_model(model)
    cl = cluster(lay.world)
    lay = validate(model, lay, cl.gpus)
    timed = []
    for c in step_comms(model, lay):
        t = (times or {}).get(c.kind, 0.0)
        mult = lay.microbatches if c.per == "microbatch" else 1
        timed.append(stm.CommTime(c, (0, 1), t, t * c.count * mult, "x", "simple"))
    step = stm._training_step if lay.mode == "train" else stm._inference_step
    return step(model, lay, cl, memory_per_gpu(model, lay), tuple(timed))


@pytest.mark.parametrize("m, p", [(8, 8), (32, 8), (16, 4)])
def test_1f1b_bubble_fraction(m, p):
    lay = Layout(tp=8, pp=p, dp=1, seq=2048, global_batch=m, micro_batch=1)
    r = run("megatron-gpt-146b", lay)
    busy = r.step_time_s - r.optimizer_s
    assert r.bubble_s / busy == pytest.approx((p - 1) / (m + p - 1))
    assert r.step_time_s == pytest.approx(r.compute_time_s + r.bubble_s + r.optimizer_s)


def test_interleaving_divides_the_bubble():
    lay = Layout(tp=8, pp=8, dp=1, seq=2048, global_batch=16)
    plain, inter = run("megatron-gpt-146b", lay), run("megatron-gpt-146b", lay.with_(vpp=2))
    assert inter.bubble_s == pytest.approx(plain.bubble_s / 2)


def test_compute_time_from_kernel_rates():
    from gpucomm.workloads.compute import gemm_peak, kernels, layer_times
    m = get_model("megatron-gpt-1.7b")
    lay = Layout(tp=1, dp=8, seq=2048, global_batch=64, micro_batch=2, zero=0)
    r = run(m, lay)
    lt = layer_times(m, lay, GPU, 2, 2048)
    head = logits_flops(m, 2 * 2048) / (gemm_peak(GPU, "bf16") * kernels(GPU).gemm)
    assert r.compute_time_s == pytest.approx(lay.microbatches * (
        m.layers * lt.microbatch_s("none") + 3 * head))
    # GEMMs at their rate: the matmul part is FLOPs / (peak * efficiency) exactly
    assert lt.gemm_s == pytest.approx(2 * 2 * 2048 * (m.attn_params + m.expert_params)
                                      / (GPU.bf16_flops * kernels(GPU).gemm))
    # no communication: MFU is below the GEMM efficiency (attention, elementwise cost extra)
    assert 0.3 < r.mfu < kernels(GPU).gemm


def test_tp_comm_is_exposed_and_dp_hides_behind_backward():
    lay = Layout(tp=8, dp=4, seq=2048, global_batch=16, micro_batch=1, zero=0, sp=False)
    quiet = run("megatron-gpt-18b", lay)
    busy = run("megatron-gpt-18b", lay, {"TP": 1e-3, "DP": 1e-6})
    calls = 4 * 40 * lay.microbatches  # 2 + 2 per layer per microbatch, 40 layers
    assert busy.exposed_by_kind["TP"] == pytest.approx(calls * 1e-3)
    assert busy.exposed_by_kind["DP"] == pytest.approx(1e-6)  # only the last bucket
    assert busy.step_time_s == pytest.approx(quiet.step_time_s + calls * 1e-3 + 1e-6)


def test_dp_longer_than_backward_is_exposed_beyond_the_window():
    lay = Layout(dp=8, seq=2048, global_batch=8, zero=0)
    r = run("llama3-8b", lay, {"DP": 10.0})  # far slower than any backward
    from gpucomm.workloads.compute import layer_times
    n = sum(c.comm.count for c in r.comms if c.comm.kind == "DP")
    window = r.compute_time_s - 32 * layer_times(get_model("llama3-8b"), lay, GPU, 1,
                                                 2048).forward_s
    assert r.exposed_by_kind["DP"] == pytest.approx(10.0 * n - window * (1 - 1 / n))


def test_decode_is_bound_by_hbm_bandwidth():
    m = get_model("llama3-70b")
    lay = Layout(tp=8, seq=1024, global_batch=1, mode="decode")
    r = run(m, lay)
    weights = 2 * (m.params - m.vocab * m.hidden) / 8  # the input embedding is a lookup
    kv = 2 * 2 * 80 * 128 * 1024  # K,V of one KV head per rank, every layer
    expected = (weights + kv) / (GPU.hbm_bandwidth_Bps * stm.HBM_EFFICIENCY)
    assert r.step_time_s == pytest.approx(expected, rel=0.01)
    assert r.tokens_per_s == pytest.approx(1 / r.step_time_s)


def test_layout_that_does_not_fit_is_rejected_with_the_reason():
    m = get_model("llama3-405b")
    lay = validate(m, Layout(tp=8, dp=1, seq=8192, global_batch=1), 8)
    with pytest.raises(ConfigError,
                       match=r"does not fit.*per GPU.*weights.*--nodes \d+ --tp 8.*would fit"):
        stm.check_memory(m, lay, memory_per_gpu(m, lay), GPU)


# -- groups that run at the same time --------------------------------------------------------
def test_peer_groups_are_the_same_kind_on_the_same_nodes():
    lay = Layout(tp=2, pp=2, dp=8)
    assert stm.peer_groups(lay, "dp", stm.group_ranks(lay, "dp", 0), 8) == \
        [(1, 3, 5, 7, 9, 11, 13, 15)]
    assert stm.peer_groups(lay, "tp", (0, 1), 8) == [(2, 3), (4, 5), (6, 7)]
    assert stm.peer_groups(lay, "pp", (0, 16), 8) == [(r, r + 16) for r in range(1, 8)]


def test_union_schedule_runs_copies_side_by_side():
    from gpucomm.algorithms import build
    from gpucomm.simulate.concurrent import union_nbytes, union_schedule
    one = build("all_gather", "ring", 4)
    two = union_schedule(one, 3, channel_offsets=[0, 1, 2])
    assert two.nranks == 12 and two.nsteps == one.nsteps and two.nops == 3 * one.nops
    for a, b in zip(one.steps(), two.steps()):
        assert sorted(b.src.tolist()) == sorted(x + 4 * j for j in range(3) for x in a.src)
        assert set(b.channel.tolist()) == {c + j for j in range(3) for c in a.channel.tolist()}
    assert union_nbytes("all_gather", 1024, 4, 3) == 3072  # same block size per copy
    assert union_nbytes("all_reduce", 1024, 4, 3) == 1024


def test_groups_sharing_nics_are_slower_together():
    pytest.importorskip("gpucomm.simulate")
    from gpucomm.simulate import predict
    from gpucomm.topology import build_topology
    from gpucomm.simulate.concurrent import time_together
    nbytes = 8 << 20
    groups = [[i, 8 + i] for i in range(8)]  # one send per GPU index across two nodes
    slowdown = {}
    for system in ("dgx-h100", "pcie"):  # a NIC per GPU vs 2 NICs for 8 GPUs
        topo = build_topology(system, 2)
        one = predict("sendrecv", nbytes, topo, ranks=groups[0], dtype="bfloat16")
        alone = time_together("sendrecv", nbytes, topo, groups[:1], one)
        together = time_together("sendrecv", nbytes, topo, groups, one)
        slowdown[system] = together / alone
    assert slowdown["dgx-h100"] == pytest.approx(1.0, rel=0.05)
    assert slowdown["pcie"] > 3.0
