"""Rewrites of direct plans (peers read each other's own buffers by cross-memory attach) in
which a rank writes into a peer's output instead of the peer reading it: where a core would
otherwise sit idle (`push_split`: an in-place broadcast root; `push_from_idle`: a gather's
non-root), or where the data is in the writer's cache anyway (`push_results`: a reduced
range; `push_copies`: a block just copied), which saves the reader a pass over memory; or
where both ranks read a block of each other (`share_transfers`), so that the one done first
takes over part of the other's.

Each takes and returns per-rank lists of `actions.Op` (the lists unchanged when the rewrite
does not apply). Dependencies are references, so a rewrite only says what an op it removes
or replaces now stands for; `actions.lower` numbers them once at the end.
"""
from __future__ import annotations

from typing import Sequence

from ..errors import ScheduleError
from .actions import (IN, OUT, PEER_IN, PEER_OUT, Action, Entry, Loc, Op, fused_push, lower,
                      resolve)

Ops = list[list[Op]]  # per rank: its op list
Span = tuple[int, int]  # elements of a rank's logical buffer: (lo, hi), or (start, n)
RankSpans = Sequence["Span | None"]  # per rank: its input (or output) range, None: it has none
Ranges = tuple[RankSpans, RankSpans]  # (input ranges, output ranges)


def push_results(acts: Ops, in_rng: RankSpans, out_rng: RankSpans) -> Ops:
    """On 2 ranks, a rank that reduces a final output range the peer then reads (the second
    half of two_shot) writes it into the peer's output itself, slice by slice while the slice
    is still in its cache (the runtime fuses the reduction and the write), instead of the
    peer reading it from memory later: one pass over memory less, and no rank waits for the
    other's reduction to finish before moving data.

    The peer's read becomes a wait for the write. The write may start as soon as the peer
    has entered the call if nothing the peer does before that read touches the range (its
    input and output may be one buffer, so both count); otherwise the plan is left as it is.
    """
    rng: Ranges = (in_rng, out_rng)
    fuse: dict[Op, Op] = {}  # writer op -> reader op
    for q, row in enumerate(acts):
        for j, b in enumerate(row):
            if b.reduce or b.src != PEER_OUT or b.dst != OUT or not b.n:
                continue
            a = _latest_dep(b, b.peer, acts)
            if a is None or not (a.reduce and a.dst == OUT and a.dst_off == b.src_off
                                 and a.n == b.n and a.src.is_private and a.peer == q):
                continue
            span = _logical(*rng, OUT, q, b.dst_off, b.n)
            if any(_touches(e, span, rng, q) for e in row[:j]):
                continue
            if any(ref.rank != b.peer for ref in b.deps):
                continue
            fuse[a] = b
    if not fuse:
        return acts
    for a, b in fuse.items():
        push = Op(rank=a.rank, src=OUT, peer=b.rank, src_off=a.dst_off, dst=PEER_OUT,
                  dst_off=b.dst_off, n=a.n, cur=OUT, deps=[Entry(b.rank)])
        row = acts[a.rank]
        row.insert(_index(row, a) + 1, push)
        a.stands_for = push  # waiting for the reduction now means for its push too
        wait = Op.wait(b.rank, b.peer, [push])  # the read, now done by the writer
        row = acts[b.rank]
        row[_index(row, b)] = wait
        b.stands_for = wait
    return acts


def push_from_idle(acts: Ops, in_rng: RankSpans, out_rng: RankSpans) -> Ops:
    """On 2 ranks, a rank with no data to move of its own (a gather's non-root) writes what
    the peer would read of its input into the peer's output itself, while the peer makes its
    own copies: both cores copy instead of one (2-rank gather out of place, medians of 3
    paired rounds: 1 MiB 48 -> 27 us, 4 MiB 426 -> 162, MPICH 357). The peer's read becomes
    a wait for the write, placed where the peer first needs the range (its first later op
    touching it, or the end), so the peer's own copies run meanwhile; the write may start
    once the peer has entered the call, where nothing the peer does before that read
    touches the range."""
    rng: Ranges = (in_rng, out_rng)
    idle = [all(not op.n for op in row) for row in acts]
    for r, row in enumerate(acts):
        for b in [b for b in row if not b.reduce and b.src == PEER_IN and b.dst == OUT and b.n
                  and idle[b.peer] and all(isinstance(ref, Entry) and ref.rank == b.peer
                                           for ref in b.deps)]:
            q, j = b.peer, _index(row, b)
            span = _logical(*rng, OUT, r, b.dst_off, b.n)
            if any(_touches(e, span, rng, r) for e in row[:j]):
                continue
            push = Op(rank=q, src=IN, peer=r, src_off=b.src_off, dst=PEER_OUT,
                      dst_off=b.dst_off, n=b.n, cur=IN, deps=[Entry(r)])
            acts[q].insert(0, push)
            wait = Op.wait(r, q, [push])
            row.remove(b)
            later = next((i for i in range(j, len(row)) if _touches(row[i], span, rng, r)),
                         len(row))
            row.insert(later, wait)
            b.stands_for = wait
    return acts


