"""One self-contained HTML report: plotly.js, styles and data inlined; it opens offline.

Why plotly: it writes interactive charts (zoom, hover, log axes, heatmaps, stacked bars) into
one file with its JavaScript inlined, needs no server, and is a well-kept library
(`pip install 'gpucomm[html]'`). Only its bundled plotly.min.js is used: the figures are plain
dicts (figures.py), so the page carries the data once, as JSON, next to the charts drawn
from it.

    write_html("r.html", json_result)              # any command's --format json value
    write_html("r.html", rows, argv=sys.argv[1:], topology=topo, sims=results, traced=res)

The page records script errors and console errors itself and, once every chart has drawn,
writes {"charts", "drawn", "errors"} into #gpucomm-status (the browser test reads it).
"""
from __future__ import annotations

import html
import json
import math
from pathlib import Path

from ..errors import ConfigError
from ..outputs import write_text
from . import figures
from .data import args_inputs, bench_rows, entry, topology_drawing, trace_data, version

DATA_ID = "gpucomm-data"
MAX_TABLE_ROWS = 60


def write_html(path, result=None, *, entries=None, kind=None, title=None, args=None,
               argv=None, inputs=None, topology=None, sims=None, traced=None,
               schedule=None) -> str:
    """Write a report of `result` (a command's JSON value) or of ready `entries` to `path`.

    `topology` (a Topology) adds its drawing; `sims` (the SimResults of a sweep) adds every
    algorithm/protocol auto considered per size; `traced` (a SimResult with a timeline) adds
    the per-rank timeline and, with `topology`, each link's utilisation (exact flow-model
    rates with the `schedule` that was traced). `args` (a command's
    parsed options) gives the command line and inputs at the top. Returns the path."""
    if args is not None:
        argv = getattr(args, "argv", None) if argv is None else argv
        inputs = args_inputs(args) if inputs is None else inputs
    if entries is None:
        extras: dict[str, object] = {}
        if topology is not None:
            extras["topology"] = topology_drawing(topology)
        if sims:
            extras["candidates"] = [[list(c) for c in s.candidates] for s in sims]
        if traced is not None:
            extras["trace"] = trace_data(traced, topology, schedule)
        entries = [entry(result, kind=kind, title=title, argv=argv, inputs=inputs,
                         extras=extras)]
    check_plotly()
    doc = render(report_doc(entries, argv))
    write_text(path, doc, "report")
    return str(path)


def check_plotly() -> None:
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise ConfigError("--html needs plotly: pip install 'gpucomm[html]' "
                          "(or pip install plotly)") from None


def report_doc(entries: list, argv=None) -> dict:
    from .data import command_line
    return {"gpucomm_report": 1, "version": version(), "command": command_line(argv),
            "entries": entries}


def read_report(path) -> dict:
    """The data a report embeds, from its HTML file."""
    text = Path(path).read_text(encoding="utf-8")
    start = text.find(f'<script type="application/json" id="{DATA_ID}">')
    if start < 0:
        raise ConfigError(f"{path}: not a gpucomm HTML report (no embedded {DATA_ID})")
    start = text.index(">", start) + 1
    return json.loads(text[start:text.index("</script>", start)])


def figures_of(e: dict) -> list:
    """(section name, figure) for every chart of one entry."""
    kind, r, x = e["kind"], e["result"], e.get("extras", {})
    out = []
    if kind == "sim":
        name = f"{r.get('collective')} on {r.get('topology')}"
        out += [("sweep", f) for f in figures.sweep(r, x.get("candidates"), name)]
    elif kind == "sim_compare":
        pts = [(row["size"], {"measured": row["measured_busbw"],
                              "predicted": row["predicted_busbw"]},
                row["measured_time_us"], row["predicted_time_us"], row.get("busbw_error"))
               for row in r["rows"]]
        out += [("measured", f) for f in figures.measured_vs_predicted(pts, r.get("collective"))]
    elif kind == "bench":
        rows = bench_rows(r)
        name = e.get("inputs", {}).get("collective") or (
            rows[0].get("algorithm", "bench") if rows else "bench")
        out += [("measured", f) for f in figures.measured_vs_predicted(_bench_points(rows), name)]
    elif kind in ("plan", "plan_compare", "plan_search"):
        variants = _plan_variants(kind, r)
        per = "token" if variants[0][1].get("mode") == "decode" else "step"
        out += [("plan", f) for f in figures.plan_bars(variants, per)]
    if "topology" in x:
        out += [("topology", f) for f in figures.topology(x["topology"])]
    tr = x.get("trace")
    if tr:
        what = (f"{tr['collective']} {tr['algorithm']}/{tr['protocol']}, {tr['size']} B, "
                f"{tr['model']} model")
        if tr.get("links"):
            more = (f", the {len(tr['links']['names'])} busiest of {tr['links']['links_total']}"
                    if tr["links"]["links_total"] > len(tr["links"]["names"]) else "")
            out += [("links", f) for f in figures.link_heatmap(
                tr["links"], f"link utilisation ({tr['links'].get('method', '')}): {what}{more}")]
        more = (f" (ranks 0..{tr['ranks_shown'] - 1} of {tr['nranks']})"
                if tr["ranks_shown"] < tr["nranks"] else "")
        out += [("timeline", f) for f in figures.timeline(tr, f"timeline per rank and channel: "
                                                              f"{what}{more}")]
    return out


