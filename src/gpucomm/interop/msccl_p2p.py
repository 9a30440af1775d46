"""A sendrecv schedule as MSCCL's executor knows point-to-point: a `send` and a `recv` file.

MSCCL's executor (Azure/msccl-executor-nccl) has no sendrecv collective. Its parser
(src/misc/msccl/msccl_parser.cc) knows coll="send" and coll="recv": the program an ncclSend
call runs (one buffer, the send buffer: MSCCL's `i`) and the one an ncclRecv call runs (one
buffer, the receive buffer: `o`), chosen per call by function, rank count, byte range and
out-of-place (src/misc/msccl/msccl_lifecycle.cc: a send or recv is never in place). nccl-tests'
sendrecv calls both in one group (ncclGroupStart; ncclSend; ncclRecv; ncclGroupEnd), so a
rank runs its send program and its recv program for one gpucomm sendrecv: the send file holds
every rank's thread blocks that send, the recv file every rank's thread blocks that receive,
matched in order per (sender, receiver, channel) as in any MSCCL file.

Only direct schedules split so: a message that a rank receives and forwards would need one
program to do both.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

from ..errors import ScheduleError
from ..schedule import Schedule
from .msccl import PROTOCOLS, MscclError, _Channels, _Layout, _parse, _program, _xml
from .msccl import from_msccl_xml

PARTS = ("send", "recv")


def to_msccl_send_recv(schedule: Schedule, *, protocol: str = "simple", name: str | None = None,
                       min_bytes: int = 0, max_bytes: int | None = None) -> dict[str, str]:
    """{"send": XML, "recv": XML} for a sendrecv schedule (MSCCL loads both; a rank's
    ncclSend runs the first, its ncclRecv the second).

        >>> from gpucomm.algorithms import build
        >>> files = to_msccl_send_recv(build("sendrecv", "direct", 2))
        >>> [f.split('coll="')[1].split('"')[0] for f in files.values()]
        ['send', 'recv']
    """
    s = schedule.materialize()
    if s.collective.name != "sendrecv":
        raise ScheduleError(f"{s.collective.name} is not sendrecv: export it with to_msccl_xml")
    if protocol.lower() not in PROTOCOLS:
        raise ScheduleError(f"protocol {protocol!r}: allowed are {', '.join(PROTOCOLS)}")
    lay = _Layout(s.collective, s.nranks, s.root, s.chunks_per_block)
    for op in s.ops():
        i, _ = lay.ranges(op.src)
        _, o = lay.ranges(op.dst)
        if op.src == op.dst or not (i[0] * lay.c <= op.src_chunk < (i[0] + i[1]) * lay.c) \
                or not (o[0] * lay.c <= op.dst_chunk < (o[0] + o[1]) * lay.c):
            raise ScheduleError(f"step {op.step}: {op.src}->{op.dst} is not a direct send from "
                                "an input to another rank's output: a send or recv program "
                                "cannot relay (MSCCL runs ncclSend and ncclRecv separately)")
    tbs = _program(s, lay, _Channels(s, lay))
    base = name or f"gpucomm_{s.algorithm}_sendrecv_{s.nranks}"
    return {part: _xml(s, lay, [{k: v for k, v in t.items() if k[0] == part} for t in tbs],
                       protocol, f"{base}_{part}", min_bytes, max_bytes, coll=part)
            for part in PARTS}


def from_msccl_send_recv(send_text: str, recv_text: str, *, name: str | None = None
                         ) -> Schedule:
    """The sendrecv schedule a pair of MSCCL `send` and `recv` files run together."""
    send, recv = _parse(send_text), _parse(recv_text)
    for part, algo in zip(PARTS, (send, recv)):
        if algo.get("coll") != part:
            raise MscclError(f"<algo coll={algo.get('coll')!r}>: expected the {part} file "
                             f"(coll=\"{part}\") here")
    for attr in ("ngpus", "proto", "minBytes", "maxBytes"):
        if send.get(attr) != recv.get(attr):
            raise MscclError(f"the send and recv files differ in {attr} ({send.get(attr)} "
                             f"and {recv.get(attr)}): they are not one sendrecv")
    merged = ET.Element("algo", dict(send.attrib, coll="sendrecv", name=name or "msccl"))
    merged.set("nchannels", str(max(int(send.get("nchannels", "1")),
                                    int(recv.get("nchannels", "1")))))
    recv_gpus = {g.get("id"): g for g in recv if g.tag == "gpu"}
    for g in (x for x in send if x.tag == "gpu"):
        other = recv_gpus.pop(g.get("id"), None)
        if other is None:
            raise MscclError(f"<gpu id={g.get('id')}> is in the send file only")
        merged.append(_merge_gpu(g, other))
    if recv_gpus:
        raise MscclError(f"<gpu id={sorted(recv_gpus)[0]}> is in the recv file only")
    return from_msccl_xml(ET.tostring(merged, encoding="unicode"), name=name)


def _merge_gpu(send: ET.Element, recv: ET.Element) -> ET.Element:
    """One rank's send and recv thread blocks as one gpu (recv blocks renumbered after the
    send ones, their dependencies too)."""
    g = ET.Element("gpu", id=send.get("id", ""), i_chunks=send.get("i_chunks", "0"),
                   o_chunks=recv.get("o_chunks", "0"),
                   s_chunks=str(max(int(send.get("s_chunks", "0")),
                                    int(recv.get("s_chunks", "0")))))
    sends = [tb for tb in send if tb.tag == "tb"]
    g.extend(sends)
    for tb in (x for x in recv if x.tag == "tb"):
        tb.set("id", str(int(tb.get("id", "0")) + len(sends)))
        for st in tb:
            if st.get("depid", "-1") != "-1":
                st.set("depid", str(int(st.get("depid", "0")) + len(sends)))
        g.append(tb)
    return g
