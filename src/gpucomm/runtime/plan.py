"""Compile a Schedule into one ordered action list per rank, for a *pull* transport.

A pull transport lets each rank execute the ops whose destination it is, reading the source
chunk straight out of the peer's shared buffer. So every rank writes only its own buffer, runs
its actions in order, and publishes one counter: how many of its actions are done. The data
flow dependencies of the schedule then become "peer q has done its first k actions":

- read after write: an op reading (q, chunk) waits for q's action that last wrote the chunk;
- write after read: an op overwriting (r, chunk) waits for every peer that read the chunk's old
  value to have finished that read.

Where the data lives is planned too, to move as few bytes as possible: an input chunk is
copied into shared memory only if a peer reads it before the owner overwrites it; a first
reduction reads the user's input directly; a chunk's final value goes straight into the
user's output unless a peer still reads it; large chunks are cut into slices so consecutive
actions pipeline (a peer starts on slice 0 while slice 1 is still being written) and the
copy-out of a slice happens while it is still in cache.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schedule import Schedule

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


@dataclass(frozen=True)
class Plan:
    schedule_key: tuple
    nranks: int
    block_count: int
    shm_elems: int  # size of each rank's shared logical buffer, in elements
    actions: tuple  # per rank: tuple of Action.as_tuple() rows
    peers_read: tuple  # per rank: frozenset of peers whose buffers it reads
    direct: bool = False  # peers read owners' own buffers (cross-memory), nothing staged

    def describe(self, rank: int) -> str:
        lines = []
        for i, (red, sl, sr, slo, dl, dlo, n, cl, clo, deps) in enumerate(self.actions[rank]):
            src = {PEER: f"r{sr}.shm", PEER_IN: f"r{sr}.in", PEER_OUT: f"r{sr}.out"}.get(
                sl, LOC_NAMES[sl])
            dst = f"r{sr}.out" if dl == PEER_OUT else LOC_NAMES[dl]
            if dl == PEER_OUT:
                what = f"{dst}[{dlo}:+{n}] = {LOC_NAMES[sl]}[{slo}:+{n}]"
            elif red:
                what = f"{dst}[{dlo}:+{n}] = {LOC_NAMES[cl]}[{clo}] op {src}[{slo}]"
            else:
                what = f"{dst}[{dlo}:+{n}] = {src}[{slo}:+{n}]"
            dep = ", ".join(f"r{q}>={k}" for q, k in deps)
            lines.append(f"{i}: {what}" + (f"  after {dep}" if dep else ""))
        return "\n".join(lines)


def schedule_key(s: Schedule) -> tuple:
    return (s.collective.name, s.algorithm, s.nranks, s.root, s.params, s.chunks_per_block,
            s.scratch_blocks)


def compile_plan(schedule: Schedule, block_count: int, slice_elems: int = 1 << 16,
                 direct: bool = False, push_root: int | None = None,
                 push: bool = True) -> Plan:
    """The per-rank action lists of `schedule` for blocks of `block_count` elements.

    `direct`: peers read a value wherever its owner keeps it, its private input and output
    included (the transport copies those with cross-memory attach), so nothing is staged in
    shared memory for peers; a rank then ends only after every peer finished reading its
    buffers.

    `push_root` (with `direct`): that rank calls in place (its input is its output), so its
    local input-to-output copies are no-ops; if it then has nothing else to do (the root of a
    broadcast), it *writes* a share of every chunk that peers read from it into their outputs
    while they read the rest: two cores copy instead of one (see `_push_split`). On 2 ranks a
    reduced range the peer reads is written into the peer by its reducer (`_push_results`).
    `push=False` turns both off (plain pull plans).

    >>> from gpucomm.algorithms import build
    >>> plan = compile_plan(build("all_reduce", "ring", 2), 4)
    >>> len(plan.actions[0]) > 0
    True
    """
    coll, p, root = schedule.collective, schedule.nranks, schedule.root
    bounds = schedule.chunk_bounds(block_count).tolist()
    nchunks = len(bounds) - 1
    steps = [list(zip(*(c.tolist() for c in st.columns()[:6]))) for st in schedule.steps()]

    in_rng = [_elem_range(coll.inputs(r, p, root), block_count) for r in range(p)]
    out_rng = [_elem_range(coll.outputs(r, p, root), block_count) for r in range(p)]

    # Pass 1: which value versions of each (rank, chunk) a peer reads; the final version.
    ver = np.zeros((p, nchunks), dtype=np.int64)
    peer_read = set()  # (rank, chunk, version)
    for ops in steps:
        for s, d, sc, dc, n, _ in ops:
            for j in range(n):
                if s != d:
                    peer_read.add((s, sc + j, int(ver[s, sc + j])))
            for j in range(n):
                ver[d, dc + j] += 1
    final = ver.copy()

    # Pass 2: actions. Chunks are cut into slices of at most `slice_elems` elements.
    def slices(c):
        lo, hi = bounds[c], bounds[c + 1]
        k = max(1, -(-(hi - lo) // slice_elems))
        cuts = [lo + (hi - lo) * i // k for i in range(k + 1)]
        return list(zip(cuts[:-1], cuts[1:]))

    chunk_slices = [slices(c) for c in range(nchunks)]
    acts = [[] for _ in range(p)]
    # per (rank, chunk, slice index): current location and last shm writer (action count)
    loc = [[[IN if _inside(in_rng[r], bounds[c]) else SHM for _ in chunk_slices[c]]
            for c in range(nchunks)] for r in range(p)]
    writer = [[[0] * len(chunk_slices[c]) for c in range(nchunks)] for r in range(p)]
    readers = [[[[] for _ in chunk_slices[c]] for c in range(nchunks)] for r in range(p)]
    cur_ver = np.zeros((p, nchunks), dtype=np.int64)

    def off(where, r, lo):
        if where == IN:
            return lo - in_rng[r][0]
        if where == OUT:
            return lo - out_rng[r][0]
        return lo

    # Copy-ins: input chunks a peer reads before their owner overwrites them, in the order
    # peers first need them.
    first_need, copied_out = {}, set()
    user_readers = [dict() for _ in range(p)]  # owner -> {peer: its last action reading us}
    for si, ops in enumerate(steps):
        for s, d, sc, dc, n, _ in ops:
            for j in range(n):
                key = (s, sc + j)
                if s != d and (s, sc + j, 0) in peer_read and key not in first_need:
                    first_need[key] = si
    for (r, c), _ in sorted(first_need.items(), key=lambda kv: (kv[1], kv[0][1])):
        if direct:
            break
        if not _inside(in_rng[r], bounds[c]):
            continue  # a don't-care value: nothing to copy
        out_too = final[r, c] == 0 and _inside(out_rng[r], bounds[c])
        for k, (lo, hi) in enumerate(chunk_slices[c]):
            acts[r].append(Action(False, IN, r, off(IN, r, lo), SHM, lo, hi - lo, SHM, lo, ()))
            loc[r][c][k] = SHM
            writer[r][c][k] = len(acts[r])
            if out_too:  # an unchanged output chunk: copy it out while the input is cached
                acts[r].append(Action(False, IN, r, off(IN, r, lo), OUT, off(OUT, r, lo),
                                      hi - lo, OUT, 0, ()))
        if out_too:
            copied_out.add((r, c))

    for ops in steps:
        for s, d, sc, dc, n, red in ops:
            for j in range(n):
                cs, cd = sc + j, dc + j
                v = int(cur_ver[d, cd]) + 1
                last = v == final[d, cd]
                if not (last and _inside(out_rng[d], bounds[cd])):
                    target = SHM
                elif (d, cd, v) in peer_read and not direct:
                    target = SHM
                else:
                    target = OUT
                for k, ((slo, shi), (dlo, _)) in enumerate(zip(chunk_slices[cs],
                                                               chunk_slices[cd])):
                    deps = {}
                    if s != d:
                        src_loc = PEER_LOC[loc[s][cs][k]]
                        src_off = off(loc[s][cs][k], s, slo)
                        deps[s] = max(deps.get(s, 0), writer[s][cs][k])
                        readers[s][cs][k].append((d, len(acts[d]) + 1))
                        if src_loc != PEER:
                            user_readers[s][d] = len(acts[d]) + 1
                    else:
                        src_loc = loc[d][cs][k]
                        src_off = off(src_loc, d, slo)
                    for q, cnt in readers[d][cd][k]:
                        if q != d:
                            deps[q] = max(deps.get(q, 0), cnt)
                    readers[d][cd][k] = []
                    cur = loc[d][cd][k]
                    acts[d].append(Action(bool(red), src_loc, s, src_off, target,
                                          off(target, d, dlo), shi - slo, cur, off(cur, d, dlo),
                                          tuple(sorted(deps.items()))))
                    loc[d][cd][k] = target
                    writer[d][cd][k] = len(acts[d])
                    if last and target == SHM and _inside(out_rng[d], bounds[cd]):
                        # final value that a peer still reads: copy it out while it is hot
                        acts[d].append(Action(False, SHM, d, dlo, OUT, off(OUT, d, dlo),
                                              shi - slo, OUT, 0, ()))
                cur_ver[d, cd] = v

    # Output chunks that no op wrote keep their input (or copied-in) value.
    for r in range(p):
        for c in range(nchunks):
            if final[r, c] or not _inside(out_rng[r], bounds[c]) or (r, c) in copied_out:
                continue
            for k, (lo, hi) in enumerate(chunk_slices[c]):
                where = loc[r][c][k]
                acts[r].append(Action(False, where, r, off(where, r, lo), OUT, off(OUT, r, lo),
                                      hi - lo, OUT, 0, ()))

    for r in range(p):  # a peer still reading our user buffers: they stay ours till it ends
        if user_readers[r]:
            acts[r].append(Action(False, SHM, r, 0, SHM, 0, 0, SHM, 0,
                                  tuple(sorted(user_readers[r].items()))))

    if direct and push and push_root is not None:
        acts = _push_split(acts, push_root, in_rng[push_root], out_rng[push_root])
    if direct and push and p == 2:
        acts = _push_results(acts, in_rng, out_rng)
        acts = _push_copies(acts, in_rng, out_rng)
    rows = tuple(tuple(a.as_tuple() for a in acts[r] if a.n > 0 or a.deps) for r in range(p))
    # dropping empty actions shifts indices: recompile indices only when something was dropped
    if any(len(rows[r]) != len(acts[r]) for r in range(p)):
        rows = _drop_empty(acts)
    peers = tuple(frozenset(a[2] for a in rows[r] if a[1] in (PEER, PEER_IN, PEER_OUT))
                  for r in range(p))
    return Plan(schedule_key(schedule), p, block_count, bounds[-1], rows, peers, direct)


def _push_results(acts, in_rng, out_rng) -> list:
    """On 2 ranks, a rank that reduces a final output range the peer then reads (the second
    half of two_shot) writes it into the peer's output itself, slice by slice while the slice
    is still in its cache (the runtime fuses the reduction and the write), instead of the
    peer reading it from memory later: one pass over memory less, and no rank waits for the
    other's reduction to finish before moving data.

    The peer's read becomes a wait for the write. The write may start as soon as the peer
    has entered the call if nothing the peer does before that read touches the range (its
    input and output may be one buffer, so both count); otherwise the plan is left as it is.
    """
    p, rng = len(acts), (in_rng, out_rng)

    fuse = {}  # (writer rank, writer index) -> (reader rank, reader index)
    for q in range(p):
        for j, b in enumerate(acts[q]):
            if b.reduce or b.src_loc != PEER_OUT or b.dst_loc != OUT or not b.n:
                continue
            r = b.src_rank
            k = dict(b.deps).get(r, 0)
            if not k:
                continue
            a = acts[r][k - 1]
            if not (a.reduce and a.dst_loc == OUT and a.dlo == b.slo and a.n == b.n
                    and a.src_loc in (PEER_IN, PEER_OUT) and a.src_rank == q):
                continue
            span = _logical(*rng, OUT, q, b.dlo, b.n)
            if any(_touches(e, span, rng, q) for e in acts[q][:j]):
                continue
            if any(q2 != r for q2, _ in b.deps):
                continue
            fuse[(r, k - 1)] = (q, j)
    if not fuse:
        return acts
    newcount = []
    for r in range(p):
        row, cnt = [0], 0
        for i in range(len(acts[r])):
            cnt += 1 + ((r, i) in fuse)
            row.append(cnt)
        newcount.append(row)
    reader_wait = {v: newcount[k[0]][k[1] + 1] for k, v in fuse.items()}  # after the write
    out = [[] for _ in acts]
    for r in range(p):
        for i, a in enumerate(acts[r]):
            deps = tuple((q, newcount[q][k]) for q, k in a.deps)
            w = reader_wait.get((r, i))
            if w is not None:  # the read, now done by the writer: wait for it
                out[r].append(Action(False, SHM, a.src_rank, 0, SHM, 0, 0, SHM, 0,
                                     ((a.src_rank, w),)))
                continue
            out[r].append(Action(a.reduce, a.src_loc, a.src_rank, a.slo, a.dst_loc, a.dlo,
                                 a.n, a.cur_loc, a.clo, deps))
            if (r, i) in fuse:
                q, j = fuse[(r, i)]
                out[r].append(Action(False, OUT, q, a.dlo, PEER_OUT, acts[q][j].dlo, a.n, OUT,
                                     0, ((q, 0),)))
    return out


def _logical(in_rng, out_rng, loc, r, off, n):
    """The element range an IN/OUT operand covers in rank r's logical buffer (input and
    output may be one buffer, so both map there); None for anything else."""
    if loc == IN:
        return (in_rng[r][0] + off, n)
    if loc == OUT:
        return (out_rng[r][0] + off, n)
    return None


def _overlaps(a, b) -> bool:
    return a is not None and b is not None and a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _touches(e, span, rng, q) -> bool:
    """Does action `e` of rank q read or write `span` of q's logical buffer?"""
    return (_overlaps(span, _logical(*rng, e.dst_loc, q, e.dlo, e.n))
            or _overlaps(span, _logical(*rng, e.src_loc, q, e.slo, e.n))
            or (e.reduce and _overlaps(span, _logical(*rng, e.cur_loc, q, e.clo, e.n))))


