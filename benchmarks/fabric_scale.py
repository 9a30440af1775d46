"""The contended flow model at cluster scale: 8,192 GPUs, ECMP, random placement, in <= 30 s
and <= 4 GB (issue 25, item 6).

    PYTHONPATH=src python3 benchmarks/fabric_scale.py [--nodes 1024] [--size 4G]

Each case is `gpucomm sim ... --sim-model flow --format json` run as a subprocess (the CLI
users run) on N x DGX H100 (8 GPUs, 8 x RoCE 400G each) on a rail-optimised two-tier fabric
(`--fabric rail-2tier --leaf-ports 32`), the job's nodes placed at random. Wall time is the
child's; peak memory is its own maximum resident set (os.wait4's rusage, ru_maxrss), so
the cases do not mask each other. Bars: every case answers (or refuses with its one-line
error) within TIME_S and MEMORY_B; and the contention shows: the ring with ECMP (1 QP per
connection) is slower than the even split (spray), 4 QPs in between. The exit status is 1
if any bar fails.

How the ring gets there: a ring with more than core.FLOW_RING_OPS ops (8,192 GPUs x 8
channels x 16,382 steps is 10^9) is answered from its frontier (the ring's max-plus
recurrence, simulate/frontier.py) with every op at its max-min fair rate among one step's
ops, which is the event loop's answer where the most loaded link stays busy
(tests/test_fabric_scale.py checks it to 1e-9 on clusters small enough for both).
Tree and nvls_tree are NCCL's closed forms with the fabric's pace (simulate/nccl.py). An
all-to-all (P^2 ops in one step) past paths.MAX_STEP_OPS is refused before it is built, with
the size allowed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIME_S = 30.0
MEMORY_B = 4 << 30


def run(args: list[str]) -> tuple[float, int, int, str, str]:
    """(wall s, peak RSS bytes, exit status, stdout, stderr) of one `gpucomm` child, reaped
    with os.wait4 so the RSS is this child's own."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "gpucomm", *args], stdout=out,
                                 stderr=err, env=env, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return wall, int(usage.ru_maxrss) * 1024, child.returncode, out.read(), err.read()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--size", default="4G")
    a = ap.parse_args(argv)
    base = ["sim", "--collective", "all_reduce", "--system", "dgx-h100", "--nodes",
            str(a.nodes), "--nic", "roce-400g", "--fabric", "rail-2tier", "--leaf-ports", "32",
            "--placement", "random", "-b", a.size, "-e", a.size, "--sim-model", "flow",
            "--format", "json"]
    cases = {
        "ring ECMP 1 QP": ["--algorithm", "ring", "--routing", "ecmp"],
        "ring ECMP 4 QPs": ["--algorithm", "ring", "--routing", "ecmp",
                            "--qps-per-connection", "4"],
        "ring spray": ["--algorithm", "ring", "--routing", "spray"],
        "tree ECMP 1 QP": ["--algorithm", "tree", "--routing", "ecmp"],
        "auto ECMP 1 QP": ["--algorithm", "auto", "--routing", "ecmp"],
        "all-to-all ECMP": ["--collective", "all_to_all", "--routing", "ecmp"],
    }
    print(f"{a.nodes} x DGX H100 ({8 * a.nodes:,} GPUs), RoCE 400G, rail-2tier leaf-ports 32, "
          f"random placement, all-reduce {a.size}, flow model; bars: <= {TIME_S:.0f} s, "
          f"<= {MEMORY_B >> 30} GB")
    failed = 0
    busbw: dict[str, float] = {}
    for name, extra in cases.items():
        wall, rss, code, out, err = run(base + extra)
        if code == 0:
            row = json.loads(out)["rows"][0]
            busbw[name] = float(row["busbw"])
            what = f"{row['busbw']:8.2f} GB/s busbw ({row['algorithm']}/{row['protocol']})"
        else:
            what = "refused: " + (err.strip().splitlines() or ["?"])[-1]
        ok = wall <= TIME_S and rss <= MEMORY_B and (code == 0 or "error:" in err)
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {name:16s} {wall:6.1f} s {rss / 1e9:5.2f} GB  {what}")
    order = [busbw.get(k) for k in ("ring ECMP 1 QP", "ring ECMP 4 QPs", "ring spray")]
    ok = None not in order and order[0] < order[1] < order[2]  # type: ignore[operator]
    failed += not ok
    print(f"{'PASS' if ok else 'FAIL'}  contention shows: ring busbw ECMP 1 QP < 4 QPs < spray "
          f"({' < '.join('-' if x is None else f'{x:.1f}' for x in order)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
