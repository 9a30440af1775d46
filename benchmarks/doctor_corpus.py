"""`gpucomm doctor LOG` with no flags on every raw public log of data/logs, as a new user runs it.

    python3 benchmarks/doctor_corpus.py [--src PATH/TO/src]

Counts per file: a verdict for every test (exit 0), an ask for a flag ('give --…'), or a
failure (any other error). `--src` runs another checkout's gpucomm on the same files (the
before/after of issue 23: `--src /work/main/src`).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=str(ROOT / "src"), help="the gpucomm source tree to run")
    ap.add_argument("-q", action="store_true", help="print only the totals")
    args = ap.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=args.src)
    counts = {"verdict": 0, "ask": 0, "failure": 0}
    tests = 0
    files = sorted((ROOT / "data" / "logs").glob("*.log"))
    for path in files:
        proc = subprocess.run([sys.executable, "-m", "gpucomm", "doctor", str(path)],
                              capture_output=True, text=True, env=env, timeout=600)
        err = (proc.stderr.strip().splitlines() or [""])[-1]
        kind = "verdict" if proc.returncode == 0 else "ask" if "give -" in err else "failure"
        counts[kind] += 1
        n = proc.stdout.count("\nverdict:")
        tests += n
        if not args.q:
            print(f"{path.name:45s} {kind:8s} " + (f"{n} test(s)" if n else err[:110]))
    print(f"{len(files)} files: {counts['verdict']} verdicts ({tests} tests diagnosed), "
          f"{counts['ask']} asks for a flag, {counts['failure']} failures")
    return 0 if counts["verdict"] == len(files) else 1


if __name__ == "__main__":
    sys.exit(main())
