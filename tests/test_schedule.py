import json

import numpy as np
import pytest

from gpucomm.algorithms import build
from gpucomm.collectives import layout
from gpucomm.schedule import Schedule, step
from gpucomm.verify import VerifyError, verify


@pytest.mark.parametrize("p", [2, 3, 4, 7, 8, 16])
@pytest.mark.parametrize("channels", [1, 2])
def test_ring_all_reduce_sends_the_classic_amount(p, channels):
    m = 4 * p * channels * 1024  # bytes, divisible so the formula is exact
    sched = build("all_reduce", "ring", p, channels=channels)
    sent = sched.bytes_sent(layout("all_reduce", m, "float32", p))
    assert sent.tolist() == [2 * (p - 1) * m // p] * p


def test_schedule_prints_one_step_a_line():
    text = str(build("all_reduce", "ring", 3))
    assert "step 0: 0→1 c0 (reduce), 1→2 c1 (reduce), 2→0 c2 (reduce)" in text
    assert text.count("\nstep ") == 4


def test_schedule_round_trips_through_json():
    sched = build("all_gather", "ring", 5, channels=2)
    back = Schedule.from_json(json.dumps(json.loads(sched.to_json())))
    assert back == sched
    verify(back)


def _manual(steps, p=2, collective="all_reduce", cpb=1):
    return Schedule(collective, p, "manual", cpb, tuple(steps))


def test_verify_accepts_a_hand_written_exchange():
    verify(_manual([step(0, 1, 0, reduce=True), step(1, 0, 0)]))


def test_verify_names_rank_and_chunk_of_a_missing_contribution():
    with pytest.raises(VerifyError,
                       match=r"rank 0 chunk 0: ends with \{r0.b0\}.*missing \{r1.b0\}"):
        verify(_manual([step(0, 1, 0, reduce=True)]))


def test_verify_catches_double_reduction():
    with pytest.raises(VerifyError, match=r"step 1 rank 1 chunk 0: .*reduced twice"):
        verify(_manual([step(0, 1, 0, reduce=True), step(0, 1, 0, reduce=True)]))


def test_verify_catches_read_before_value():
    # all-gather: rank 0 holds only block 0; sending block 1 first is reading an empty chunk
    with pytest.raises(VerifyError, match=r"step 0 rank 0 chunk 1: sent to rank 1 before"):
        verify(_manual([step(0, 1, 1)], collective="all_gather"))


def test_verify_catches_conflicting_ops_in_one_step():
    bad = _manual([step([0, 1], [1, 0], [0, 0], reduce=True)])
    with pytest.raises(VerifyError,
                       match="step 0 rank [01] chunk 0: (read and written|two ops of one step)"):
        verify(bad)


def test_verify_catches_out_of_range_rank():
    with pytest.raises(VerifyError, match="names rank 5"):
        verify(_manual([step(0, 5, 0)]))


def test_steps_broadcast_scalars():
    s = step(np.arange(3), 0, 1, reduce=True)
    assert s.dst.tolist() == [0, 0, 0] and s.reduce.all() and not s.src.flags.writeable


def test_prove_builder_counts_proofs_refusals_and_the_first_failure():
    """`gpucomm algo verify`'s loop, as a library call (verify.prove_builder)."""
    from gpucomm.algorithms import get_algorithm
    from gpucomm.errors import ScheduleError
    from gpucomm.verify import prove_builder, roots_to_prove

    proof = prove_builder(get_algorithm("broadcast", "ring"), 4)
    assert proof.error is None and proof.verified == sum(len(roots_to_prove("broadcast", p))
                                                         for p in range(1, 5))

    class Broken:
        collective, name = "all_reduce", "broken"

        def build(self, nranks, root=0):
            if nranks == 2:
                raise ScheduleError("no 2")
            good = get_algorithm("all_reduce", "ring").build(nranks)
            if nranks < 3:
                return good
            return Schedule(good.collective, nranks, "broken", good.chunks_per_block,
                            tuple(good.steps())[:-1], good.scratch_blocks, good.root, good.channels,
                            good.params)

    proof = prove_builder(Broken(), 5)
    assert (proof.verified, proof.not_supported) == (1, 1) and proof.error.startswith("3 ranks")
