"""Rewrites of direct plans (peers read each other's own buffers by cross-memory attach) in
which a rank writes into a peer's output instead of the peer reading it: where a core would
otherwise sit idle (`push_split`: an in-place broadcast root), or where the data is in the
writer's cache anyway (`push_results`: a reduced range; `push_copies`: a block just copied),
which saves the reader a pass over memory. Each returns new action lists with the
dependencies renumbered, or the lists unchanged when the rewrite does not apply.
"""
from __future__ import annotations

from .actions import IN, OUT, PEER_IN, PEER_OUT, SHM, Action


def push_results(acts, in_rng, out_rng) -> list:
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


def push_copies(acts, in_rng, out_rng) -> list:
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
    return out if completes(out) else acts


def fused_result_push(a: tuple, nxt: tuple) -> bool:
    """Is action row `nxt` the push of the range that `a` has just reduced from a peer's
    buffer (`push_results`)? The runtime writes each reduced piece on while it is in cache."""
    return nxt is not None and a[0] and a[1] in (PEER_IN, PEER_OUT) and not nxt[0] \
        and nxt[4] == PEER_OUT and nxt[1] == a[4] and nxt[3] == a[5] and nxt[6] == a[6]


def fused_push(a: tuple, nxt: tuple) -> bool:
    """Is action row `nxt` the push of what local copy `a` just copied (`push_copies`)?
    The runtime runs the two as one: each piece is copied, then written to the peer while
    it is in cache. (Rows are `Action.as_tuple()`: reduce, src_loc, src_rank, slo, dst_loc,
    dlo, n, ...)"""
    return nxt is not None and not a[0] and a[1] in (IN, OUT, SHM) and a[4] in (IN, OUT, SHM) \
        and nxt[4] == PEER_OUT and not nxt[0] and nxt[1] == a[1] and nxt[3] == a[3] \
        and nxt[6] == a[6]


def completes(acts) -> bool:
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


def push_split(acts, s, in_rng, out_rng) -> list:
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
