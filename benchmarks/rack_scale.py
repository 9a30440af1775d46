"""NVLink vs the network at rack scale: a TP group of 16 inside a GB200 NVL72 rack, spanning two
DGX B200 nodes, and spanning two NVL72 racks (8 GPUs in each). One command, the CLI as a user
runs it:

    PYTHONPATH=src python3 benchmarks/rack_scale.py [--sizes 1M,16M,256M]

Prints, per collective and size, the busbw `gpucomm sim` predicts for the three placements
(bf16, the TP group's collectives: all-reduce, and with sequence parallelism all-gather and
reduce-scatter; all-to-all for an EP group of 16), then `gpucomm plan` for a Llama 3 70B
training step at TP=16 on the same three, the DGX B200 nodes given the GB200's GPU
(`--gpu gb200`) so that only the interconnect differs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLACEMENTS = {   # label -> cluster flags (16 GPUs each)
    "NVL72 rack": ["--system", "gb200-nvl72", "--gpus-per-node", "16"],
    "2x DGX B200": ["--system", "dgx-b200", "--nodes", "2"],
    "2 racks (8+8)": ["--system", "gb200-nvl72", "--nodes", "2", "--gpus-per-node", "8"],
}
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
PLAN = ["--model", "llama3-70b", "--tp", "16", "--seq", "8192", "--global-batch", "16"]


def gpucomm(*argv) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-m", "gpucomm", *argv, "--format", "json"],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode:
        sys.exit(f"gpucomm {' '.join(argv)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1M,16M,256M", help="message sizes (nccl-tests S)")
    args = ap.parse_args()
    sizes = args.sizes.split(",")
    labels = list(PLACEMENTS)
    print(f"{'collective':<15}{'size':>6}" + "".join(f"{lab:>16}" for lab in labels)
          + f"{'rack/DGX':>10}{'rack/2 racks':>14}")
    print(f"{'':<21}" + "".join(f"{'busbw GB/s':>16}" for _ in labels))
    for coll in COLLECTIVES:
        rows = {}
        for lab, flags in PLACEMENTS.items():
            for size in sizes:
                r = gpucomm("sim", *flags, "--collective", coll, "-b", size, "-e", size,
                            "-d", "bfloat16")
                rows[(lab, size)] = r["rows"][0]
        for size in sizes:
            bw = [rows[(lab, size)]["busbw"] for lab in labels]
            algs = "/".join(rows[(lab, size)]["algorithm"] for lab in labels)
            print(f"{coll:<15}{size:>6}" + "".join(f"{b:>16.1f}" for b in bw)
                  + f"{bw[0] / bw[1]:>9.2f}x{bw[0] / bw[2]:>13.2f}x   {algs}")
    print()
    print("Llama 3 70B training step, TP=16, 16 x 8192 tokens (gpucomm plan):")
    print(f"{'':<28}" + "".join(f"{lab:>16}" for lab in labels))
    res = {}
    for lab, flags in PLACEMENTS.items():
        extra = ["--gpu", "gb200"] if "dgx-b200" in flags else []
        res[lab] = gpucomm("plan", *PLAN, *flags, *extra)
    for key, name in (("step_time_s", "step time (s)"), ("exposed_comm_s", "exposed comm (s)"),
                      ("tokens_per_s", "tokens/s"), ("mfu", "MFU")):
        vals = [res[lab][key] for lab in labels]
        fmt = "{:>16.1%}" if key == "mfu" else "{:>16,.0f}" if key == "tokens_per_s" \
            else "{:>16.3f}"
        print(f"{name:<28}" + "".join(fmt.format(v) for v in vals))
    step = [res[lab]["step_time_s"] for lab in labels]
    print(f"{'step time vs the rack':<28}" + "".join(f"{s / step[0]:>15.2f}x" for s in step))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