def push_copies(acts: Ops, in_rng: RankSpans, out_rng: RankSpans) -> Ops:
    """On 2 ranks, a range that rank r copies locally into its output (`out[x] = in[y]`) and
    that the peer q then pulls from the same source (`out[z] = r.in[y]`, all-gather's own
    block) is written into q by r right after the local copy, piece by piece while the piece
    is still in r's cache (the runtime fuses the copy and the write, see `fused_push`; the
    copy streams past the cache, so the piece is written to q from the source): the pull's
    second pass over r's input goes away. Only where q writes into r too (an all-gather's two
    own blocks): where q has no such copy of its own (a broadcast's non-root), it would sit
    idle while r copied twice, so q keeps its pull and both cores copy at once (2-rank
    broadcast out of place, 1 MiB: 175 us pushed, 70 us pulled).

    q's pull becomes a wait for the write, placed where q first needs the range (its first
    later action touching it, or the end), so neither rank waits on the other before its own
    copy. The write may start once q has entered the call if nothing q does before the wait
    touches the range; r must not change the source between the pull's dependency and its
    copy. If the new lists could deadlock the plan is left as it is.
    """
    rng: Ranges = (in_rng, out_rng)
    pairs = _copy_pull_pairs(acts, rng)
    pushers = {a.rank for a in pairs}
    pairs = {a: b for a, b in pairs.items() if b.rank in pushers}
    taken = {id(b) for b in pairs.values()}
    # id(pull) -> the op of q its wait goes before (None: the end)
    wait_at: dict[int, Op | None] = {}
    for a, b in list(pairs.items()):
        q, row = b.rank, acts[b.rank]
        j = _index(row, b)
        span = _logical(*rng, OUT, q, b.dst_off, b.n)
        if any(_touches(e, span, rng, q) for e in row[:j]) or any(
                e.peer == q and e.src.is_private and _overlaps(
                    span, _logical(*rng, IN if e.src == PEER_IN else OUT, q, e.src_off, e.n))
                for e in acts[a.rank]):
            del pairs[a]  # q touches the range first, or r reads it back from q
            continue
        wait_at[id(b)] = next((e for e in row[j + 1:]
                               if id(e) not in taken and _touches(e, span, rng, q)), None)
    if not pairs:
        return acts
    return _reorder(acts, pairs, wait_at)


# A shared transfer is cut into SHARE_PIECES pieces of at least this many bytes (one
# cross-memory call each); smaller blocks are not shared. Below 2 MiB blocks (4-byte
# elements) sharing only adds calls: numpy gives huge pages to arrays from 4 MiB only, and a
# 1 MiB all-to-all ran 2-15% slower shared (same processes, 20-call blocks alternated).
SHARE_MIN_BYTES = 256 << 10
SHARE_PIECES = 8


