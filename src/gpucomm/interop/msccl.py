"""MSCCL algorithm files (msccl-tools' XML) out of a Schedule, and back in.

The XML (facts from msccl-tools' `ir.py` and its example files): `<algo name proto nchannels
nchunksperloop ngpus coll inplace outofplace minBytes maxBytes>` holds one `<gpu id i_chunks
o_chunks s_chunks>` per rank; a gpu holds thread blocks `<tb id send recv chan>` (at most one
peer it sends to and one it receives from, on one channel), a thread block an ordered list of
`<step s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep>`. Types: s (send), r (recv),
rcs (recv, copy, send on), rrc (recv, reduce into dst), rrs (recv, reduce, send on without
storing), rrcs (recv, reduce, store, send on), cpy and re (local copy / reduce), nop (wait only).
A step waits for step `deps` of thread block `depid` on the same GPU; sends and receives on one
(sender, receiver, channel) connection match in order.

Buffers: `i` and `o` are the collective's input and output (nccl-tests' layouts, collectives.py:
all-gather's input is its rank's block of the output ...), `s` is scratch. An MSCCL chunk is
`1/chunks` of a block, so a gpucomm schedule with `chunks_per_block` c exports chunk for chunk.

Import replays the thread blocks (program order, dependencies, in-order matching) and writes
each transfer as a gpucomm op; scratch chunks are renamed so that data keeps its position
within a block, as gpucomm's chunks require.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict

from ..collectives import get_collective
from ..errors import ConfigError, ScheduleError
from ..inputs import parse_int
from ..limits import MAX_SIZE_BYTES
from ..schedule import Schedule, step

# gpucomm collective <-> MSCCL `coll` attribute, as the executor's parser spells them
# (msccl_parser.cc: reduce, broadcast, allreduce, reducescatter, allgather, send, recv, gather,
# scatter, alltoall, alltoallv). It has no sendrecv: `send` and `recv` are the programs of one
# ncclSend / ncclRecv call, each with one buffer, so a sendrecv schedule is exported as a pair
# of them (msccl_p2p); files gpucomm wrote before with coll="sendrecv" still import.
COLL_NAMES = {"all_reduce": "allreduce", "all_gather": "allgather",
              "reduce_scatter": "reducescatter", "all_to_all": "alltoall",
              "broadcast": "broadcast", "reduce": "reduce", "gather": "gather",
              "scatter": "scatter"}
FROM_MSCCL = {**{v: k for k, v in COLL_NAMES.items()}, "sendrecv": "sendrecv"}
STEP_TYPES = ("s", "r", "rcs", "rrc", "rrs", "rrcs", "cpy", "re", "nop")
_SENDS = {"s", "rcs", "rrs", "rrcs"}
_RECVS = {"r", "rcs", "rrc", "rrs", "rrcs"}
PROTOCOLS = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}

# What MSCCL's executor accepts (Azure/msccl-executor-nccl, src/include/msccl/msccl_struct.h
# and src/misc/msccl/msccl_parser.cc): a step index below MSCCL_MAX_NUM_STEPS per thread block,
# at most MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL thread blocks sending (and as many receiving)
# on one channel, a step's cnt below MSCCL_MAX_COUNT, channel ids up to MAXCHANNELS (32 in the
# NCCL it is built on), offsets in an int16_t, and 1024 XML nodes per rank's parse (its
# `algo`, every `gpu`, and its own `tb` and `step` elements).
MAX_STEPS = 64
MAX_PEERS_PER_CHANNEL = 32
MAX_COUNT = 72
MAX_CHANNELS = 32
MAX_OFFSET = (1 << 15) - 1
MAX_XML_NODES = 1024


class MscclError(ScheduleError):
    """A malformed or unrunnable MSCCL file, naming the element and the problem."""


# ---- layout: gpucomm's logical buffer <-> MSCCL's i / o / s ------------------------------
class _Layout:
    def __init__(self, coll, nranks, root, cpb, outofplace: bool = False):
        self.coll, self.p, self.root, self.c = coll, nranks, root, cpb
        self.nblocks = coll.nblocks(nranks)
        # out of place: a chunk of the output lives in `o` (copied there from `i` first where
        # the input holds it), and input-only chunks the schedule overwrites live in scratch,
        # so the caller's input is only read; rank -> those input-only chunks
        self.outofplace = outofplace
        self.moved: list[set] = [set() for _ in range(nranks)]

    def ranges(self, r):
        return self.coll.inputs(r, self.p, self.root), self.coll.outputs(r, self.p, self.root)

    @property
    def inplace(self) -> bool:
        """NCCL's in-place layouts: each rank's input and output nest (or one is absent)."""
        for r in range(self.p):
            i, o = self.ranges(r)
            if i and o and not (_within(i, o) or _within(o, i)):
                return False
        return True

    def where(self, r, x, scratch_blocks):
        """(buffer, offset) of logical chunk x of rank r."""
        c, b = self.c, x // self.c
        i, o = self.ranges(r)
        inside = lambda rng: rng is not None and rng[0] <= b < rng[0] + rng[1]  # noqa: E731
        if self.outofplace and inside(o):
            return "o", x - o[0] * c
        if self.outofplace and inside(i) and x in self.moved[r]:
            return "s", scratch_blocks * c + x
        if inside(o) and inside(i):
            if i == o or _within(o, i):
                return "i", x - i[0] * c  # all-reduce: the input; reduce-scatter: the bigger
            return "o", x - o[0] * c  # all-gather: the input is its block of the output
        if inside(o):
            return "o", x - o[0] * c
        if inside(i):
            return "i", x - i[0] * c
        if x >= self.nblocks * c:
            return "s", x - self.nblocks * c
        return "s", scratch_blocks * c + x  # a block of the collective this rank only relays

    def logical(self, r, buf, off):
        """Logical chunk of (buffer, offset) on rank r (scratch is mapped by the importer)."""
        i, o = self.ranges(r)
        rng = i if buf == "i" else o
        if rng is None:
            return None
        return rng[0] * self.c + off


def _holds(rng, block) -> bool:
    return rng is not None and rng[0] <= block < rng[0] + rng[1]


def _within(a, b) -> bool:
    return b[0] <= a[0] and a[0] + a[1] <= b[0] + b[1]


# ---- export ----------------------------------------------------------------------------
def to_msccl_xml(schedule: Schedule, *, protocol: str = "simple", name: str | None = None,
                 min_bytes: int = 0, max_bytes: int | None = None, fit: bool = True,
                 outofplace: bool = False) -> str:
    """The schedule as an MSCCL algorithm file: one thread block per (peer, direction, channel)
    plus one for local copies; each step waits on the steps of other thread blocks whose
    chunks it reads or overwrites (data flow), extra waits as `nop` steps before it. With
    `fit`, connections are spread and cut over channels until the executor's limits hold
    (`executor_problems` says what is still over them). With `outofplace` each rank first
    copies its input into the output (and input chunks the schedule overwrites into scratch),
    so the file is right for separate buffers as for NCCL's in-place ones (where the copy is
    onto itself): it says inplace="1" outofplace="1".

        >>> from gpucomm.algorithms import build
        >>> xml = to_msccl_xml(build("all_reduce", "ring", 4))
        >>> xml.splitlines()[0][:60]
        '<algo name="gpucomm_ring_all_reduce_4" proto="Simple" nchann'
    """
    s = schedule.materialize()
    coll = s.collective
    if coll.name == "sendrecv":
        raise ScheduleError("MSCCL's executor has no sendrecv algorithm: a sendrecv is a "
                            "`send` and a `recv` file (interop.msccl_p2p.to_msccl_send_recv; "
                            "`gpucomm algo export` writes both)")
    if coll.name not in COLL_NAMES:
        raise ScheduleError(f"{coll.name} has no MSCCL collective: allowed are "
                            f"{', '.join(COLL_NAMES)}")
    if protocol.lower() not in PROTOCOLS:
        raise ScheduleError(f"protocol {protocol!r}: allowed are {', '.join(PROTOCOLS)}")
    lay = _Layout(coll, s.nranks, s.root, s.chunks_per_block, outofplace)
    if outofplace:
        for op in s.ops():
            i, o = lay.ranges(op.dst)
            for y in range(op.dst_chunk, op.dst_chunk + op.nchunks):
                if _holds(i, y // lay.c) and not _holds(o, y // lay.c):
                    lay.moved[op.dst].add(y)
    out = (s, lay, protocol, name, min_bytes, max_bytes)
    xml = _export(*out, _Channels(s, lay))
    if not fit or not executor_problems(xml):
        return xml
    # past the executor's limits: spread a rank's peers over channels (32 a channel) and cut
    # long connections into thread blocks of at most MAX_STEPS steps on channels of their own
    for pieces in range(1, MAX_CHANNELS + 1):
        plan = _Channels(s, lay, spread=True, pieces=pieces)
        if plan.nchannels > MAX_CHANNELS:
            break
        xml = _export(*out, plan)
        if not executor_problems(xml):
            return xml
    return xml


class _Channels:
    """The executor channel of each message: the schedule's channel, or with `spread` that
    channel per group of 32 peers (by distance (dst - src) mod P, so a rank has at most 32
    senders and 32 receivers on each), and with `pieces` > 1 per part of the connection's
    messages. Both ends of a connection compute the same channel, so sends and receives
    still match in order on it; dependencies between the parts come from the data flow."""

    def __init__(self, s, lay, spread: bool = False, pieces: int = 1):
        self.s, self.p, self.spread, self.pieces = s, s.nranks, spread, pieces
        self.sent: defaultdict = defaultdict(int)
        total: defaultdict = defaultdict(int)
        for op in s.ops():
            if op.src != op.dst:
                total[(op.src, op.dst, op.channel)] += len(_pieces(lay, op, s.scratch_blocks))
        self.per = -(-max(total.values(), default=1) // pieces)
        keys = {self._key(src, dst, ch, m) for (src, dst, ch), n in total.items()
                for m in range(n)}
        self.dense = {k: i for i, k in enumerate(sorted(keys))}
        self.nchannels = len(self.dense)

    def _key(self, src, dst, ch, m):
        group = ((dst - src) % self.p - 1) // MAX_PEERS_PER_CHANNEL if self.spread else 0
        return ch, group, m // self.per

    def __call__(self, src, dst, ch) -> int:
        """The channel of the next message from src to dst on schedule channel ch."""
        m = self.sent[(src, dst, ch)]
        self.sent[(src, dst, ch)] += 1
        return self.dense[self._key(src, dst, ch, m)]


class _Program:
    """Thread blocks being written, per rank: each step waits on the steps of other thread
    blocks whose chunks it reads or overwrites (data flow), extra waits as `nop` steps."""

    def __init__(self, p):
        self.tbs: list[dict] = [dict() for _ in range(p)]  # rank -> key -> list of step dicts
        # per rank, per logical chunk: the last writer and the readers since, (tb key, index)
        self.writer: list[dict] = [dict() for _ in range(p)]
        self.readers: list[defaultdict] = [defaultdict(list) for _ in range(p)]

    def emit(self, rank, key, kind, reads, writes, attrs) -> None:
        steps = self.tbs[rank].setdefault(key, [])
        writer, readers = self.writer[rank], self.readers[rank]
        deps: dict = {}
        for x in reads:
            if x in writer:
                _latest(deps, writer[x])
        for x in writes:
            if x in writer:
                _latest(deps, writer[x])
            for rd in readers[x]:
                _latest(deps, rd)
        deps.pop(key, None)  # program order covers the thread block's own steps
        for dkey, idx in sorted(deps.items(), key=str)[1:]:
            steps.append({"type": "nop", "dep": (dkey, idx), "cnt": 0})
        first = sorted(deps.items(), key=str)[:1]
        steps.append({"type": kind, "dep": first[0] if first else None, **attrs})
        here = (key, len(steps) - 1)
        for x in reads:
            readers[x].append(here)
        for x in writes:
            writer[x] = here
            readers[x] = []


def _export(s, lay, protocol, name, min_bytes, max_bytes, channel_of) -> str:
    return _xml(s, lay, _program(s, lay, channel_of), protocol, name, min_bytes, max_bytes)


def _program(s, lay, channel_of) -> list[dict]:
    """Per rank, thread block key -> its steps: (kind, send peer, recv peer, channel)."""
    sb, prog = s.scratch_blocks, _Program(s.nranks)
    local = ("local", -1, -1, 0)
    if lay.outofplace:
        for r in range(s.nranks):
            for (sbuf, soff), (dbuf, doff), xs in _initial_copies(lay, r, sb):
                prog.emit(r, local, "cpy", xs, xs, {"srcbuf": sbuf, "srcoff": soff,
                                                    "dstbuf": dbuf, "dstoff": doff,
                                                    "cnt": len(xs)})
    for op in s.ops():
        for sc, dc, n in _pieces(lay, op, sb):
            sbuf, soff = lay.where(op.src, sc, sb)
            dbuf, doff = lay.where(op.dst, dc, sb)
            attrs = {"srcbuf": sbuf, "srcoff": soff, "dstbuf": dbuf, "dstoff": doff, "cnt": n}
            src_rng, dst_rng = list(range(sc, sc + n)), list(range(dc, dc + n))
            if op.src == op.dst:
                prog.emit(op.src, local, "re" if op.reduce else "cpy",
                          src_rng + (dst_rng if op.reduce else []), dst_rng, attrs)
                continue
            ch = channel_of(op.src, op.dst, op.channel)
            prog.emit(op.src, ("send", op.dst, -1, ch), "s", src_rng, [], attrs)
            prog.emit(op.dst, ("recv", -1, op.src, ch), "rrc" if op.reduce else "r",
                      dst_rng if op.reduce else [], dst_rng, attrs)
    return prog.tbs


def _initial_copies(lay, r, sb):
    """Out of place: runs of rank r's input chunks copied from `i` to where they live (`o`, or
    scratch for the input-only chunks the schedule overwrites), at most MAX_COUNT - 1 each."""
    i, _ = lay.ranges(r)
    if i is None:
        return []
    runs: list = []
    for x in range(i[0] * lay.c, (i[0] + i[1]) * lay.c):
        src, dst = ("i", x - i[0] * lay.c), lay.where(r, x, sb)
        if dst[0] == "i":
            continue
        last = runs[-1] if runs else None
        if last and last[0][1] + len(last[2]) == src[1] and last[1][0] == dst[0] \
                and last[1][1] + len(last[2]) == dst[1] and len(last[2]) < MAX_COUNT - 1:
            last[2].append(x)
        else:
            runs.append((src, dst, [x]))
    return runs


def _latest(deps, ref):
    key, idx = ref
    if deps.get(key, -1) < idx:
        deps[key] = idx


def _pieces(lay, op, sb):
    """An op's chunk range cut where either side changes buffer or jumps offset."""
    out, start, prev = [], 0, None
    for j in range(op.nchunks):
        a = lay.where(op.src, op.src_chunk + j, sb)
        b = lay.where(op.dst, op.dst_chunk + j, sb)
        if prev is not None and not (a[0] == prev[0][0] and a[1] == prev[0][1] + 1
                                     and b[0] == prev[1][0] and b[1] == prev[1][1] + 1):
            out.append((op.src_chunk + start, op.dst_chunk + start, j - start))
            start = j
        prev = (a, b)
    out.append((op.src_chunk + start, op.dst_chunk + start, op.nchunks - start))
    return out


