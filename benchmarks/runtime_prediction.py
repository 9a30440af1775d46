"""How far bench's prediction for this host is from what the runtime measures, through the CLI.

    PYTHONPATH=src python3 benchmarks/runtime_prediction.py [--collectives all_reduce,...]
                                                            [--ranks 2] [--min 2K] [--max 32M]

For each collective, `gpucomm bench -g RANKS -b MIN -e MAX -f 4 --format json` (a subprocess,
as a user runs it; the calibration in ~/.cache/gpucomm/host.yaml, or a quick one made on the
first run) prints the out-of-place time it measured and the time its predictor gave for the
same row (`bench.plancost`: the runtime's own plan priced at the calibrated rates). Printed:
per row predicted/measured, per collective and in all the geometric mean of its distance
from 1 (x1.00 is exact; x1.5 is 50% off, either way), and the same from 128 KiB on, where
bandwidth rather than per-call cost decides. No bar: the numbers are this host's; compare a
change against the run before it on the same host.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


def rows(coll: str, ranks: int, lo: str, hi: str) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"),
                                                       os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "gpucomm", "bench", "--collective", coll, "-g", str(ranks),
           "-b", lo, "-e", hi, "-f", "4", "-n", "20", "-w", "5", "-c", "0", "--format", "json"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)["rows"]


def spread(logs: list[float]) -> str:
    return f"x{math.exp(sum(abs(x) for x in logs) / len(logs)):.2f}" if logs else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collectives", default=",".join(COLLECTIVES))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--min", default="2K")
    ap.add_argument("--max", default="32M")
    args = ap.parse_args()
    every, large = [], []
    for coll in args.collectives.split(","):
        logs, big = [], []
        print(f"\n== {coll}, {args.ranks} ranks, out of place: measured / predicted us")
        for r in rows(coll, args.ranks, args.min, args.max):
            pred = r.get("predicted_time_us")
            if not pred or not r["time_us"]:
                continue
            err = math.log(pred / r["time_us"])
            logs.append(err)
            if r["size"] >= 128 << 10:
                big.append(err)
            print(f"  {r['size']:>10} B  {r['time_us']:10.1f}  {pred:10.1f}  "
                  f"predicted/measured {pred / r['time_us']:5.2f}")
        print(f"  distance from 1 (geometric mean): {spread(logs)}; from 128 KiB: "
              f"{spread(big)}")
        every += logs
        large += big
    print(f"\n== all: {spread(every)} over {len(every)} rows; from 128 KiB: {spread(large)} "
          f"over {len(large)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
