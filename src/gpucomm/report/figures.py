"""Plotly figures (plain dicts: data + layout) for the HTML report, one function per chart.

Every function reads only the report's embedded data (JSON values), so a report rebuilt from
saved JSON draws the same charts. Sizes are bytes, times microseconds, bandwidths GB/s.
"""
from __future__ import annotations

from collections.abc import Callable

TECH_COLOURS = {"nvlink": "#2e8b57", "pcie": "#1f77b4", "cpu": "#7f7f7f", "memory": "#9467bd",
                "ib": "#ff7f0e", "roce": "#d62728", "efa": "#e377c2", "ethernet": "#8c564b",
                "slingshot": "#bcbd22", "custom": "#333333"}
DEVICE_STYLE = {"gpu": ("square", "#76b900"), "nvswitch": ("diamond", "#2e8b57"),
                "pcie_switch": ("diamond", "#1f77b4"), "cpu": ("circle", "#7f7f7f"),
                "memory": ("circle", "#9467bd"), "nic": ("triangle-up", "#ff7f0e"),
                "switch": ("hexagon", "#d62728")}
PARTS_COLOURS = ["#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2",
                 "#ff9da6", "#9d755d", "#bab0ac"]


def _exposed(kind: str) -> Callable[[dict], float]:
    """A variant's exposed communication time of one kind (0 where it has none)."""
    return lambda p: p.get("exposed_comm_by_kind_s", {}).get(kind, 0.0)


def _layout(title: str, **kw) -> dict:
    base = {"title": {"text": title}, "margin": {"l": 70, "r": 20, "t": 50, "b": 55},
            "height": 420, "legend": {"orientation": "v"}}
    base.update(kw)
    return base


def _log_x(title="size (bytes)") -> dict:
    return {"type": "log", "title": {"text": title}, "exponentformat": "power"}


def _busbw(row_busbw, row_time, cand_time):
    """busbw of another candidate at the same size: busbw scales as 1/time."""
    return row_busbw * row_time / cand_time if cand_time > 0 else None


def sweep(result: dict, candidates: list | None, title: str) -> list:
    """busbw and time against size: the chosen algorithm/protocol, and every one considered."""
    rows = result.get("rows", [])
    sizes = [r["size"] for r in rows]
    bw_traces, t_traces = [], []
    if candidates:
        lines: dict[str, list] = {}
        for r, cands in zip(rows, candidates):
            for alg, proto, t_s in cands:
                lines.setdefault(f"{alg}/{proto}", []).append(
                    (r["size"], t_s * 1e6, _busbw(r["busbw"], r["time_us"], t_s * 1e6)))
        for name, pts in sorted(lines.items()):
            style = {"mode": "lines", "line": {"width": 1, "dash": "dot"}, "name": name,
                     "legendgroup": name, "opacity": 0.7}
            bw_traces.append({"type": "scatter", "x": [p[0] for p in pts],
                              "y": [p[2] for p in pts], **style})
            t_traces.append({"type": "scatter", "x": [p[0] for p in pts],
                             "y": [p[1] for p in pts], "showlegend": False, **style})
    chosen = [f"{r.get('algorithm', '')}/{r.get('protocol', '')}" for r in rows]
    style = {"mode": "lines+markers", "name": "chosen", "line": {"width": 3, "color": "black"},
             "marker": {"size": 7, "symbol": "circle"}, "text": chosen,
             "hovertemplate": "%{x} B: %{y:.4g}<br>%{text}<extra>chosen</extra>"}
    bw_traces.append({"type": "scatter", "x": sizes, "y": [r["busbw"] for r in rows], **style})
    t_traces.append({"type": "scatter", "x": sizes, "y": [r["time_us"] for r in rows],
                     **style, "showlegend": False})
    return [
        {"data": bw_traces, "layout": _layout(f"{title}: bus bandwidth", xaxis=_log_x(),
                                               yaxis={"title": {"text": "busbw (GB/s)"}})},
        {"data": t_traces, "layout": _layout(f"{title}: time", xaxis=_log_x(),
                                              yaxis={"type": "log", "title": {"text": "time (us)"},
                                                     "exponentformat": "power"})},
    ]