def _xml(s, lay, tbs, protocol, name, min_bytes, max_bytes, coll: str | None = None) -> str:
    """`coll` "send" / "recv": the program of one ncclSend / ncclRecv (msccl_p2p), whose
    only buffer is the input / the output."""
    p, c = s.nranks, s.chunks_per_block
    algo = ET.Element("algo")
    nch = max([k[3] for t in tbs for k in t] + [0]) + 1
    sizes = []
    for r in range(p):
        i, o = lay.ranges(r)
        ic = i[1] * c if i and coll != "recv" else 0
        oc = o[1] * c if o and coll != "send" else 0
        if lay.inplace and i == o and not lay.outofplace:
            oc = 0
        used = [st["srcoff"] + st["cnt"] for t in tbs[r].values() for st in t
                if st.get("srcbuf") == "s" and st["type"] in ("s", "cpy", "re")]
        used += [st["dstoff"] + st["cnt"] for t in tbs[r].values() for st in t
                 if st.get("dstbuf") == "s" and st["type"] != "s"]
        sizes.append((ic, oc, max(used, default=0)))
    attrs = {"name": name or f"gpucomm_{s.algorithm}_{s.collective.name}_{p}",
             "proto": PROTOCOLS[protocol.lower()], "nchannels": nch,
             "nchunksperloop": max(max(a, b) for a, b, _ in sizes), "ngpus": p,
             "coll": coll or COLL_NAMES[s.collective.name], "inplace": int(lay.inplace),
             "outofplace": int(lay.outofplace or not lay.inplace), "minBytes": min_bytes,
             "maxBytes": 0 if max_bytes is None else max_bytes}
    if s.collective.rooted:
        attrs["root"] = s.root
    for k, v in attrs.items():
        algo.set(k, str(v))
    algo.append(ET.Comment(f" gpucomm {s.algorithm} {s.collective.name} on {p} ranks, "
                           f"{c} chunk(s) per block; thread blocks and dependencies from its "
                           "data flow "))
    for r in range(p):
        g = ET.SubElement(algo, "gpu", id=str(r), i_chunks=str(sizes[r][0]),
                          o_chunks=str(sizes[r][1]), s_chunks=str(sizes[r][2]))
        keys = sorted(tbs[r], key=lambda k: (k[1], k[2], k[3], k[0]))
        tb_id = {k: n for n, k in enumerate(keys)}
        has_dep = {st["dep"] for t in tbs[r].values() for st in t if st["dep"] is not None}
        for k in keys:
            tb = ET.SubElement(g, "tb", id=str(tb_id[k]), send=str(k[1]), recv=str(k[2]),
                               chan=str(k[3]))
            for n, st in enumerate(tbs[r][k]):
                dep = st["dep"]
                e = ET.SubElement(tb, "step", s=str(n), type=st["type"])
                if st["type"] == "nop":
                    for attr, value in (("srcbuf", "i"), ("srcoff", "-1"), ("dstbuf", "o"),
                                        ("dstoff", "-1")):
                        e.set(attr, value)
                else:
                    for a in ("srcbuf", "srcoff", "dstbuf", "dstoff"):
                        e.set(a, str(st[a]))
                e.set("cnt", str(st["cnt"]))
                e.set("depid", str(tb_id[dep[0]]) if dep else "-1")
                e.set("deps", str(dep[1]) if dep else "-1")
                e.set("hasdep", "1" if (k, n) in has_dep else "0")
    ET.indent(algo, space="  ")
    return ET.tostring(algo, encoding="unicode") + "\n"