def _push_copies(acts, in_rng, out_rng) -> list:
    """On 2 ranks, a range that rank r copies locally into its output (`out[x] = in[y]`) and
    that the peer q then pulls from the same source (`out[z] = r.in[y]`, all-gather's own
    block) is written into q by r right after the local copy, piece by piece while the piece
    is still in r's cache (the runtime fuses the copy and the write, see `fused_push`; the
    copy streams past the cache, so the piece is written to q from the source): the pull's
    second pass over r's input goes away.

    q's pull becomes a wait for the write, placed where q first needs the range (its first
    later action touching it, or the end), so neither rank waits on the other before its own
    copy. The write may start once q has entered the call if nothing q does before the wait
    touches the range; r must not change the source between the pull's dependency and its
    copy. Dependencies are renumbered; if the new lists could deadlock the plan is left as
    it is.
    """
    p, rng = len(acts), (in_rng, out_rng)
    pairs = {}  # (r, i) -> (q, j): r's local copy i feeds q's pull j
    taken = set()
    for q in range(p):
        for j, b in enumerate(acts[q]):
            if b.reduce or b.src_loc not in (PEER_IN, PEER_OUT) or b.dst_loc != OUT \
                    or not b.n or any(q2 != b.src_rank for q2, _ in b.deps):
                continue
            r = b.src_rank
            k = dict(b.deps).get(r, 0)
            sloc = IN if b.src_loc == PEER_IN else OUT
            src = _logical(*rng, sloc, r, b.slo, b.n)
            for i, a in enumerate(acts[r]):
                if i < k or (r, i) in pairs:
                    continue
                if not a.reduce and a.src_loc == sloc and a.slo == b.slo and a.n == b.n \
                        and a.dst_loc == OUT:
                    if all(not _overlaps(src, _logical(*rng, e.dst_loc, r, e.dlo, e.n))
                           for e in acts[r][k:i]):
                        pairs[(r, i)] = (q, j)
                        taken.add((q, j))
                    break
    if not pairs:
        return acts
    # where each pull's wait goes: before q's first later action touching the range
    wait_at = {}  # (q, j) -> original index it precedes (len = the end)
    for (r, i), (q, j) in list(pairs.items()):
        b = acts[q][j]
        span = _logical(*rng, OUT, q, b.dlo, b.n)
        if any(_touches(e, span, rng, q) for e in acts[q][:j]) or any(
                e.src_rank == q and e.src_loc in (PEER_IN, PEER_OUT) and _overlaps(
                    span, _logical(*rng, IN if e.src_loc == PEER_IN else OUT, q, e.slo, e.n))
                for e in acts[r]):
            del pairs[(r, i)]  # q touches the range first, or r reads it back from q
            continue
        w = next((t for t in range(j + 1, len(acts[q]))
                  if (q, t) not in taken and _touches(acts[q][t], span, rng, q)), len(acts[q]))
        wait_at[(q, j)] = w
    if not pairs:
        return acts
    taken = set(wait_at)
    # new order: per rank, a list of ("act", i) / ("push", i) / ("wait", j) items
    order = []
    for r in range(p):
        row = []
        for t in range(len(acts[r]) + 1):
            row += [("wait", j) for (q, j), w in sorted(wait_at.items()) if q == r and w == t]
            if t == len(acts[r]):
                break
            if (r, t) in taken:
                continue
            row.append(("act", t))
            if (r, t) in pairs:
                row.append(("push", t))
        order.append(row)
    pos = [{} for _ in range(p)]  # original index -> new position (a pull: its wait's)
    push_pos = {}
    for r in range(p):
        for n_, (kind, t) in enumerate(order[r]):
            if kind == "push":
                push_pos[(r, t)] = n_
            else:
                pos[r][t] = n_
    # a dependency on a pull that is now r's own push means r has the data already: it
    # counts only q's other actions
    newcount = []
    for r in range(p):
        row, m = [0], 0
        for t in range(len(acts[r])):
            if (r, t) not in taken:
                m = max(m, pos[r][t] + 1)
            row.append(m)
        newcount.append(row)
    wait_for = {v: (k[0], push_pos[k] + 1) for k, v in pairs.items()}
    out = []
    for r in range(p):
        row = []
        for kind, t in order[r]:
            a = acts[r][t]
            if kind == "wait":
                row.append(Action(False, SHM, a.src_rank, 0, SHM, 0, 0, SHM, 0,
                                  (wait_for[(r, t)],)))
            elif kind == "push":
                q, j = pairs[(r, t)]
                row.append(Action(False, a.src_loc, q, a.slo, PEER_OUT, acts[q][j].dlo, a.n,
                                  a.src_loc, 0, ((q, 0),)))
            else:
                row.append(Action(a.reduce, a.src_loc, a.src_rank, a.slo, a.dst_loc, a.dlo,
                                  a.n, a.cur_loc, a.clo,
                                  tuple((q, newcount[q][k]) for q, k in a.deps)))
        out.append(row)
    return out if _completes(out) else acts


