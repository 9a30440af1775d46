"""The shm transport's control segment: one per rank, written by that rank alone and read by
every peer. Its layout (in int64 words, then names and a failure message), the ids that
encode a call's descriptor in it, and the checks of a call's buffers before it runs.
"""
from __future__ import annotations

import os
import zlib

import numpy as np

from .. import dtypes as dt
from ..collectives import COLLECTIVES
from ..errors import ConfigError
from ..schedule import Schedule

DONE = 0xFFFFFFFF
# control segment layout, in int64 words
PROG, PID, STATE, GEN, CAP, IN_ADDR, OUT_ADDR = 0, 8, 9, 10, 11, 12, 13  # progress: own line
# ... with the pieces of a shared transfer this rank has read from the front and written from
# the back in the call (seq << 32 | pieces: `push.share_transfers`, kept by `_stream.c`)
FRONT, BACK = 1, 2
IN_PLACE = 14  # this call's input is its output (a broadcast root's peers read it)
WAITING = 15  # 1 + the rank this one is blocked on (0: none), so a timeout names the culprit
DESC = 16  # 8 words: seq, collective, algorithm hash, nranks, root, block count, dtype, op
ACK = 32  # + j: generation of rank j's data segment that this rank has mapped
P2P = 32 + 64  # + 4j: messages sent to j, their nbytes, dtype, generation of the segment for j
P2P_RECVD = P2P + 4 * 64  # + j: messages consumed from j
P2P_ACK = P2P_RECVD + 64  # + j: generation of j's segment-for-me that this rank has mapped
WORDS = P2P_ACK + 64
NAME_OFF = WORDS * 8  # 64 bytes: data segment name
P2P_NAME_OFF = NAME_OFF + 64  # + 64j: name of the segment for messages to j
MSG_OFF = P2P_NAME_OFF + 64 * 64  # 512 bytes: why this rank failed
# The small-message path's area (`shm_ll`, `_stream.LL`): two halves (odd and even calls) of
# 64-byte lines, each carrying 56 bytes of data and its own sequence word.
LL_OFF = (MSG_OFF + 512 + 4095) & ~4095
LL_LINES = 586  # 586 x 56 B >= 32 KiB of payload (RuntimeOptions.ll_max_bytes' limit)
LL_HALF = LL_LINES * 64
CTRL_BYTES = LL_OFF + 2 * LL_HALF
MAX_RANKS = 64

INIT, RUNNING, CLOSED, FAILED = 0, 1, 2, 3
# the descriptor's algorithm hash of a call on the small-message path: a peer on the general
# path (another size, dtype or algorithm) fails the descriptor check instead of waiting
LL_ALGO = zlib.crc32(b"all_reduce one_shot ll")
DTYPE_IDS = {name: i for i, name in enumerate(dt.DTYPES)}
OP_IDS = {name: i for i, name in enumerate(dt.REDUCE_OPS)}
COLL_IDS = {name: i for i, name in enumerate(COLLECTIVES)}


