import numpy as np
import pytest

from gpucomm import dtypes as dt
from gpucomm.collectives import COLLECTIVES, check_outputs, layout, reference, tolerance
from gpucomm.errors import ConfigError

BUSBW = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
         "all_gather": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
         "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n,
         "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0}


@pytest.mark.parametrize("name", sorted(BUSBW))
@pytest.mark.parametrize("n", [1, 2, 3, 8, 64])
def test_busbw_factor_is_nccl_tests(name, n):
    assert COLLECTIVES[name].busbw_factor(n) == pytest.approx(BUSBW[name](n))


def test_every_primitive_is_defined():
    assert set(COLLECTIVES) == set(BUSBW) | {"barrier"}


def test_layout_follows_nccl_tests_counts():
    lay = layout("all_gather", "1M", "float32", 8)
    # count is the per-rank block, as nccl-tests prints it (src/all_gather.cu paramcount)
    assert (lay.size, lay.count, lay.block_count) == (1 << 20, 1 << 15, 1 << 15)
    lay = layout("all_reduce", 1000, "float64", 8)
    assert (lay.size, lay.count, lay.block_count) == (1000, 125, 125)
    lay = layout("all_to_all", 100, "int32", 8)  # rounded down to a multiple of P, like nccl-tests
    assert (lay.size, lay.count, lay.block_count) == (96, 3, 3)
    algbw, busbw = layout("all_reduce", 1 << 30, "float32", 8).busbw(0.01)
    assert algbw == pytest.approx((1 << 30) / 0.01 / 1e9)
    assert busbw == pytest.approx(algbw * 14 / 8)


@pytest.mark.parametrize("bad, match", [
    (dict(collective="allreducee"), "unknown collective"),
    (dict(nbytes=-8), "negative"),
    (dict(nbytes=6), "not a multiple"),
    (dict(dtype="float128"), "unknown dtype"),
    (dict(nranks=0), "ranks must be"),
    (dict(nbytes="12Q"), "cannot parse size"),
])
def test_layout_rejects_bad_input(bad, match):
    args = dict(collective="all_reduce", nbytes=64, dtype="float32", nranks=4) | bad
    with pytest.raises(ConfigError, match=match):
        layout(**args)


def test_sizes_parse_like_nccl_tests():
    assert [dt.parse_size(s) for s in ("8", "64K", "1M", "8G", "2KB")] == [8, 65536, 1 << 20,
                                                                           8 << 30, 2048]


def test_avg_rejected_for_integers():
    with pytest.raises(ConfigError, match="avg.*int32"):
        dt.check_op("avg", dt.get_dtype("int32"))
    with pytest.raises(ConfigError, match="unknown reduction op 'xor'"):
        dt.check_op("xor", dt.get_dtype("float32"))


@pytest.mark.parametrize("name", ["float32", "float64", "float16", "bfloat16"])
def test_an_average_is_the_sums_division_bit_for_bit(name):
    """finish_avg multiplies by 1/P where P is a power of two: the same bits as dividing,
    subnormal and huge results included."""
    d = dt.get_dtype(name)
    rng = np.random.default_rng(7)
    scales = [1.0, 1e-5, 6e-8, 1e4] if name == "float16" else [1.0, 1e-39, 1e-45, 1e38]
    x = rng.standard_normal(4000) * np.repeat(scales, 1000)
    x = dt.to_storage(x.astype(np.float64 if name == "float64" else np.float32), d)
    for p in (2, 3, 4, 6, 8, 64, 1024):
        got = x.copy()
        dt.finish_avg(got, p, d)
        want = dt.to_storage(dt.to_compute(x, d) / d.compute.type(p), d)
        assert got.tobytes() == want.tobytes(), p


def test_bfloat16_round_trip_and_rounding():
    x = np.array([1.0, -2.5, 3.140625, 1e-3, 65504.0], dtype=np.float32)
    b = dt.f32_to_bf16(x)
    assert b.dtype == np.uint16
    back = dt.bf16_to_f32(b)
    assert np.all(np.abs(back - x) <= np.abs(x) * 2 ** -8)
    # 1 + 2^-8 is exactly half-way between bf16 neighbours 1 and 1+2^-7: ties go to even (1.0)
    assert dt.bf16_to_f32(dt.f32_to_bf16(np.array([1 + 2 ** -8], np.float32)))[0] == 1.0


def test_reference_all_to_all_and_gather():
    ins = [np.arange(6) + 10 * r for r in range(3)]
    out = reference("all_to_all", ins, dtype="int64")
    assert out[1].tolist() == [2, 3, 12, 13, 22, 23]
    ones = [np.array([r]) for r in range(3)]
    assert reference("gather", ones, dtype="int64", root=2)[2].tolist() == [0, 1, 2]
    assert reference("sendrecv", ones, dtype="int64")[0].tolist() == [2]


def test_integer_sum_wraps_exactly():
    ins = [np.array([100, -100], dtype=np.int8)] * 3
    assert reference("all_reduce", ins, "sum", "int8")[0].tolist() == [44, -44]


def test_tolerance_is_exact_where_it_must_be():
    assert tolerance("min", "float16", 8) == 0.0
    assert tolerance("sum", "int32", 8) == 0.0
    assert 0 < tolerance("sum", "float32", 8) < 1e-5


def test_check_outputs_names_the_rank():
    ins = [np.ones(4, np.int32), np.ones(4, np.int32)]
    outs = reference("all_reduce", ins, dtype="int32")
    outs[1] = outs[1].copy()
    outs[1][2] = 7
    with pytest.raises(AssertionError, match="rank 1: element 2"):
        check_outputs("all_reduce", outs, ins, "sum", "int32")