def fused_push(a: tuple, nxt: tuple) -> bool:
    """Is action row `nxt` the push of what local copy `a` just copied (`_push_copies`)?
    The runtime runs the two as one: each piece is copied, then written to the peer while
    it is in cache. (Rows are `Action.as_tuple()`: reduce, src_loc, src_rank, slo, dst_loc,
    dlo, n, ...)"""
    return nxt is not None and not a[0] and a[1] in (IN, OUT, SHM) and a[4] in (IN, OUT, SHM) \
        and nxt[4] == PEER_OUT and not nxt[0] and nxt[1] == a[1] and nxt[3] == a[3] \
        and nxt[6] == a[6]


def _completes(acts) -> bool:
    """Do these action lists run to the end? (A local copy followed by a push into the peer
    runs as one step, waiting for both dependency sets first, as the runtime fuses them.)"""
    done = [0] * len(acts)
    progress = True
    while progress:
        progress = False
        for r, row in enumerate(acts):
            while done[r] < len(row):
                a = row[done[r]]
                step, deps = 1, list(a.deps)
                nxt = row[done[r] + 1] if done[r] + 1 < len(row) else None
                if nxt is not None and fused_push(a.as_tuple(), nxt.as_tuple()):
                    step, deps = 2, deps + list(nxt.deps)
                if any(done[q] < k for q, k in deps if q != r):
                    break
                done[r] += step
                progress = True
    return all(done[r] == len(row) for r, row in enumerate(acts))