def executor_problems(text: str) -> list[str]:
    """What MSCCL's executor would refuse in an algorithm file (the limits above), one line
    each naming the rank, thread block and limit; empty when it loads."""
    algo = _parse(text)
    gpus = [g for g in algo if g.tag == "gpu"]
    out = []
    for g in gpus:
        r = g.get("id")
        tbs = [tb for tb in g if tb.tag == "tb"]
        nodes = 1 + len(gpus) + len(tbs) + sum(len([st for st in tb if st.tag == "step"])
                                               for tb in tbs)
        if nodes > MAX_XML_NODES:
            out.append(f"rank {r}: {nodes} XML elements, the executor's parser reads at most "
                       f"{MAX_XML_NODES} per rank")
        peers: dict = defaultdict(int)
        for tb in tbs:
            steps = [st for st in tb if st.tag == "step"]
            where = f"rank {r} thread block {tb.get('id')}"
            if len(steps) > MAX_STEPS:
                out.append(f"{where}: {len(steps)} steps, the executor allows {MAX_STEPS} "
                           "(MSCCL_MAX_NUM_STEPS)")
            chan = int(tb.get("chan", 0))
            if chan >= MAX_CHANNELS:
                out.append(f"{where}: channel {chan}, the executor allows 0..{MAX_CHANNELS - 1}")
            for d in ("send", "recv"):
                if int(tb.get(d, -1)) >= 0:
                    peers[(d, chan)] += 1
            big = [st for st in steps if int(st.get("cnt", 0)) >= MAX_COUNT
                   or max(int(st.get("srcoff", 0)), int(st.get("dstoff", 0))) > MAX_OFFSET]
            if big:
                out.append(f"{where} step {big[0].get('s')}: cnt must be below {MAX_COUNT} "
                           f"and offsets at most {MAX_OFFSET}")
        for (d, chan), n in sorted(peers.items()):
            if n > MAX_PEERS_PER_CHANNEL:
                out.append(f"rank {r} channel {chan}: {n} thread blocks "
                           f"{'sending' if d == 'send' else 'receiving'}, the "
                           f"executor allows {MAX_PEERS_PER_CHANNEL} "
                           "(MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL)")
    return out