def _bench_points(rows) -> list:
    pts = []
    for row in rows:
        series = {"measured (out-of-place)": row.get("busbw"),
                  "measured (in-place)": row.get("ip_busbw")}
        pred_t, t = row.get("predicted_time_us"), row.get("time_us")
        pred_bw = row["busbw"] * t / pred_t if pred_t and t and row.get("busbw") else None
        series["predicted"] = pred_bw
        err = (pred_bw / row["busbw"] - 1) if pred_bw and row.get("busbw") else None
        pts.append((row["size"], series, t, pred_t, err))
    return pts


def _plan_variants(kind, r) -> list:
    if kind == "plan":
        return [(_layout_label(r), r)]
    if kind == "plan_compare":
        return [(p.get("variant") or "as given", p) for p in r]
    ranked = r["ranked"] if isinstance(r, dict) else r  # plan --search: {"ranked": [...]}
    return [(f"#{i} {_layout_label(p)}", p) for i, p in enumerate(ranked, 1)]


def _layout_label(p) -> str:
    lay = p.get("layout", {})
    return " ".join(f"{k}={lay[k]}" for k in ("tp", "pp", "dp", "cp", "ep") if lay.get(k, 1) != 1
                    or k == "tp") or "layout"


def render(doc: dict) -> str:
    """The HTML page of a report document."""
    from plotly.offline import get_plotlyjs  # the optional extra: checked by the caller
    figs: list = []
    body: list = []
    for i, e in enumerate(doc["entries"]):
        body.append(_entry_html(i, e, figs))
    data = _script_json(doc)
    fig_json = _script_json([{"id": f"fig-{k}", "section": s, "data": f["data"],
                              "layout": f["layout"]} for k, (s, f) in enumerate(figs)])
    cmds = "".join(f"<li><code>{html.escape(e['command'])}</code></li>" for e in doc["entries"]
                   if e["command"] != doc["command"])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>gpucomm report</title>
