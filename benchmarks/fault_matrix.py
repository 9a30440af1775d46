"""The runtime's fault matrix over several seeds: a peer killed or frozen at a random moment
in a random collective, on shm, torch, MPI and the torch backend (tests/test_fault_matrix.py,
run with pytest per seed). Prints, per transport and action, the cases, how many survivors
named the peer, the slowest time from the last good call to the error, and what was left in
/dev/shm.

    python3 benchmarks/fault_matrix.py [--seeds 3]
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    rows, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            report = os.path.join(tmp, f"seed{seed}.jsonl")
            env = dict(os.environ, GPUCOMM_FAULT_SEED=str(seed), GPUCOMM_FAULT_REPORT=report,
                       PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"),
                                                   os.environ.get("PYTHONPATH", "")]))
            p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                                "-n", "0", os.path.join(ROOT, "tests", "test_fault_matrix.py")],
                               env=env, capture_output=True, text=True, cwd=ROOT)
            failed += p.returncode != 0
            print(f"seed {seed}: {p.stdout.strip().splitlines()[-1]}", flush=True)
            for line in p.stdout.splitlines():  # why a case failed: its assertion message
                if line.startswith("E   ") and "Error:" in line:
                    print(f"  {line[4:].strip()[:300]}", flush=True)
            if os.path.exists(report):
                rows += [json.loads(line) for line in open(report)]
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["transport"], r["action"])].append(r)
    print(f"\n{'transport':<9} {'action':<6} {'cases':>5} {'named':>9} {'max to error s':>14} "
          f"{'left in shm':>11}")
    for (transport, action), rs in sorted(groups.items()):
        named = sum(sum(r["named"]) for r in rs)
        total = sum(len(r["named"]) for r in rs)
        print(f"{transport:<9} {action:<6} {len(rs):>5} {f'{named}/{total}':>9} "
              f"{max(r['to_error_s'] for r in rs):>14.2f} {sum(len(r['left']) for r in rs):>11}")
    print(f"\ncollectives: {sorted({r['collective'] for r in rows})}; timeout 3 s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
