"""fp8 (nccl-tests' -d f8e4m3 / f8e5m2) as NCCL reduces it: every code decoded, every half
rounded to fp8 as CUDA's saturating conversion does (checked against independent oracles over
all 65536 half values), and reductions bit for bit against a numpy reference that folds the
ranks' values in the order the schedule reduces them."""
import math

import numpy as np
import pytest

from gpucomm import dtypes as dt
from gpucomm.algorithms import build
from gpucomm.cli import main
from gpucomm.execute import execute

HALVES = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
MAX = {"f8e4m3": 448.0, "f8e5m2": 57344.0}


def _oracle(v: float, name: str) -> int:
    """One value -> fp8 code, from the format's definition (no tables): round to nearest,
    ties to an even mantissa, saturate at the largest finite value, NaN -> the format's NaN."""
    exp_bits, man_bits = (4, 3) if name == "f8e4m3" else (5, 2)
    bias = (1 << (exp_bits - 1)) - 1
    sign = 0x80 if math.copysign(1.0, v) < 0 else 0
    if math.isnan(v):  # CUDA: E4M3's one NaN; E5M2 0x7E | the top two payload bits
        bits = int(np.array(v, dtype=np.float64).view(np.uint64))
        return sign | (0x7F if name == "f8e4m3" else 0x7E | ((bits >> 50) & 3))
    a = min(abs(v), MAX[name])
    e = max(math.floor(math.log2(a)) if a else 1 - bias, 1 - bias)  # subnormals: 1 - bias
    q = 2.0 ** (e - man_bits)
    n = round(a / q)  # a / q is exact; round() ties to even
    if n == 2 << man_bits:  # rounded up into the next binade
        n, e = 1 << man_bits, e + 1
    if n < 1 << man_bits:  # subnormal (or zero)
        return sign | n
    return sign | ((e + bias) << man_bits) | (n - (1 << man_bits))


@pytest.mark.parametrize("name", dt.FP8)
def test_every_code_decodes_to_its_value(name):
    codes = np.arange(256, dtype=np.uint8)
    got = dt.fp8_to_float(codes, name).astype(np.float64)
    if name == "f8e5m2":  # E5M2 is the upper byte of an IEEE half
        want = (codes.astype(np.uint16) << 8).view(np.float16).astype(np.float64)
    else:
        want = np.array([_oracle_decode_e4m3(int(c)) for c in codes])
    assert np.array_equal(got, want, equal_nan=True)
    assert np.nanmax(got[np.isfinite(got)]) == MAX[name]


def _oracle_decode_e4m3(c: int) -> float:
    s, e, m = -1.0 if c & 0x80 else 1.0, (c >> 3) & 0xF, c & 7
    if e == 0xF and m == 7:
        return math.nan
    return s * (m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


@pytest.mark.parametrize("name", dt.FP8)
def test_every_half_rounds_to_the_fp8_the_oracle_gives(name):
    got = dt.float_to_fp8(HALVES, name)  # the lookup path
    direct = dt.float_to_fp8(HALVES.astype(np.float64), name)  # the search path
    want = np.array([_oracle(float(v), name) for v in HALVES], dtype=np.uint8)
    assert np.array_equal(got, want) and np.array_equal(direct, want)
    if name == "f8e5m2":  # and the classic bit trick on the half's bits, saturated
        bits = HALVES.view(np.uint16).astype(np.uint32)
        rne = (bits + 0x7F + ((bits >> 8) & 1)) >> 8
        fin = np.isfinite(HALVES) & (np.abs(HALVES) <= MAX[name])
        assert np.array_equal(got[fin], rne[fin].astype(np.uint8))
    # saturation: beyond the largest finite value, infinities too
    assert dt.float_to_fp8(np.array([1e30, -np.inf]), name).tolist() == \
        [_oracle(MAX[name], name), 0x80 | _oracle(MAX[name], name)]


def _symbolic(schedule, p):
    """Each rank's final value of each chunk as a tree: a rank's input chunk, or
    (accumulated, incoming), in the order the schedule reduces them."""
    cpb, coll = schedule.chunks_per_block, schedule.collective
    chunks = len(schedule.chunk_bounds(cpb)) - 1
    val = [[None] * chunks for _ in range(p)]
    for r in range(p):
        first, n = coll.inputs(r, p, schedule.root)
        for c in range(first * cpb, (first + n) * cpb):
            val[r][c] = (r, c)
    for st in schedule.steps():
        cols = [c.tolist() for c in st.columns()[:6]]
        moves = [(dst, dc + i, val[src][sc + i], red)
                 for src, dst, sc, dc, n, red in zip(*cols) for i in range(n)]
        for dst, c, v, red in moves:
            val[dst][c] = ("op", val[dst][c], v) if red else v
    return val


def _fold(tree, inputs, per_chunk, op, name):
    """Evaluate a tree as NCCL's kernels do: widen to half, one half op, round to fp8."""
    if tree[0] != "op":
        r, c = tree
        return inputs[r][c * per_chunk:(c + 1) * per_chunk]
    a = dt.fp8_to_float(_fold(tree[1], inputs, per_chunk, op, name), name)
    b = dt.fp8_to_float(_fold(tree[2], inputs, per_chunk, op, name), name)
    h = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}[op](a, b)
    assert h.dtype == np.float16
    return np.array([_oracle(float(x), name) for x in h], dtype=np.uint8)


