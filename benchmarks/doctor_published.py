"""`gpucomm doctor` on every published nccl-tests table, rendered as the log nccl-tests prints.

    PYTHONPATH=src python3 benchmarks/doctor_published.py [--data FILE] [--keep DIR]

Each table of the published data (data/published/) becomes an nccl-tests log (header, one
`# Rank` line per GPU with a host per node, the table, the footer: tests/nccl_logs.py); the
logs go to `gpucomm doctor --format json` in one subprocess, as a user would run it. Printed:
per table whether doctor inferred the collective, GPU model, node count and GPUs per node the
table states, and its verdict. Bar (issue 14): all four right for every table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import nccl_logs  # noqa: E402
from gpucomm.collectives import get_collective  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(nccl_logs.DATA))
    ap.add_argument("--keep", metavar="DIR", help="write the rendered logs here")
    args = ap.parse_args(argv)
    tables = json.loads(Path(args.data).read_text())
    out_dir = Path(args.keep or tempfile.mkdtemp(prefix="gpucomm-doctor-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in tables:
        path = out_dir / f"{t['id']}.log"
        path.write_text(nccl_logs.render(t))
        paths.append(str(path))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, "-m", "gpucomm", "doctor", *paths, "--format",
                           "json"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        print(proc.stderr.strip())
        return 1
    docs = json.loads(proc.stdout)["logs"]
    ok_all, ratios = 0, []
    print(f"{'table':46s} {'coll':>5s} {'gpu':>4s} {'nodes':>5s} {'g/n':>4s}  verdict")
    for t, d in zip(tables, docs):
        checks = (d["collective"] == get_collective(t["collective"]).name,
                  d["gpu"] == nccl_logs.device_of(t)[1], d["nodes"] == t["nodes"],
                  d["gpus_per_node"] == t["gpus_per_node"])
        ok_all += all(checks)
        if d["ratio"]:
            ratios.append(d["ratio"])
        marks = ["ok" if c else "WRONG" for c in checks]
        print(f"{t['id'][:46]:46s} {marks[0]:>5s} {marks[1]:>4s} {marks[2]:>5s} {marks[3]:>4s}  "
              f"{d['verdict'][:70]}")
    print(f"\n{ok_all}/{len(tables)} tables: collective, GPU model, nodes and GPUs per node "
          f"inferred right (bar: all) {'PASS' if ok_all == len(tables) else 'FAIL'}")
    if ratios:
        print(f"measured / expected busbw at each table's largest size: median "
              f"{statistics.median(ratios):.2f}, range {min(ratios):.2f}..{max(ratios):.2f}")
    return 0 if ok_all == len(tables) else 1


if __name__ == "__main__":
    sys.exit(main())
