"""`gpucomm report`: one self-contained HTML report of saved results.

    gpucomm sim all_reduce_perf --system dgx-h100 --format json > sim.json
    gpucomm plan --model llama3-70b --tp 8 --format json > plan.json
    gpucomm report sim.json plan.json --output report.html

Inputs are any command's `--format json` output, or HTML reports written by `--html` (their
embedded sections, with topology and timeline, are taken over as they are).
"""
from __future__ import annotations

import sys

from ..errors import ConfigError
from ..inputs import json_file, read_text
from ._nccltests import retire
from .common import html_arg


def register(sub) -> None:
    p = sub.add_parser("report", help="one self-contained HTML report of saved JSON results",
                       description="Draw saved results (`--format json` of sim, bench, plan; "
                       "or HTML reports) into one self-contained HTML file.")
    p.add_argument("inputs", nargs="+", metavar="FILE", help="JSON results or HTML reports")
    p.add_argument("--output", type=html_arg, default="report.html", metavar="FILE.html")
    retire(p, "-o")
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    from ..report.data import entry, file_sha256
    from ..report.html import read_report, write_html
    entries = []
    for path in args.inputs:
        if path.endswith((".html", ".htm")):
            read_text(path, "report")   # a regular UTF-8 file within the size limit
            try:
                entries += read_report(path)["entries"]
            except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError,
                    RecursionError) as e:
                raise ConfigError(f"cannot read report {path!r}: {e}") from None
            continue
        result = json_file(path, "saved result (a command's --format json output)")
        entries.append(entry(result, command=f"(a saved result: {path})",
                             inputs={"file": path, "sha256": file_sha256(path)}))
    write_html(args.output, entries=entries, argv=args.argv)
    print(f"wrote {args.output} ({len(entries)} section{'s' if len(entries) != 1 else ''})",
          file=sys.stderr)
    return 0