def measured_vs_predicted(points: list, title: str) -> list:
    """points: (size, {series name: busbw}, measured time us, predicted time us, error)."""
    sizes = [p[0] for p in points]
    names = []
    for p in points:
        names += [n for n in p[1] if n not in names]
    bw = []
    for n in names:
        pred = n.startswith("predicted")
        bw.append({"type": "scatter", "name": n, "x": sizes, "y": [p[1].get(n) for p in points],
                   "mode": "lines+markers", "line": {"dash": "dash" if pred else "solid"},
                   "marker": {"symbol": "x" if pred else "circle"}})
    times = [{"type": "scatter", "name": "measured", "x": sizes, "y": [p[2] for p in points],
              "mode": "lines+markers"},
             {"type": "scatter", "name": "predicted", "x": sizes, "y": [p[3] for p in points],
              "mode": "lines+markers", "line": {"dash": "dash"}, "marker": {"symbol": "x"}}]
    err = [{"type": "bar", "name": "error", "x": [str(s) for s in sizes],
            "y": [None if p[4] is None else 100 * p[4] for p in points],
            "marker": {"color": ["#e45756" if (p[4] or 0) > 0 else "#4c78a8" for p in points]},
            "hovertemplate": "%{x} B: %{y:+.1f}%<extra></extra>"}]
    return [
        {"data": bw, "layout": _layout(f"{title}: bus bandwidth, measured and predicted",
                                       xaxis=_log_x(), yaxis={"title": {"text": "busbw (GB/s)"}})},
        {"data": times, "layout": _layout(f"{title}: time", xaxis=_log_x(),
                                          yaxis={"type": "log", "title": {"text": "time (us)"},
                                                 "exponentformat": "power"})},
        {"data": err, "layout": _layout(f"{title}: prediction error per size "
                                        "(predicted busbw / measured - 1)", height=320,
                                        xaxis={"type": "category",
                                               "title": {"text": "size (bytes)"}},
                                        yaxis={"title": {"text": "error (%)"}, "zeroline": True},
                                        showlegend=False)},
    ]


def topology(topo: dict) -> list:
    """The machine: devices by kind, links coloured by technology (a duplex pair once)."""
    pos = {d[0]: (d[2], d[3]) for d in topo["devices"]}
    by_kind: dict[str, tuple[list, list]] = {}
    for src, dst, _tech, kind, _gbps in topo["links"]:
        xs, ys = by_kind.setdefault(kind, ([], []))
        (x0, y0), (x1, y1) = pos[src], pos[dst]
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    data = [{"type": "scatter", "mode": "lines", "name": f"{kind} links", "x": xs, "y": ys,
             "line": {"color": TECH_COLOURS.get(kind, "#333333"), "width": 2},
             "hoverinfo": "skip", "opacity": 0.75}
            for kind, (xs, ys) in sorted(by_kind.items())]
    kinds: dict[str, list] = {}
    for name, kind, x, y in topo["devices"]:
        kinds.setdefault(kind, []).append((name, x, y))
    for kind, devs in kinds.items():
        symbol, colour = DEVICE_STYLE.get(kind, ("circle", "#333333"))
        data.append({"type": "scatter", "mode": "markers", "name": kind,
                     "x": [d[1] for d in devs], "y": [d[2] for d in devs],
                     "text": [d[0] for d in devs], "hovertemplate": "%{text}<extra></extra>",
                     "marker": {"symbol": symbol, "color": colour, "size": 12,
                                "line": {"width": 1, "color": "black"}}})
    more = (f" (first {topo['nodes_drawn']} of {topo['nodes']} nodes drawn)"
            if topo["nodes"] > topo["nodes_drawn"] else "")
    hidden = {"visible": False, "showgrid": False, "zeroline": False}
    return [{"data": data, "layout": _layout(
        f"{topo['name']}: {topo['nranks']} GPUs, {topo['nodes']} node(s){more}", height=480,
        xaxis=hidden, yaxis=hidden, hovermode="closest")}]


def link_heatmap(links: dict, title: str) -> list:
    """Each link's utilisation (fraction of achievable bandwidth) over the collective."""
    edges = links["edges_us"]
    centres = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:])]
    peak = max((max(row) for row in links["util"] if row), default=1.0)
    data = [{"type": "heatmap", "z": links["util"], "x": centres, "y": links["names"],
             "zmin": 0, "zmax": max(1.0, peak), "colorscale": "Viridis",
             "colorbar": {"title": {"text": "utilisation"}},
             "hovertemplate": "%{y}<br>%{x:.1f} us: %{z:.2f}<extra></extra>"}]
    height = max(360, min(14 * len(links["names"]) + 140, 2400))
    return [{"data": data, "layout": _layout(
        title, height=height, xaxis={"title": {"text": "time (us)"}},
        yaxis={"automargin": True, "tickfont": {"size": 9}, "autorange": "reversed"},
        margin={"l": 240, "r": 20, "t": 50, "b": 55})}]