@pytest.mark.parametrize("name", dt.FP8)
@pytest.mark.parametrize("op", ["sum", "prod", "max"])
@pytest.mark.parametrize("algo,p", [("ring", 4), ("ring", 5), ("recursive_doubling", 8)])
def test_all_reduce_is_bit_for_bit_the_schedule_order_fold(name, op, algo, p):
    sched = build("all_reduce", algo, p)
    per_chunk, out_chunks = 6, sched.nblocks * sched.chunks_per_block
    n = out_chunks * per_chunk
    rng = np.random.default_rng(p)
    lo, hi = (0.5, 1.9) if op == "prod" else (-MAX[name] / 4, MAX[name] / 4)
    inputs = [dt.float_to_fp8(rng.uniform(lo, hi, n), name) for _ in range(p)]
    outs = execute(sched, inputs, op, name)
    tree = _symbolic(sched, p)
    for r in range(p):
        want = np.concatenate([_fold(t, inputs, per_chunk, op, name) for t in tree[r][:out_chunks]])
        assert np.array_equal(outs[r], want), (r, op)
    # saturating sums: E4M3 never turns into NaN, E5M2 never into infinity
    assert np.isfinite(dt.fp8_to_float(outs[0], name).astype(np.float64)).all()


def test_a_nearest_even_step_differs_from_one_rounding_of_the_exact_sum():
    """Why the reference must fold in order: rounding after every step is not rounding the
    exact sum once (17 + 1 + 1 in E4M3: 17 -> 16, 16 + 1 -> 16 (tie to even), 16 + 1 -> 16;
    19 once -> 20)."""
    x = dt.float_to_fp8(np.array([17.0, 1.0, 1.0]), "f8e4m3")
    outs = execute(build("all_reduce", "ring", 3), [x[[i]] for i in range(3)], "sum", "f8e4m3")
    assert dt.fp8_to_float(outs[0], "f8e4m3")[0] == 16.0
    assert dt.fp8_to_float(dt.float_to_fp8(np.array([19.0]), "f8e4m3"), "f8e4m3")[0] == 20.0


@pytest.mark.parametrize("name", dt.FP8)
def test_sim_and_bench_take_nccl_tests_fp8_names(name, capsys):
    assert main(["sim", "all_reduce_perf", "-b", "8", "-e", "1K", "-f", "4", "-d", name]) == 0
    rows = [x.split() for x in capsys.readouterr().out.splitlines() if x and x[0] != "#"]
    assert rows and all(r[2] == name and int(r[0]) == int(r[1]) for r in rows)  # 1 B a value


@pytest.mark.slow
@pytest.mark.parametrize("name", dt.FP8)
def test_bench_checks_fp8_on_shm_ranks_small_and_large(name):
    """Sizes on the small-message path (its C kernels know a type by its buffer's format:
    fp8 is stored as uint8 and must not be summed as integers there) and above it."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "gpucomm", "bench", "all_reduce_perf", "-b", "64", "-e", "64K",
         "-f", "32", "-g", "3", "-d", name, "-o", "all", "-n", "2", "-w", "1"],
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=str(root / "src")))
    assert done.returncode == 0, done.stderr
    rows = [x.split() for x in done.stdout.splitlines() if x.strip() and x.lstrip()[0] != "#"]
    assert len(rows) == 3 * 6 and all(r[2] == name for r in rows)  # sizes x ops (mulsum too)
    assert all(r[8] == "0" and r[12] == "0" for r in rows), rows


def test_sim_ranks_ring_as_nccl_does_for_fp8_beyond_8_ranks():
    """NCCL's updateCollCostTable multiplies ring's cost by 1024 for fp8 on more than 8
    ranks (precision); the chosen pair changes, the times do not."""
    from gpucomm.simulate import predict
    from gpucomm.topology import build_topology
    big, small = build_topology("dgx-a100", nodes=2), build_topology("dgx-a100")
    half = predict("all_reduce", 64 << 20, big, dtype="float16")
    assert half.algorithm == "ring"
    for name in dt.FP8:
        fp8 = predict("all_reduce", 64 << 20, big, dtype=name)
        assert fp8.algorithm != "ring"
        ring = [t for a, p, t in fp8.candidates if a == "ring"]
        assert min(ring) < fp8.time_s  # faster, but NCCL will not pick it
        assert predict("all_reduce", 64 << 20, small, dtype=name).algorithm == \
            predict("all_reduce", 64 << 20, small, dtype="float16").algorithm  # 8 ranks