# ---- import ----------------------------------------------------------------------------
# Any integer attribute (ranks, chunk counts, step indices): MSCCL's own limits are far lower
# (msccl.h: MSCCL_MAX_NUM_STEPS 256); above this a file only sizes memory and loops.
MAX_XML_INT = 1 << 16


def _int(el, attr, where, default=None, lo=None, hi=MAX_XML_INT):
    v = el.get(attr)
    if v is None:
        if default is not None:
            return default
        raise MscclError(f"{where}: missing attribute {attr!r}")
    try:
        return parse_int(v, f"{where}: {attr}", -1 if lo is None else lo, hi)
    except ConfigError as e:
        raise MscclError(str(e)) from None


def _parse(text: str):
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        line, col = e.position
        raise MscclError(f"not well-formed XML at line {line}, column {col}: "
                         f"{str(e).split(':')[0]}") from None
    if root.tag != "algo":
        raise MscclError(f"<{root.tag}>: the root element must be <algo>")
    return root


def from_msccl_xml(text: str, *, name: str | None = None) -> Schedule:
    """A Schedule from an MSCCL algorithm file; MscclError naming the element on bad input.

    `verify()` it before trusting it: import checks the file's structure and runs its thread
    blocks, not what they compute.
    """
    algo = _parse(text)
    coll_attr = algo.get("coll")
    if coll_attr is None:
        raise MscclError("<algo>: missing attribute 'coll'")
    key = coll_attr.lower().replace("_", "")
    if key not in FROM_MSCCL:
        raise MscclError(f"<algo coll={coll_attr!r}>: unknown collective, allowed are "
                         f"{', '.join(FROM_MSCCL)}")
    coll = get_collective(FROM_MSCCL[key])
    p = _int(algo, "ngpus", "<algo>", lo=1)
    root_rank = _int(algo, "root", "<algo>", default=0, lo=0)
    if root_rank >= p:
        raise MscclError(f"<algo>: root={root_rank} is not a rank (0..{p - 1})")
    proto = algo.get("proto", "Simple")
    if proto.lower() not in PROTOCOLS:
        raise MscclError(f"<algo proto={proto!r}>: allowed are LL, LL128, Simple")
    gpus = {}
    for g in algo:
        if g.tag is ET.Comment:
            continue
        if g.tag != "gpu":
            raise MscclError(f"<{g.tag}> inside <algo>: only <gpu> elements are allowed")
        gid = _int(g, "id", "<gpu>", lo=0)
        if gid >= p:
            raise MscclError(f"<gpu id={gid}>: id must be below ngpus={p}")
        if gid in gpus:
            raise MscclError(f"<gpu id={gid}>: appears twice")
        gpus[gid] = g
    missing = sorted(set(range(p)) - set(gpus))
    if missing:
        raise MscclError(f"<algo ngpus={p}>: no <gpu> element for rank(s) {missing[:8]}"
                         + (f" and {len(missing) - 8} more" if len(missing) > 8 else ""))
    cpb = _chunks_per_block(coll, p, root_rank, gpus)
    lay = _Layout(coll, p, root_rank, cpb)
    programs = {r: _threadblocks(gpus[r], r, p) for r in range(p)}
    ops, channels, scratch_blocks = _replay(programs, lay)
    steps = _pack(ops)
    lo = _int(algo, "minBytes", "<algo>", default=0, lo=0, hi=MAX_SIZE_BYTES)
    hi = _int(algo, "maxBytes", "<algo>", default=0, lo=0, hi=MAX_SIZE_BYTES)
    return Schedule(coll, p, name or algo.get("name") or "msccl", cpb, tuple(steps),
                    scratch_blocks=scratch_blocks, root=root_rank, channels=channels,
                    params=(("protocol", PROTOCOLS[proto.lower()]), ("min_bytes", lo),
                            ("max_bytes", hi)))