def timeline(trace: dict, title: str) -> list:
    """The schedule's ops as bars on one row per rank and channel (the Chrome trace's events)."""
    # [name, group, rank, channel, start_us, dur_us]; rank -1: what the time adds after them
    ops = trace["ops"] + trace.get("after_ops", [])
    rows = sorted({(o[2], o[3]) for o in ops})
    label = {rc: f"rank {rc[0]} ch {rc[1]}" if rc[0] >= 0 else "beyond the ops" for rc in rows}
    groups = []
    for o in ops:
        if o[1] not in groups:
            groups.append(o[1])
    data = []
    if len(groups) <= 12:
        for i, grp in enumerate(groups):
            sel = [o for o in ops if o[1] == grp]
            data.append(_bars(sel, label, grp, {"color": PARTS_COLOURS[i % len(PARTS_COLOURS)]}))
    else:  # many steps: one colour scale over the step's position in the schedule
        order = {g: i for i, g in enumerate(groups)}
        data.append(_bars(ops, label, "ops", {"color": [order[o[1]] for o in ops],
                                              "colorscale": "Viridis", "showscale": True,
                                              "colorbar": {"title": {"text": "step"}}}))
    height = max(320, min((18 if len(rows) <= 40 else 11) * len(rows) + 140, 2400))
    return [{"data": data, "layout": _layout(
        title, height=height, barmode="overlay", xaxis={"title": {"text": "time (us)"}},
        yaxis={"type": "category", "categoryorder": "array",
               "categoryarray": [label[rc] for rc in rows], "autorange": "reversed",
               "automargin": True, "tickfont": {"size": 9}})}]


def _bars(ops, label, name, marker) -> dict:
    return {"type": "bar", "orientation": "h", "name": name, "base": [o[4] for o in ops],
            "x": [o[5] for o in ops], "y": [label[(o[2], o[3])] for o in ops],
            "text": [o[0] for o in ops], "textposition": "none",
            "hovertemplate": "%{text}<br>%{base:.2f} us + %{x:.2f} us<extra></extra>",
            "marker": {**marker, "line": {"width": 0}}}


def plan_bars(variants: list, per: str) -> list:
    """variants: (label, plan dict). Where the step goes, and memory per GPU against HBM."""
    labels = [lab for lab, _ in variants]
    kinds = []
    for _, p in variants:
        kinds += [k for k in p.get("exposed_comm_by_kind_s", {}) if k not in kinds]
    parts: list[tuple[str, Callable[[dict], float]]] = [
        ("compute", lambda p: p["compute_time_s"])]
    parts += [(f"{k} exposed", _exposed(k)) for k in kinds]
    parts.append(("bubble", lambda p: p.get("bubble_s", 0.0)))
    steps = []
    for i, (name, get) in enumerate(parts):
        vals = [1e3 * get(p) for _, p in variants]
        if any(vals):
            steps.append({"type": "bar", "name": name, "x": labels, "y": vals,
                          "marker": {"color": PARTS_COLOURS[i % len(PARTS_COLOURS)]},
                          "hovertemplate": "%{x}: %{y:.3f} ms<extra>" + name + "</extra>"})
    steps.append({"type": "scatter", "mode": "markers", "name": "step time",
                  "x": labels, "y": [1e3 * p["step_time_s"] for _, p in variants],
                  "marker": {"symbol": "line-ew-open", "size": 30, "color": "black"}})
    mem_keys = []
    for _, p in variants:
        mem_keys += [k for k in p.get("memory_breakdown_bytes", {})
                     if k != "total" and k not in mem_keys]
    mem = []
    for i, k in enumerate(mem_keys):
        vals = [p.get("memory_breakdown_bytes", {}).get(k, 0.0) / 1e9 for _, p in variants]
        if any(vals):
            mem.append({"type": "bar", "name": k, "x": labels, "y": vals,
                        "marker": {"color": PARTS_COLOURS[i % len(PARTS_COLOURS)]}})
    mem.append({"type": "scatter", "mode": "lines+markers", "name": "HBM",
                "x": labels, "y": [p.get("hbm_bytes", 0.0) / 1e9 for _, p in variants],
                "line": {"color": "#d62728", "dash": "dash"}, "marker": {"symbol": "line-ew-open",
                                                                          "size": 30}})
    return [
        {"data": steps, "layout": _layout(f"where the time per {per} goes", barmode="stack",
                                          xaxis={"type": "category"},
                                          yaxis={"title": {"text": f"ms per {per}"}})},
        {"data": mem, "layout": _layout("memory per GPU against HBM", barmode="stack",
                                        xaxis={"type": "category"},
                                        yaxis={"title": {"text": "GB per GPU"}})},
    ]
