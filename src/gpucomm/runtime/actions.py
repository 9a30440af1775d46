"""What a compiled plan is made of: one `Action` per copy or reduction a rank executes, and
where its operands live (see `plan` for how a schedule becomes actions, `push` for the
rewrites that let a rank write into a peer).

While a plan is built, actions are `Op`s whose dependencies are references to other ops (or
to a rank's `Entry`: "that rank has entered the call"); passes insert, replace and drop ops
freely. `lower` numbers them once, at the end: a reference becomes (peer, how many of its
actions must be done).
"""
from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class Loc(IntEnum):
    """Where an action's operand lives: this rank's shared buffer, its user input or output,
    or the same three of the peer `Action.peer` (the PEER_* ones)."""
    SHM = 0
    IN = 1
    OUT = 2
    PEER = 3
    PEER_IN = 4
    PEER_OUT = 5

    @property
    def text(self) -> str:
        return self.name.lower().replace("_", ".")

    @property
    def of_peer(self) -> "Loc":
        """The same location in a peer (SHM -> PEER, IN -> PEER_IN, OUT -> PEER_OUT)."""
        return Loc(self + 3) if self <= Loc.OUT else self

    @property
    def is_private(self) -> bool:
        """A peer's user buffer, reached by cross-memory attach."""
        return self in (Loc.PEER_IN, Loc.PEER_OUT)


SHM, IN, OUT, PEER, PEER_IN, PEER_OUT = tuple(Loc)


class Action(NamedTuple):
    """dst[dst_off:+n] = src[src_off:+n], or = cur[cur_off:+n] (op) src[...] when `reduce`.

    Offsets are relative to the array of their location (user input, user output or the
    rank's shared buffer); `peer` names the rank of PEER_* operands. `deps` are (peer, k)
    pairs: wait until the peer has completed k actions of this collective. An action with
    n == 0 is a pure wait. `share` > 0: one side of a transfer two ranks share in pieces of
    that many elements (`push.share_transfers`): a read takes pieces from the front, a write
    (into the peer that reads them) from the back, until the two meet. `complete`: a
    reduction whose result holds every rank's contribution (an average divides it there,
    before anything copies it on: NCCL's post-division).
    """
    reduce: bool
    src: Loc
    peer: int
    src_off: int
    dst: Loc
    dst_off: int
    n: int
    cur: Loc
    cur_off: int
    deps: tuple
    share: int = 0
    complete: bool = False

    def describe(self) -> str:
        dep = ", ".join(f"r{q}>={k}" for q, k in self.deps)
        if self.n == 0:
            return f"wait {dep}" if dep else "nothing"
        src = f"r{self.peer}.{Loc(self.src - 3).text}" if self.src >= PEER else self.src.text
        if self.dst == PEER_OUT:
            what = f"r{self.peer}.out[{self.dst_off}:+{self.n}] = " \
                   f"{self.src.text}[{self.src_off}:+{self.n}]"
        elif self.reduce:
            what = f"{self.dst.text}[{self.dst_off}:+{self.n}] = " \
                   f"{self.cur.text}[{self.cur_off}] op {src}[{self.src_off}]"
        else:
            what = f"{self.dst.text}[{self.dst_off}:+{self.n}] = {src}[{self.src_off}:+{self.n}]"
        if self.share:
            what += f" (shared, pieces of {self.share})"
        return what + (f"  after {dep}" if dep else "")


class Entry:
    """A dependency on rank `rank` having entered the call (lowers to (rank, 0))."""
    __slots__ = ("rank",)

    def __init__(self, rank: int):
        self.rank = rank

    def __repr__(self) -> str:
        return f"Entry({self.rank})"