def _chunks_per_block(coll, p, root, gpus) -> int:
    """MSCCL chunks per gpucomm block, from each gpu's i/o chunk counts (they must agree)."""
    seen: dict = {}
    for r, g in gpus.items():
        where = f"<gpu id={r}>"
        for attr, rng in (("i_chunks", coll.inputs(r, p, root)),
                          ("o_chunks", coll.outputs(r, p, root))):
            n = _int(g, attr, where, default=0, lo=0)
            if n and rng:
                if n % rng[1]:
                    raise MscclError(f"{where}: {attr}={n} does not divide into the {rng[1]} "
                                     f"block(s) of a {coll.name} {attr[0]} buffer")
                seen.setdefault(n // rng[1], f"{where} {attr}={n}")
    if not seen:
        raise MscclError(f"<gpu>: no i_chunks/o_chunks give the chunk count of a {coll.name}")
    if len(seen) > 1:
        raise MscclError("chunk counts disagree: " + ", ".join(seen.values()))
    return next(iter(seen))


def _threadblocks(g, r, p):
    tbs = {}
    for tb in g:
        if tb.tag is ET.Comment:
            continue
        if tb.tag != "tb":
            raise MscclError(f"<{tb.tag}> inside <gpu id={r}>: only <tb> elements are allowed")
        tid = _int(tb, "id", f"<tb> of <gpu id={r}>", lo=0)
        where = f"<tb id={tid}> of <gpu id={r}>"
        if tid in tbs:
            raise MscclError(f"{where}: appears twice")
        send = _int(tb, "send", where, default=-1, lo=-1)
        recv = _int(tb, "recv", where, default=-1, lo=-1)
        for a, v in (("send", send), ("recv", recv)):
            if v >= p or v == r:
                raise MscclError(f"{where}: {a}={v} must be another rank (0..{p - 1}) or -1")
        chan = _int(tb, "chan", where, default=0, lo=0)
        steps = _tb_steps(tb, where, send, recv)
        tbs[tid] = {"send": send, "recv": recv, "chan": chan, "steps": steps, "where": where}
    for tb in tbs.values():
        for st in tb["steps"]:
            if st["depid"] >= 0:
                other = tbs.get(st["depid"])
                if other is None or not 0 <= st["deps"] < len(other["steps"]):
                    raise MscclError(f"{st['where']}: depends on step {st['deps']} of thread "
                                     f"block {st['depid']}, which <gpu id={r}> does not have")
    return tbs


def _tb_steps(tb, where: str, send: int, recv: int) -> list:
    """The <step> elements of one thread block, checked and numbered 0, 1, 2, ..."""
    steps: list[dict] = []
    for n, st in enumerate(tb):
        if st.tag is ET.Comment:
            continue
        sw = f"<step s={st.get('s', n)}> of {where}"
        if st.tag != "step":
            raise MscclError(f"<{st.tag}> inside {where}: only <step> elements are allowed")
        typ = st.get("type")
        if typ not in STEP_TYPES:
            raise MscclError(f"{sw}: type={typ!r} unknown, allowed are "
                             f"{', '.join(STEP_TYPES)}")
        sidx = _int(st, "s", sw, default=len(steps), lo=0)
        if sidx != len(steps):
            raise MscclError(f"{sw}: steps must be numbered 0, 1, 2, … in order "
                             f"(expected s={len(steps)})")
        step_ = {"type": typ, "where": sw, "depid": _int(st, "depid", sw, -1, -1),
                 "deps": _int(st, "deps", sw, -1, -1)}
        if typ != "nop":
            step_.update(_transfer(st, sw, typ, where, send, recv))
        steps.append(step_)
    return steps


def _transfer(st, sw: str, typ: str, where: str, send: int, recv: int) -> dict:
    """What a step that moves data reads and writes: count, buffers and offsets."""
    out = {"cnt": _int(st, "cnt", sw, lo=1)}
    for a in ("srcbuf", "dstbuf"):
        b = st.get(a)
        if b not in ("i", "o", "s"):
            raise MscclError(f"{sw}: {a}={b!r}, allowed are i, o, s")
        out[a] = b
    out["srcoff"] = _int(st, "srcoff", sw, lo=0)
    out["dstoff"] = _int(st, "dstoff", sw, lo=0)
    if typ in _SENDS and send < 0:
        raise MscclError(f"{sw}: type {typ} sends, but {where} has send=-1")
    if typ in _RECVS and recv < 0:
        raise MscclError(f"{sw}: type {typ} receives, but {where} has recv=-1")
    return out


class _Replay:
    """Runs the thread blocks and records each transfer as a gpucomm op (src, dst, src chunk,
    dst chunk, n, reduce, channel); scratch chunks are allocated by position in a block."""

    def __init__(self, lay):
        self.lay, self.c = lay, lay.c
        self.ops = []
        # per rank: s offset -> logical chunk; position -> next free slot; chunk -> version;
        # chunk -> queued sends that still read it
        self.scratch: list[dict] = [dict() for _ in range(lay.p)]
        self.free: list[defaultdict] = [defaultdict(int) for _ in range(lay.p)]
        self.version: list[defaultdict] = [defaultdict(int) for _ in range(lay.p)]
        self.pending: list[defaultdict] = [defaultdict(int) for _ in range(lay.p)]
        self.blocks = 0

    def targets(self, r, st) -> list:
        """Logical chunks a step would overwrite as things stand (scratch may be renamed)."""
        if st["type"] in ("nop", "s", "rrs"):
            return []
        out = []
        for j in range(st["cnt"]):
            if st["dstbuf"] == "s":
                x = self.scratch[r].get(st["dstoff"] + j)
            else:
                x = self.lay.logical(r, st["dstbuf"], st["dstoff"] + j)
            if x is not None:
                out.append(x)
        return out

    def new_chunk(self, r, pos) -> int:
        slot = self.free[r][pos]
        self.free[r][pos] += 1
        self.blocks = max(self.blocks, slot + 1)
        return -(slot * self.c + pos) - 1  # a placeholder until the scratch base is known

    def read(self, r, buf, off, st):
        if buf == "s":
            x = self.scratch[r].get(off)
            if x is None:
                raise MscclError(f"{st['where']}: reads scratch chunk {off} before anything "
                                 "was written there")
            return x
        x = self.lay.logical(r, buf, off)
        if x is None:
            raise MscclError(f"{st['where']}: rank {r} has no {buf!r} buffer in a "
                             f"{self.lay.coll.name}")
        return x

    def write(self, r, buf, off, pos, st):
        """The logical chunk a write of (buf, off) lands in, data at block position `pos`."""
        if buf == "s":
            x = self.scratch[r].get(off)
            if x is None or self.position(x) != pos:
                x = self.new_chunk(r, pos)
                self.scratch[r][off] = x
            return x
        x = self.read(r, buf, off, st)
        if self.position(x) != pos:
            raise MscclError(f"{st['where']}: moves data from position {pos} of a block to "
                             f"position {self.position(x)} ({buf} offset {off}); gpucomm "
                             "chunks keep their position within a block")
        return x

    def position(self, x) -> int:
        return x % self.c if x >= 0 else (-x - 1) % self.c

    def chunks(self, r, buf, off, cnt, st, write_pos=None):
        out = []
        for j in range(cnt):
            if write_pos is None:
                out.append(self.read(r, buf, off + j, st))
            else:
                out.append(self.write(r, buf, off + j, write_pos[j], st))
        self._check_bounds(r, buf, off, cnt, st)
        return out

    def _check_bounds(self, r, buf, off, cnt, st):
        if buf == "s":
            return
        i, o = self.lay.ranges(r)
        rng = i if buf == "i" else o
        if rng is not None and off + cnt > rng[1] * self.c:
            raise MscclError(f"{st['where']}: {buf} offset {off}+{cnt} is past the "
                             f"{rng[1] * self.c} chunks of that buffer")

    def emit(self, src, dst, xs, ys, reduce, chan):
        for x, y in zip(xs, ys):
            self.ops.append((src, dst, x, y, reduce, chan))
            self.version[dst][y] += 1


def _replay(programs, lay):
    """Run every thread block to completion; the transfers in the order they happened."""
    rp = _Replay(lay)
    pc = {(r, t): 0 for r, tbs in programs.items() for t in tbs}
    queues: defaultdict = defaultdict(list)  # (src, dst, chan) -> [(chunks, versions, cnt, where)]
    progress, patient = True, True
    while progress:
        progress = False
        for (r, t), n in sorted(pc.items()):
            tb = programs[r][t]
            while n < len(tb["steps"]):
                st = tb["steps"][n]
                if st["depid"] >= 0 and pc[(r, st["depid"])] <= st["deps"]:
                    break
                # let queued sends of a chunk be received before it is overwritten (the
                # hardware has copied them out already; the ops list must read them first)
                if patient and any(rp.pending[r][x] for x in rp.targets(r, st)):
                    break
                if st["type"] in _RECVS:
                    q = queues[(tb["recv"], r, tb["chan"])]
                    if not q:
                        break
                    _run(rp, r, tb, st, q.pop(0), queues)
                else:
                    _run(rp, r, tb, st, None, queues)
                n += 1
                pc[(r, t)] = n
                progress = True
        if not progress and patient:
            progress, patient = True, False
        elif progress:
            patient = True
    stuck = [(r, t, n) for (r, t), n in sorted(pc.items()) if n < len(programs[r][t]["steps"])]
    if stuck:
        r, t, n = stuck[0]
        st = programs[r][t]["steps"][n]
        what = (f"waits for step {st['deps']} of thread block {st['depid']}"
                if st["depid"] >= 0 and pc[(r, st["depid"])] <= st["deps"]
                else f"waits for a send from rank {programs[r][t]['recv']} on channel "
                f"{programs[r][t]['chan']} that never comes")
        raise MscclError(f"{st['where']}: deadlock, it {what} ({len(stuck)} step(s) stuck)")
    left = [(k, len(v)) for k, v in queues.items() if v]
    if left:
        (src, dst, chan), n = left[0]
        raise MscclError(f"<gpu id={src}>: {n} send(s) to rank {dst} on channel {chan} are never "
                         "received (no matching recv step)")
    channels = 1 + max((tb["chan"] for tbs in programs.values() for tb in tbs.values()),
                       default=0)
    return _fix_scratch(rp), channels, rp.blocks


def _run(rp, r, tb, st, msg, queues):
    typ, cnt = st["type"], st.get("cnt", 0)
    if typ == "nop":
        return
    if typ in ("cpy", "re"):
        xs = rp.chunks(r, st["srcbuf"], st["srcoff"], cnt, st)
        if typ == "re":
            ys = rp.chunks(r, st["dstbuf"], st["dstoff"], cnt, st)
            if any(rp.position(x) != rp.position(y) for x, y in zip(xs, ys)):
                raise MscclError(f"{st['where']}: reduces chunks at different block positions")
        else:
            ys = rp.chunks(r, st["dstbuf"], st["dstoff"], cnt, st,
                           write_pos=[rp.position(x) for x in xs])
            # i -> o of one logical chunk (an out-of-place file's first copy): nothing moves
            xs, ys = [x for x, y in zip(xs, ys) if x != y], [y for x, y in zip(xs, ys) if x != y]
        rp.emit(r, r, xs, ys, typ == "re", tb["chan"])
        return
    out = None
    if typ in _RECVS:
        src, xs, versions, n, swhere = msg
        if n != cnt:
            raise MscclError(f"{st['where']}: receives {cnt} chunk(s) but the matching send "
                             f"({swhere}) sends {n}")
        for x in xs:
            rp.pending[src][x] -= 1
        stale = [x for x, v in zip(xs, versions) if rp.version[src][x] != v]
        if stale:
            raise MscclError(f"{swhere}: chunk overwritten on rank {src} before rank {r} "
                             f"received it ({st['where']})")
        pos = [rp.position(x) for x in xs]
        if typ == "rrs":  # reduce with the local chunk, send on, keep nothing
            local = rp.chunks(r, st["dstbuf"], st["dstoff"], cnt, st)
            tmp = [rp.new_chunk(r, q) for q in pos]
            rp.emit(r, r, local, tmp, False, tb["chan"])
            rp.emit(src, r, xs, tmp, True, tb["chan"])
            out = tmp
        else:
            reduce = typ in ("rrc", "rrcs")
            ys = rp.chunks(r, st["dstbuf"], st["dstoff"], cnt, st,
                           write_pos=None if reduce else pos)
            if reduce and any(rp.position(y) != q for y, q in zip(ys, pos)):
                raise MscclError(f"{st['where']}: reduces data into a chunk at another block "
                                 "position")
            rp.emit(src, r, xs, ys, reduce, tb["chan"])
            out = ys
    if typ in _SENDS:
        xs = out if out is not None else rp.chunks(r, st["srcbuf"], st["srcoff"], cnt, st)
        for x in xs:
            rp.pending[r][x] += 1
        queues[(r, tb["send"], tb["chan"])].append(
            (r, xs, [rp.version[r][x] for x in xs], cnt, st["where"]))


def _fix_scratch(rp):
    """Scratch placeholders (negative) -> chunks of the scratch blocks after the collective's."""
    base = rp.lay.nblocks * rp.c

    def real(x):
        if x >= 0:
            return x
        k = -x - 1  # slot * c + pos
        return base + k
    return [(s, d, real(x), real(y), red, ch) for s, d, x, y, red, ch in rp.ops]


def _pack(ops):
    """Consecutive non-conflicting ops into one step (order between conflicting ones kept)."""
    steps: list = []
    cur: list = []
    written: set = set()
    read: set = set()
    for src, dst, x, y, red, ch in ops:
        w, rd = (dst, y), (src, x)
        if w in written or w in read or rd in written:
            steps.append(cur)
            cur, written, read = [], set(), set()
        cur.append((src, dst, x, y, 1, red, ch))
        written.add(w)
        read.add(rd)
    if cur:
        steps.append(cur)
    return [step(*zip(*rows)) for rows in steps]


def timed_schedule(result) -> Schedule:
    """The schedule a prediction timed (`result.timed`), on communicator ranks: rank i is the
    i-th GPU of its placement, and each channel's ops run on the GPUs its ring order gives
    them (their ranks and, where the buffer has a block per rank, the blocks those ranks
    own). Prove it (verify) before it leaves gpucomm: a layout the relabelling cannot carry
    fails there.

        >>> from gpucomm.simulate import predict
        >>> from gpucomm.topology import build_topology
        >>> r = predict("all_reduce", "64M", build_topology("dgx-v100"), algorithm="ring")
        >>> s = timed_schedule(r)
        >>> s.nranks, s.channels, r.timed.channels
        (8, 6, 16)
    """
    import numpy as np
    timed = getattr(result, "timed", None)
    if timed is None or timed.schedule is None:
        raise ScheduleError(f"{result.algorithm} {result.collective}: timed in closed form "
                            "(no schedule to export); pick a schedule algorithm (ring, pat, ...)")
    s = timed.schedule
    rows = np.atleast_2d(np.asarray(timed.placement, dtype=np.int64))
    perm = np.searchsorted(np.sort(rows[0]), rows)  # per row: schedule rank -> comm rank
    if (perm == np.arange(s.nranks)).all():
        return s
    cpb, real = s.chunks_per_block, s.nblocks * s.chunks_per_block
    owned = s.nblocks == s.nranks  # block b belongs to rank b: it moves with the rank

    def chunk(c, p):
        if not owned:
            return c
        block = np.minimum(c // cpb, s.nranks - 1)
        return np.where(c < real, p[np.arange(len(c)), block] * cpb + c % cpb, c)

    steps = []
    for st in s.steps():
        src, dst, sc, dc, n, red, ch = st.columns()
        p = perm[ch % len(perm)]
        at = np.arange(len(src))
        steps.append(step(p[at, src], p[at, dst], chunk(sc, p), chunk(dc, p), n, red, ch))
    roots = set(perm[:, s.root].tolist())
    if len(roots) != 1:
        raise ScheduleError(f"the timed {s.algorithm} puts root {s.root} on different GPUs per "
                            "channel; MSCCL has one root")
    return Schedule(s.collective, s.nranks, s.algorithm, cpb, tuple(steps), s.scratch_blocks,
                    roots.pop(), s.channels, s.params)