def share_transfers(acts: Ops, in_rng: RankSpans, out_rng: RankSpans, min_piece: int) -> Ops:
    """On 2 ranks that each read one block of the other's input into their output (the
    all-to-all exchange), both ranks share both transfers: each reads its own from the front,
    piece by piece, and then writes what is left of the peer's from the back (`Action.share`:
    the runtime counts the pieces each side has done, so the two meet wherever they get to).

    Cross-memory attach pins the pages of the *other* process, one by one, and a 2 MiB
    transparent huge page pins as one: how dear a block is depends on how the peer's memory
    is backed (numpy gives arrays from 4 MiB huge pages where they are aligned, so one
    block of a 4 MiB all-to-all may cost a third of the other). A rank whose own block was
    the cheap one then works on the peer's instead of waiting for it. Each rank's last wait
    is for the peer's write, the last that touches this rank's buffers. Transfers of fewer
    than SHARE_PIECES * `min_piece` elements are left alone.
    """
    if len(acts) != 2:
        return acts
    rng: Ranges = (in_rng, out_rng)
    reads = []
    for r, row in enumerate(acts):
        mine = [b for b in row if b.src == PEER_IN and b.dst == OUT and not b.reduce and b.n]
        if len(mine) != 1 or mine[0].n < SHARE_PIECES * min_piece \
                or any(not isinstance(ref, Entry) for ref in mine[0].deps):
            return acts
        b = mine[0]
        # the peer writes r's output range while r runs its other ops, and reads the source
        # range of its own input while r reads it: no other op may touch either
        span = _logical(*rng, OUT, r, b.dst_off, b.n)
        src = _logical(*rng, IN, 1 - r, b.src_off, b.n)
        if any(e is not b and _touches(e, span, rng, r) for e in row) or any(
                _overlaps(src, _logical(*rng, e.dst, 1 - r, e.dst_off, e.n))
                for e in acts[1 - r]):
            return acts
        reads.append(b)
    for b in reads:
        b.share = -(-b.n // SHARE_PIECES)
    for r, row in enumerate(acts):
        theirs = reads[1 - r]
        write = Op(rank=r, src=IN, peer=1 - r, src_off=theirs.src_off, dst=PEER_OUT,
                   dst_off=theirs.dst_off, n=theirs.n, cur=IN, deps=[Entry(1 - r)],
                   share=theirs.share)
        row.insert(_index(row, reads[r]) + 1, write)
        acts[1 - r].append(Op.wait(1 - r, r, [write]))
    return acts


def _copy_pull_pairs(acts: Ops, rng: Ranges) -> dict[Op, Op]:
    """{r's local copy: q's pull of the same source} (insertion order: q, then j)."""
    pairs: dict[Op, Op] = {}
    for row in acts:
        for b in row:
            if b.reduce or not b.src.is_private or b.dst != OUT or not b.n \
                    or any(ref.rank != b.peer for ref in b.deps):
                continue
            r = b.peer
            dep = _latest_dep(b, r, acts)
            k = 0 if dep is None else _index(acts[r], dep) + 1
            sloc = IN if b.src == PEER_IN else OUT
            src = _logical(*rng, sloc, r, b.src_off, b.n)
            for i, a in enumerate(acts[r]):
                if i < k or a in pairs:
                    continue
                if not a.reduce and a.src == sloc and a.src_off == b.src_off and a.n == b.n \
                        and a.dst == OUT:
                    if all(not _overlaps(src, _logical(*rng, e.dst, r, e.dst_off, e.n))
                           for e in acts[r][k:i]):
                        pairs[a] = b
                    break
    return pairs


def _reorder(acts: Ops, pairs: dict[Op, Op], wait_at: dict[int, Op | None]) -> Ops:
    """The new lists: each paired copy followed by its push; each pull gone, a wait for the
    push in its place (before `wait_at`'s op); undone if the result could deadlock."""
    pushes = {id(b): Op(rank=a.rank, src=a.src, peer=b.rank, src_off=a.src_off, dst=PEER_OUT,
                        dst_off=b.dst_off, n=a.n, cur=a.src, deps=[Entry(b.rank)])
              for a, b in pairs.items()}
    pulls = {id(b): b for b in pairs.values()}
    out: Ops = []
    forwarded: list[Op] = []
    for r, row in enumerate(acts):
        new: list[Op] = []
        waits: dict[int | None, list[Op]] = {}  # id(op) the waits go before (None: the end)
        last: Op | Entry = Entry(r)
        for b_id, before in wait_at.items():
            if pulls[b_id].rank == r:
                waits.setdefault(None if before is None else id(before), []).append(pulls[b_id])
        for op in row:
            new += [Op.wait(b.rank, b.peer, [pushes[id(b)]]) for b in waits.get(id(op), ())]
            if id(op) in pulls:  # a wait on it means: q's other actions so far
                op.stands_for = last
                forwarded.append(op)
                continue
            new.append(op)
            last = op
            if op in pairs:
                new.append(pushes[id(pairs[op])])
        new += [Op.wait(b.rank, b.peer, [pushes[id(b)]]) for b in waits.get(None, ())]
        out.append(new)
    if completes(lower(out)):
        return out
    for op in forwarded:
        op.stands_for = None
    return acts


def completes(acts: Sequence[Sequence[Action]]) -> bool:
    """Do these (lowered) action lists run to the end? (A local copy followed by a push into
    the peer runs as one step, waiting for both dependency sets first, as the runtime fuses
    them.)"""
    done = [0] * len(acts)
    progress = True
    while progress:
        progress = False
        for r, row in enumerate(acts):
            while done[r] < len(row):
                a = row[done[r]]
                step, deps = 1, list(a.deps)
                nxt = row[done[r] + 1] if done[r] + 1 < len(row) else None
                if nxt is not None and fused_push(a, nxt):
                    step, deps = 2, deps + list(nxt.deps)
                if any(done[q] < k for q, k in deps if q != r):
                    break
                done[r] += step
                progress = True
    return all(done[r] == len(row) for r, row in enumerate(acts))


def push_split(acts: Ops, s: int, in_rng: Span | None, out_rng: Span | None) -> Ops:
    """Let an idle in-place rank `s` push part of what its peers pull from it.

    A peer's copy `out[dlo:+n] = s.in[slo:+n]` becomes: the peer pulls the first part, `s`
    writes the rest into the peer's output (a PEER_OUT destination: a cross-memory write),
    and the peer waits for that write before going on (a zero-length action whose only
    content is the dependency). With k readers `s` takes the share 1/(k+1) of each transfer,
    so it moves about as many bytes as each reader. The pushes come first in `s`'s list.
    """
    if in_rng is None or in_rng != out_rng:
        return acts
    if any(a.n > 0 and not (a.src == IN and a.dst == OUT and a.src_off == a.dst_off
                            and not a.reduce) for a in acts[s]):
        return acts  # not idle: its own work already overlaps the peers' reads
    pulls = sorted(((i, d) for d in range(len(acts)) if d != s
                    for i, a in enumerate(acts[d])
                    if not a.reduce and a.peer == s and a.src.is_private
                    and a.dst == OUT and a.n > 1))
    if not pulls:
        return acts
    # s moves as many bytes as each reader: 1/(k+1) of every transfer to its k readers
    share = 1.0 / (len({d for _, d in pulls}) + 1)
    pushes = []
    originals = [(acts[d][i], d, i) for i, d in pulls]
    for a, d, _ in originals:
        give = max(1, int(a.n * share))
        keep = a.n - give
        loc = IN if a.src == PEER_IN else OUT
        row = acts[d]
        at = _index(row, a)
        # s writes the tail once d has started this action (so d's earlier work, which
        # might touch that memory, is done)
        started = row[at - 1] if at else Entry(d)
        push = Op(rank=s, src=loc, peer=d, src_off=a.src_off + keep, dst=PEER_OUT,
                  dst_off=a.dst_off + keep, n=give, cur=loc,
                  deps=[ref for ref in a.deps if ref.rank != s] + [started])
        pushes.append(push)
        kept = a.copy(peer=s, dst=OUT, n=keep)
        wait = Op.wait(d, s, [push])
        row[at:at + 1] = [kept, wait]
        a.stands_for = wait
    acts[s][:0] = pushes
    return acts


def _index(row: list[Op], op: Op) -> int:
    return next(i for i, e in enumerate(row) if e is op)


def _latest_dep(b: Op, r: int, acts: Ops) -> Op | None:
    """The latest op of rank r that `b` waits for (None: none, or only r's entry)."""
    best, at = None, -1
    for ref in b.deps:
        ref = resolve(ref)
        if isinstance(ref, Op) and ref.rank == r:
            i = _index(acts[r], ref)
            if i > at:
                best, at = ref, i
    return best


def _logical(in_rng: RankSpans, out_rng: RankSpans, loc: Loc, r: int, off: int,
             n: int) -> Span | None:
    """The element range (start, n) an IN/OUT operand covers in rank r's logical buffer
    (input and output may be one buffer, so both map there); None for anything else."""
    if loc not in (IN, OUT):
        return None
    have = (in_rng if loc == IN else out_rng)[r]
    if have is None:
        what = "input" if loc == IN else "output"
        raise ScheduleError(f"plan: an op of rank {r} uses its {what}, but rank {r} has no "
                            f"{what} in this collective")
    return (have[0] + off, n)


def _overlaps(a: Span | None, b: Span | None) -> bool:
    return a is not None and b is not None and a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _touches(e: Op, span: Span | None, rng: Ranges, q: int) -> bool:
    """Does op `e` of rank q read or write `span` of q's logical buffer?"""
    return (_overlaps(span, _logical(*rng, e.dst, q, e.dst_off, e.n))
            or _overlaps(span, _logical(*rng, e.src, q, e.src_off, e.n))
            or (e.reduce and _overlaps(span, _logical(*rng, e.cur, q, e.cur_off, e.n))))
