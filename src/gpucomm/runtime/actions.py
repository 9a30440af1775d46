"""What a compiled plan is made of: one `Action` per copy or reduction a rank executes, and
where its operands live (see `plan` for how a schedule becomes actions, `push` for the
rewrites that let a rank write into a peer)."""
from __future__ import annotations

from dataclasses import dataclass

# Where an action's operand lives.
SHM, IN, OUT, PEER, PEER_IN, PEER_OUT = 0, 1, 2, 3, 4, 5
LOC_NAMES = {SHM: "shm", IN: "in", OUT: "out", PEER: "peer", PEER_IN: "peer.in",
             PEER_OUT: "peer.out"}
PEER_LOC = {SHM: PEER, IN: PEER_IN, OUT: PEER_OUT}


@dataclass(frozen=True)
class Action:
    """dst[dlo:dlo+n] = src[slo:slo+n], or = cur[clo:clo+n] (op) src[...] when `reduce`.

    Offsets are relative to the array of their location (user input, user output or the
    rank's shared buffer); `src_rank` names the peer for PEER sources. `deps` are
    (peer, k) pairs: wait until the peer has completed k actions of this collective.
    """
    reduce: bool
    src_loc: int
    src_rank: int
    slo: int
    dst_loc: int
    dlo: int
    n: int
    cur_loc: int
    clo: int
    deps: tuple

    def as_tuple(self) -> tuple:
        return (self.reduce, self.src_loc, self.src_rank, self.slo, self.dst_loc, self.dlo,
                self.n, self.cur_loc, self.clo, self.deps)
