"""The data an HTML report embeds: result entries (the JSON a command prints, verbatim, plus
what it was made from) and plain-JSON views of a topology and of a traced simulation.

An entry is {"kind", "title", "command", "version", "created", "inputs", "result", "extras"};
`result` is exactly what the command's `--format json` prints, so a report can be checked
against (and rebuilt from) saved JSON. `kind` says how to draw it; it is guessed from the
result's shape when not given (sim, sim_compare, bench, plan, plan_compare, plan_search).
"""
from __future__ import annotations

import datetime
import hashlib
import os
import shlex
from pathlib import Path

import numpy as np

from ..errors import ConfigError

KINDS = ("sim", "sim_compare", "bench", "plan", "plan_compare", "plan_search", "data")
MAX_TIMELINE_OPS = 6000  # ops drawn on the timeline (whole ranks, lowest first)
MAX_HEATMAP_LINKS = 160  # the busiest links drawn on the utilisation heatmap
HEATMAP_BINS = 120


def version() -> str:
    from .. import __version__
    return __version__


def guess_kind(result) -> str:
    """The kind of a command's JSON result, from its shape."""
    if isinstance(result, dict):
        rows = result.get("rows")
        if "backend" in result and isinstance(rows, list):
            return "bench"
        if isinstance(rows, list) and rows and isinstance(rows[0], dict):
            if "measured_busbw" in rows[0]:
                return "sim_compare"
            if "busbw" in rows[0]:
                return "sim"
        if "step_time_s" in result:
            return "plan"
        if isinstance(result.get("ranked"), list):
            return "plan_search"
    if isinstance(result, list) and result and all(isinstance(r, dict) for r in result):
        if "step_time_s" in result[0]:
            return "plan_compare" if "variant" in result[0] else "plan_search"
        if "busbw" in result[0] and ("wrong" in result[0] or "ip_busbw" in result[0]):
            return "bench"
    return "data"