def pid_alive(pid: int) -> bool:
    """False for a process that is gone or a zombie (killed, not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def block_count(schedule: Schedule, rank: int, inp, out) -> int:
    coll, p, root = schedule.collective, schedule.nranks, schedule.root
    counts = []
    for name, arr, rng in (("input", inp, coll.inputs(rank, p, root)),
                           ("output", out, coll.outputs(rank, p, root))):
        if rng is None:
            continue
        if arr is None:
            raise ConfigError(f"rank {rank}: {coll.name} needs an {name} buffer on this rank")
        if arr.size % rng[1]:
            raise ConfigError(f"rank {rank}: {coll.name} {name} of {arr.size} elements does not "
                              f"divide into {rng[1]} blocks (one per rank)")
        counts.append((name, arr.size // rng[1]))
    if len({c for _, c in counts}) > 1:
        raise ConfigError(f"rank {rank}: {coll.name} buffers disagree: " + ", ".join(
            f"{name} has {c} elements per block" for name, c in counts))
    return counts[0][1] if counts else 0


class InputCopy:
    """Copies of a call's input into one scratch buffer the transport keeps (`unalias`). Fresh
    arrays cost a 2-rank 16 MiB all-to-all in place 3.6 ms against 1.25 ms out of place: their
    pages were zeroed and faulted in on every call. Peers' reads of a call's input end within
    the call, so the next call may overwrite the copy."""

    def __init__(self) -> None:
        self._buf = np.empty(0, np.uint8)

    def __call__(self, inp: np.ndarray) -> np.ndarray:
        return self.others(inp, -1, 0)

    def others(self, inp: np.ndarray, rank: int, bc: int) -> np.ndarray:
        """A copy of `inp` but for block `rank` (of `bc` elements; -1: all of it), which the
        copy leaves unwritten."""
        if self._buf.nbytes < inp.nbytes:
            self._buf = np.empty(inp.nbytes, np.uint8)
        copy, flat = self._buf[:inp.nbytes].view(inp.dtype), inp.reshape(-1)
        lo, hi = (rank * bc, (rank + 1) * bc) if rank >= 0 else (0, 0)
        np.copyto(copy[:lo], flat[:lo])
        np.copyto(copy[hi:], flat[hi:])
        return copy


def in_place_offset(coll, rank: int, p: int, root: int, bc: int, isz: int) -> int | None:
    """Bytes from a rank's output to its input when it calls in place as nccl-tests and MPI do
    (None: it has no input or no output): where its input's logical blocks fall on the same
    logical blocks of its output, except a gather's root, whose input is its own block of the
    output, and a scatter's root, whose output is its own block of the input. Their plans
    only copy that block onto itself (skipped), so nothing needs copying aside (2 ranks, 64
    KiB in place: 16.9 -> 4.3 us, whole in C)."""
    irng, orng = coll.inputs(rank, p, root), coll.outputs(rank, p, root)
    if irng is None or orng is None:
        return None
    return _offset(coll, rank, bc, isz, irng, orng)


def _offset(coll, rank: int, bc: int, isz: int, irng, orng) -> int:
    """`in_place_offset` from the rank's input and output ranges, both present."""
    if coll.name in ("gather", "scatter"):
        return (rank if coll.name == "gather" else -rank) * bc * isz
    return (irng[0] - orng[0]) * bc * isz


def unalias(schedule, rank, bc, inp, out, copy: InputCopy):
    """(input, output, own): in-place calls must map each logical chunk to one address; other
    overlaps get a copy of the input into `copy`, the transport's `InputCopy`. An
    all-to-all in place (the direct schedule, whose plan reads the own block only to copy it
    to the output) needs only the blocks peers read copied: its own block is already
    where the output wants it (`own` True: the plan's copy of it is dropped,
    `plan.own_block_in_place`; 2 ranks, 16 MiB: 2.9 ms with the whole input copied, against
    MPICH's 1.44 in place)."""
    coll = schedule.collective
    irng = coll.inputs(rank, schedule.nranks, schedule.root)
    orng = coll.outputs(rank, schedule.nranks, schedule.root)
    if irng is None or orng is None:  # the rank has no such buffer: ignore the other one
        return (inp if irng else None), (out if orng else None), False
    if inp is out:
        if irng[0] == orng[0]:
            return inp, out, False
    elif not np.may_share_memory(inp, out):
        return inp, out, False
    a_in = inp.__array_interface__["data"][0]
    a_out = out.__array_interface__["data"][0]
    if a_in - a_out == _offset(coll, rank, bc, inp.itemsize, irng, orng):
        return inp, out, False
    if coll.name == "all_to_all" and schedule.algorithm == "direct" and a_in == a_out \
            and inp.nbytes == out.nbytes:
        return copy.others(inp, rank, bc), out, True
    return copy(inp), out, False


def describe_call(desc, schedule=None) -> str:
    _, coll, algo, p, root, bc, dtype, op = desc
    cname = list(COLL_IDS)[coll] if 0 <= coll < len(COLL_IDS) else f"collective #{coll}"
    text = f"{cname}({list(DTYPE_IDS)[dtype]}, {bc} elements per block"
    c = COLLECTIVES.get(cname)
    if c is not None and c.reduces:
        text += f", op {dt.REDUCE_OPS[op]}"
    if c is not None and c.rooted:
        text += f", root {root}"
    if schedule is not None:
        text += f", algorithm {schedule.algorithm}"
    elif algo == LL_ALGO:
        text += ", algorithm one_shot on the small-message path"
    else:
        text += f", algorithm hash {algo:08x}"
    return text + ")"