def _push_split(acts, s, in_rng, out_rng) -> list:
    """Let an idle in-place rank `s` push part of what its peers pull from it.

    A peer's copy `out[dlo:+n] = s.in[slo:+n]` becomes: the peer pulls the first part, `s`
    writes the rest into the peer's output (a PEER_OUT destination: a cross-memory write),
    and the peer waits for that write before going on (a zero-length action whose only
    content is the dependency). With k readers `s` takes the share 1/(k+1) of each transfer,
    so it moves about as many bytes as each reader. Dependencies are renumbered: the pushes come
    first in `s`'s list, and every split adds one action to its reader's list.
    """
    if in_rng is None or in_rng != out_rng:
        return acts
    if any(a.n > 0 and not (a.src_loc == IN and a.dst_loc == OUT and a.slo == a.dlo
                            and not a.reduce) for a in acts[s]):
        return acts  # not idle: its own work already overlaps the peers' reads
    pulls = sorted((i, d) for d in range(len(acts)) if d != s for i, a in enumerate(acts[d])
                   if not a.reduce and a.src_rank == s and a.src_loc in (PEER_IN, PEER_OUT)
                   and a.dst_loc == OUT and a.n > 1)
    if not pulls:
        return acts
    # s moves as many bytes as each reader: 1/(k+1) of every transfer to its k readers
    share, base = 1.0 / (len({d for _, d in pulls}) + 1), len(pulls)
    push_no = {(d, i): j for j, (i, d) in enumerate(pulls)}
    newcount = []  # rank r's new action count after its first k original actions
    for r in range(len(acts)):
        row, cnt = [0], 0
        for i in range(len(acts[r])):
            cnt += 1 + ((r, i) in push_no)
            row.append(cnt)
        newcount.append(row)

    def remap(deps):
        return tuple((q, (k + base if k else 0) if q == s else newcount[q][k]) for q, k in deps)

    out = [[] for _ in acts]
    pushes = [None] * base
    for d in range(len(acts)):
        if d == s:
            continue
        for i, a in enumerate(acts[d]):
            deps = remap(a.deps)
            j = push_no.get((d, i))
            if j is None:
                out[d].append(Action(a.reduce, a.src_loc, a.src_rank, a.slo, a.dst_loc, a.dlo,
                                     a.n, a.cur_loc, a.clo, deps))
                continue
            give = max(1, int(a.n * share))
            keep = a.n - give
            out[d].append(Action(False, a.src_loc, s, a.slo, OUT, a.dlo, keep, a.cur_loc,
                                 a.clo, deps))
            out[d].append(Action(False, SHM, s, 0, SHM, 0, 0, SHM, 0, ((s, j + 1),)))
            # s writes the tail once d has started this action (so d's earlier work, which
            # might touch that memory, is done)
            loc = IN if a.src_loc == PEER_IN else OUT
            pdeps = dict(q_k for q_k in deps if q_k[0] != s)
            pdeps[d] = max(pdeps.get(d, 0), newcount[d][i])
            pushes[j] = Action(False, loc, d, a.slo + keep, PEER_OUT, a.dlo + keep, give, loc,
                               0, tuple(sorted(pdeps.items())))
    out[s] = pushes + [Action(a.reduce, a.src_loc, a.src_rank, a.slo, a.dst_loc, a.dlo, a.n,
                              a.cur_loc, a.clo, remap(a.deps)) for a in acts[s]]
    return out


def _drop_empty(acts) -> tuple:
    """Remove zero-length actions without deps, renumbering the dependency counts."""
    keep = [[a.n > 0 or bool(a.deps) for a in acts[r]] for r in range(len(acts))]
    # new count after k original actions = number kept among the first k
    newcount = [np.concatenate([[0], np.cumsum(k)]).tolist() for k in keep]
    rows = []
    for r, lst in enumerate(acts):
        out = []
        for a, kp in zip(lst, keep[r]):
            if not kp:
                continue
            deps = tuple((q, newcount[q][c]) for q, c in a.deps)
            out.append(Action(a.reduce, a.src_loc, a.src_rank, a.slo, a.dst_loc, a.dlo, a.n,
                              a.cur_loc, a.clo, deps).as_tuple())
        rows.append(tuple(out))
    return tuple(rows)


def _elem_range(block_range, block_count):
    if block_range is None:
        return None
    return (block_range[0] * block_count, (block_range[0] + block_range[1]) * block_count)


def _inside(rng, elem) -> bool:
    return rng is not None and rng[0] <= elem < rng[1]