def entry(result, *, kind=None, title=None, argv=None, inputs=None, extras=None,
          command=None) -> dict:
    """One section of a report: a command's JSON result and how it was made (`command`, or
    the command line `argv`)."""
    kind = kind or guess_kind(result)
    if kind not in KINDS:
        raise ConfigError(f"unknown report kind {kind!r}: allowed are {', '.join(KINDS)}")
    return {"kind": kind, "title": title or _title(kind, result, inputs or {}),
            "command": command or command_line(argv), "version": version(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "inputs": inputs or {}, "result": result, "extras": extras or {}}


def command_line(argv=None) -> str:
    import sys
    argv = list(sys.argv[1:] if argv is None else argv)
    return "gpucomm " + " ".join(shlex.quote(str(a)) for a in argv)


def args_inputs(args) -> dict:
    """A command's parsed options as JSON, with the SHA-256 of every file one names."""
    out: dict[str, object] = {}
    for k, v in sorted(vars(args).items()):
        if k in ("func", "html", "argv") or callable(v):
            continue
        if isinstance(v, (str, int, float, bool)) or v is None:
            out[k] = v
        elif isinstance(v, (list, tuple)) and all(isinstance(x, (str, int, float)) for x in v):
            out[k] = list(v)
        else:
            out[k] = str(v)
        if isinstance(v, str) and v and os.path.isfile(v):
            out[f"{k}_sha256"] = file_sha256(v)
    return out


def file_sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def bench_rows(result) -> list:
    """A bench result's rows: `{"backend": ..., "rows": [...]}` as `bench --format json`
    prints it, or a bare list of rows (older saved results)."""
    return result["rows"] if isinstance(result, dict) else result


def beside_second_job(doc: dict) -> str:
    """What every view's heading of a `sim --other-job` result adds: the job runs on part of
    the cluster, a second job on the rest ("" without one)."""
    second = doc.get("other_job")
    return (f", the job's {doc.get('nranks')} ranks beside a second job on {second['nodes']} "
            "nodes" if second else "")


def _title(kind: str, r, inputs: dict) -> str:
    if kind == "sim":
        return (f"gpucomm sim: {r.get('collective')} on {r.get('topology')}{beside_second_job(r)} "
                f"({r.get('model')} model)")
    if kind == "sim_compare":
        return f"gpucomm sim --compare: {r.get('collective')} on {r.get('topology')}"
    if kind == "bench":
        run = (f"{inputs['collective']} on {inputs.get('nranks')} ranks, backend "
               f"{inputs.get('backend')}, " if "collective" in inputs else "")
        rows = bench_rows(r)
        return f"gpucomm bench: {run}algorithm {rows[0].get('algorithm', '?') if rows else '?'}"
    if kind == "plan":
        return f"gpucomm plan: {r.get('model')} on {r.get('nodes')} x {r.get('system')}"
    if kind in ("plan_compare", "plan_search"):
        first = r if isinstance(r, dict) else r[0]
        return (f"gpucomm plan{' --search' if kind == 'plan_search' else ' --compare'}: "
                f"{first.get('model')} on {first.get('nodes')} x {first.get('system')}")
    return "result"


def topology_drawing(topo) -> dict:
    """Positions of the devices of the first nodes and the fabric, and the links between them
    (a duplex pair once), with each link's technology family and GB/s per direction."""
    from ..topology.analysis import tech_kind
    from ..topology.plot import MAX_NODES_DRAWN, drawing_positions
    drawn = min(topo.nodes, MAX_NODES_DRAWN)
    pos, _ = drawing_positions(topo, drawn)
    devices = [[d.name, d.kind, round(pos[d.name][0], 4), round(pos[d.name][1], 4)]
               for d in topo.devices if d.name in pos]
    links: list = []
    seen: set = set()
    kinds: dict = {}
    for ln in topo.links:
        if ln.src not in pos or ln.dst not in pos or (ln.dst, ln.src) in seen:
            continue
        seen.add((ln.src, ln.dst))
        kind = kinds.setdefault(ln.tech, tech_kind(ln.tech))
        links.append([ln.src, ln.dst, ln.tech, kind, ln.bandwidth_Bps / 1e9])
    return {"name": topo.name, "nodes": topo.nodes, "nranks": topo.nranks, "nodes_drawn": drawn,
            "devices": devices, "links": links}


def trace_data(result, topo, schedule=None) -> dict:
    """A traced simulation as JSON: its ops (the Chrome trace's "X" events, whole ranks up to
    MAX_TIMELINE_OPS) and each link's utilisation in HEATMAP_BINS time bins."""
    from ..simulate.timed import phases, printed_s
    from .links import NVLS_ALGORITHMS, link_usage
    from .trace import nvls_ops, trace_events
    if result.algorithm in NVLS_ALGORITHMS:  # every rank streams the same chunks
        counts = np.full(result.nranks, len(nvls_ops(result, topo, [0])))
    else:
        src = np.fromiter((rec.src for rec in result.timeline), dtype=np.int64,
                          count=len(result.timeline))
        counts = np.bincount(src, minlength=result.nranks)
    shown: list = []
    for r in np.flatnonzero(counts).tolist():
        if shown and counts[shown].sum() + counts[r] > MAX_TIMELINE_OPS:
            break
        shown.append(r)
    events = [e for e in trace_events(result, topo, counters=False, ranks=shown)
              if e["ph"] == "X"]
    keep = set(shown)
    ops = [[e["name"], _group(e), e["pid"], e["tid"], round(e["ts"], 6), round(e["dur"], 6)]
           for e in events if e["pid"] in keep]
    out = {"collective": result.collective, "algorithm": result.algorithm,
           "protocol": result.protocol, "model": result.model, "size": result.size,
           "nranks": result.nranks, "time_us": printed_s(result) * 1e6, "ops": ops,
           # what the printed time adds after the ops (fixed latency, bounds), as ops are
           "after_ops": [[what, "beyond the ops", -1, 0, round(a * 1e6, 6),
                          round((b - a) * 1e6, 6)] for what, a, b in phases(result)],
           "ops_total": int(counts.sum()), "ranks_shown": len(shown)}
    usage = link_usage(result, topo, schedule) if topo is not None else None
    if usage is not None:
        edges, grid = usage.binned(HEATMAP_BINS)
        busy = grid.mean(axis=1)
        idx = np.sort(np.argsort(-busy, kind="stable")[:MAX_HEATMAP_LINKS])
        out["links"] = {"names": [usage.names[i] for i in idx],
                        "edges_us": [round(float(e) * 1e6, 6) for e in edges],
                        "util": [[round(float(v), 4) for v in grid[i]] for i in idx],
                        "links_total": len(usage.links),
                        "method": usage.method}
    return out


def _group(event) -> str:
    if event.get("cat") == "nvls":
        return event["name"].split(" c")[0].split(" (")[0]
    return f"step {event['args'].get('step', 0)}"