<script>{_ERROR_HOOK}</script>
<style>{_CSS}</style>
<script>{get_plotlyjs()}</script>
</head><body>
<header id="report-header"><h1>gpucomm report</h1>
<table class="meta"><tr><th>command</th><td><code id="report-command">{html.escape(doc['command'])}</code></td></tr>
<tr><th>gpucomm</th><td id="report-version">{html.escape(doc['version'])}</td></tr>
<tr><th>sections</th><td>{len(doc['entries'])}{'<ul>' + cmds + '</ul>' if cmds else ''}</td></tr></table>
</header>
{''.join(body)}
<pre id="gpucomm-status" hidden></pre>
<script type="application/json" id="{DATA_ID}">{data}</script>
<script type="application/json" id="gpucomm-figures">{fig_json}</script>
<script>{_RENDER}</script>
</body></html>
"""


def _entry_html(i: int, e: dict, figs: list) -> str:
    parts = [f'<section class="entry" id="entry-{i}" data-kind="{e["kind"]}">',
             f"<h2>{html.escape(e['title'])}</h2>",
             '<table class="meta">'
             f"<tr><th>command</th><td><code>{html.escape(e['command'])}</code></td></tr>"
             f"<tr><th>gpucomm</th><td>{html.escape(e['version'])}</td></tr>"
             f"<tr><th>created</th><td>{html.escape(e.get('created', ''))}</td></tr></table>",
             "<details><summary>inputs</summary><pre class=\"inputs\">"
             f"{html.escape(json.dumps(e.get('inputs', {}), indent=1))}</pre></details>"]
    current = None
    for section, fig in figures_of(e):
        if section != current:
            if current is not None:
                parts.append("</div>")
            parts.append(f'<h3>{_SECTION_NAMES[section]}</h3>'
                         f'<div class="section" data-section="{section}">')
            current = section
        parts.append(f'<div class="chart" id="fig-{len(figs)}"></div>')
        figs.append((section, fig))
    if current is not None:
        parts.append("</div>")
    parts.append(_table(e["result"]))
    parts.append("</section>")
    return "\n".join(parts)


_SECTION_NAMES = {"sweep": "Bus bandwidth and time against size",
                  "measured": "Measured against predicted",
                  "plan": "Step time and memory", "topology": "Topology",
                  "links": "Link utilisation", "timeline": "Timeline"}


def _table(result) -> str:
    rows = result.get("rows") if isinstance(result, dict) else result
    if not isinstance(rows, list) or not rows or not isinstance(rows[0], dict):
        return ('<details class="table"><summary>result (JSON)</summary><pre>'
                f"{html.escape(json.dumps(result, indent=1))}</pre></details>")
    cols = [k for k in rows[0] if not isinstance(rows[0][k], (dict, list))]
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in cols)
                   + "</tr>" for r in rows[:MAX_TABLE_ROWS])
    more = (f"<p>{len(rows) - MAX_TABLE_ROWS} more rows in the embedded data</p>"
            if len(rows) > MAX_TABLE_ROWS else "")
    return (f'<details class="table"><summary>result table ({len(rows)} rows)</summary>'
            f"<table class=\"rows\"><tr>{head}</tr>{body}</table>{more}</details>")


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "" if v is None else str(v)


def _script_json(obj) -> str:
    """JSON safe inside <script>: no "<" at all, so nothing can close or open an element."""
    return json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False,
                      default=_plain).replace("<", "\\u003c")


def _finite(obj):
    """NaN and infinities (not JSON) as null, numpy values as Python ones."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if hasattr(obj, "tolist"):
        return _finite(obj.tolist())
    return obj


def _plain(o):
    raise ConfigError(f"the report cannot embed a {type(o).__name__} value")


_ERROR_HOOK = """window.gpucommErrors=[];
window.addEventListener('error',function(e){window.gpucommErrors.push('error: '+e.message);});
window.addEventListener('unhandledrejection',function(e){window.gpucommErrors.push('rejection: '+e.reason);});
(function(){var ce=console.error;console.error=function(){
window.gpucommErrors.push('console.error: '+Array.prototype.join.call(arguments,' '));
return ce.apply(console,arguments);};})();"""

_RENDER = """(function(){
var figs=JSON.parse(document.getElementById('gpucomm-figures').textContent);
var status=document.getElementById('gpucomm-status');
function drawn(gd){return gd.querySelectorAll('.cartesianlayer .trace path, .cartesianlayer .hm image').length;}
var jobs=figs.map(function(f){
  var div=document.getElementById(f.id);
  return Plotly.newPlot(div,f.data,f.layout,{responsive:true,displaylogo:false}).then(function(gd){
    var n=drawn(gd); gd.setAttribute('data-drawn',String(n));
    if(!n){window.gpucommErrors.push('chart '+f.id+' ('+f.section+') drew nothing');}
    return n;
  }).catch(function(e){window.gpucommErrors.push('chart '+f.id+': '+e);return 0;});
});
Promise.all(jobs).then(function(ns){
  status.textContent=JSON.stringify({charts:figs.length,drawn:ns.filter(function(n){return n>0;}).length,
    errors:window.gpucommErrors});
  document.body.setAttribute('data-rendered','1');
});
})();"""

_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1280px;padding:0 16px;color:#222}
h1{margin:16px 0 8px}h2{border-top:2px solid #ddd;padding-top:14px}h3{margin:18px 0 4px;color:#444}
table.meta th{text-align:left;padding-right:12px;color:#555;font-weight:600;vertical-align:top}
code{background:#f4f4f4;padding:1px 4px;border-radius:3px;word-break:break-all}
.chart{width:100%;min-height:300px}
table.rows{border-collapse:collapse;font-size:12px}table.rows td,table.rows th{border:1px solid #ddd;padding:2px 6px;text-align:right}
pre{background:#f8f8f8;padding:8px;overflow:auto;max-height:360px;font-size:12px}
details{margin:8px 0}"""
