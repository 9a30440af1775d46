"""Do the views of a prediction show what `gpucomm sim` printed? Counts the cases that match.

For each case of a matrix (preset x nodes x NCCL algorithm x collective x size) this runs
`gpucomm sim ... --trace t.json --html r.html --format json` in this process and compares the
printed time with the Chrome trace's span (first op start to last op end), the HTML report's
timeline span and the time axis of its link heatmap. A case matches when all three lie within
1% of the printed time.

    PYTHONPATH=src python benchmarks/timed_views.py            # all cases, a summary line
    PYTHONPATH=src python benchmarks/timed_views.py -v         # every mismatch
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

PRESETS = ("dgx-a100", "dgx-b200", "dgx-h100", "dgx-v100", "gb200-nvl72", "hgx-h200", "mi300x",
           "pcie", "polaris")
ALGORITHMS = ("auto", "ring", "tree", "nvls", "nvls_tree", "pat")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
SIZES = ("64K", "64M")


def cases(quick: bool = False):
    for system in PRESETS:
        for nodes in (1,) if system == "gb200-nvl72" else (1, 2):
            for coll in COLLECTIVES:
                for alg in ALGORITHMS:
                    for size in SIZES[-1:] if quick else SIZES:
                        yield system, nodes, coll, alg, size


def span_us(events) -> float:
    xs = [(e["ts"], e["ts"] + e["dur"]) for e in events]
    return max(b for _, b in xs) - min(0.0, min(a for a, _ in xs)) if xs else 0.0


def run(system, nodes, coll, alg, size, tmp: Path, html: bool = True):
    """(printed us, trace span us, html timeline span us, heatmap end us) or None (error)."""
    from gpucomm.cli import main
    argv = ["sim", "--collective", coll, "--system", system, "--nodes", str(nodes),
            "--algorithm", alg, "-b", size, "-e", size, "--trace", str(tmp / "t.json"),
            "--format", "json"]
    if html:
        argv += ["--html", str(tmp / "r.html")]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except Exception as e:  # a view that crashes shows nothing: a mismatch
            if not out.getvalue():
                raise
            printed = json.loads(out.getvalue())["rows"][-1]["time_us"]
            return printed, f"crash: {type(e).__name__}: {e}", None, None
    if rc != 0:
        return None
    printed = json.loads(out.getvalue())["rows"][-1]["time_us"]
    trace = json.loads((tmp / "t.json").read_text())
    t_span = span_us([e for e in trace["traceEvents"] if e["ph"] == "X"])
    h_span = h_end = None
    if html:
        from gpucomm.report.html import read_report
        tr = read_report(tmp / "r.html")["entries"][0]["extras"]["trace"]
        h_span = span_us([{"ts": o[4], "dur": o[5]} for o in tr["ops"] + tr.get("after_ops", [])])
        h_end = tr["links"]["edges_us"][-1] if "links" in tr else None
    return printed, t_span, h_span, h_end


def close(a, b) -> bool:
    return isinstance(b, float) and abs(a - b) <= 0.01 * a


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", action="store_true", help="print every mismatch")
    ap.add_argument("--quick", action="store_true", help="one size (64M)")
    ap.add_argument("--no-html", action="store_true", help="the trace only")
    args = ap.parse_args()
    n = ok = 0
    with tempfile.TemporaryDirectory() as d:
        for case in cases(args.quick):
            got = run(*case, Path(d), html=not args.no_html)
            if got is None:
                continue
            n += 1
            printed, t, h, e = got
            good = close(printed, t) and (args.no_html or (close(printed, h) and
                                                            (e is None or close(printed, e))))
            ok += good
            if args.v and not good:
                print(f"{' '.join(map(str, case))}: printed {printed:.2f} us, trace {t}, "
                      f"html {h}, heatmap {e}", file=sys.stderr)
    print(f"{ok} of {n} cases: trace{'' if args.no_html else ', HTML timeline and heatmap'} "
          "within 1% of the printed time")


if __name__ == "__main__":
    main()