class Op:
    """An action being planned: `Action`'s fields, with `deps` a list of references (other
    ops, or `Entry`s). `stands_for`: set when this op left its rank's list or was replaced;
    a reference to it then means that op instead (an earlier one of the same rank, or the
    last of what replaced it)."""
    __slots__ = ("rank", "reduce", "src", "peer", "src_off", "dst", "dst_off", "n", "cur",
                 "cur_off", "deps", "share", "complete", "stands_for")

    def __init__(self, *, rank: int, reduce: bool = False, src: Loc, peer: int, src_off: int,
                 dst: Loc, dst_off: int, n: int, cur: Loc = SHM, cur_off: int = 0, deps=(),
                 share: int = 0, complete: bool = False):
        self.rank, self.reduce, self.src, self.peer, self.src_off = rank, reduce, src, peer, \
            src_off
        self.dst, self.dst_off, self.n, self.cur, self.cur_off = dst, dst_off, n, cur, cur_off
        self.deps = list(deps)
        self.share, self.complete = share, complete
        self.stands_for: Op | Entry | None = None

    @classmethod
    def wait(cls, rank: int, peer: int, deps) -> "Op":
        """A zero-length action whose only content is its dependencies."""
        return cls(rank=rank, src=SHM, peer=peer, src_off=0, dst=SHM, dst_off=0, n=0, deps=deps)

    def copy(self, **changes) -> "Op":
        op = Op(rank=self.rank, reduce=self.reduce, src=self.src, peer=self.peer,
                src_off=self.src_off, dst=self.dst, dst_off=self.dst_off, n=self.n,
                cur=self.cur, cur_off=self.cur_off, deps=self.deps, share=self.share,
                complete=self.complete)
        for k, v in changes.items():
            setattr(op, k, v)
        return op

    def __repr__(self) -> str:
        return f"Op(r{self.rank}: {self.frozen(()).describe()})"

    def frozen(self, deps: tuple) -> Action:
        return Action(reduce=self.reduce, src=self.src, peer=self.peer, src_off=self.src_off,
                      dst=self.dst, dst_off=self.dst_off, n=self.n, cur=self.cur,
                      cur_off=self.cur_off, deps=deps, share=self.share,
                      complete=self.complete)


def resolve(ref):
    """The op (or Entry) a reference means now."""
    while isinstance(ref, Op) and ref.stands_for is not None:
        ref = ref.stands_for
    return ref


def lower(ranks: list) -> tuple:
    """Number the dependencies, once: per rank a tuple of `Action`s whose deps are (peer q,
    count k) pairs, the latest reference to each peer kept, sorted by peer."""
    index = {id(op): i + 1 for row in ranks for i, op in enumerate(row)}
    out = []
    for row in ranks:
        acts = []
        for op in row:
            need: dict = {}
            for ref in op.deps:
                ref = resolve(ref)
                q, k = (ref.rank, 0) if isinstance(ref, Entry) else (ref.rank, index[id(ref)])
                need[q] = max(need.get(q, 0), k)
            acts.append(op.frozen(tuple(sorted(need.items()))))
        out.append(tuple(acts))
    return tuple(out)


def fused_result_push(a: Action, nxt: Action | None) -> bool:
    """Is `nxt` the push of the range that `a` has just reduced from a peer's buffer
    (`push.push_results`)? The runtime writes each reduced piece on while it is in cache."""
    return nxt is not None and a.reduce and a.src.is_private and not nxt.reduce \
        and nxt.dst == PEER_OUT and nxt.src == a.dst and nxt.src_off == a.dst_off \
        and nxt.n == a.n


def fused_push(a: Action, nxt: Action | None) -> bool:
    """Is `nxt` the push of what local copy `a` just copied (`push.push_copies`)? The
    runtime runs the two as one: each piece is copied, then written to the peer while it is
    in cache."""
    return nxt is not None and not a.reduce and a.src in (IN, OUT, SHM) \
        and a.dst in (IN, OUT, SHM) and nxt.dst == PEER_OUT and not nxt.reduce \
        and nxt.src == a.src and nxt.src_off == a.src_off and nxt.n == a.n
