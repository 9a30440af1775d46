"""The hostile CLI inputs of issues 11 and 29, run as a user runs them (`python -m gpucomm
...` in a fresh process, 60 s and 6 GiB each): every one must end in a one-line error and
exit 2 (or, where the input is valid, exit 0) — no traceback, no hang, no silently wrong
number. Issue 29's corpus is tests/data/hostile/cases.txt (also run in-process by
tests/test_hostile_corpus.py); its error lines must also hold the text the case names.

    python benchmarks/hostile_cli.py            # prints one line per input and a summary
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
LIMIT_S, MEMORY = 60, 6 << 30
sys.path.insert(0, os.path.join(os.path.dirname(SRC), "tests"))


def corpus(tmp: str) -> list[list[str]]:
    binary = os.path.join(tmp, "noise.yaml")
    with open(binary, "wb") as f:
        f.write(bytes(range(256)) * 8)
    d, txt = tmp, os.path.join(tmp, "x.txt")
    out = []
    long_name = os.path.join(tmp, "a" * 300 + ".png")
    for bad in (d, os.path.join(tmp, "no", "x.png"), "/proc/x.png", long_name, txt):
        out += [["sim", "-e", "1K", "--plot", bad], ["topo", "show", "--plot", bad],
                ["bench", "-e", "1K", "--plot", bad]]
    for bad in (d, os.path.join(tmp, "no", "x.json"), "/proc/x.json", txt):
        out += [["sim", "-e", "1K", "--trace", bad], ["topo", "export", "--output", bad]]
    out += [["sim", "--topology", binary], ["sim", "--compare", binary],
            ["plan", "--model", binary], ["sim", "--compare", "/dev/zero"],
            ["sim", "-b", "9" * 5000], ["algo", "show", "ring", "all_reduce", "--ranks", "9" * 30],
            ["bench", "--timeout", "0"], ["bench", "--timeout", "-1"],
            ["bench", "--algorithm", "nvls"], ["bench", "--algorithm", "bogus"],
            ["sim", "--nodes", "100000"], ["plan", "--model", "llama3-8b", "--nodes", "100000"],
            ["topo", "show", "--nodes", "100000"],
            ["algo", "show", "ring", "all_reduce", "--ranks", "100000"],
            ["algo", "verify", "--all", "--max-ranks", "100000"], ["sim", "-f", "1.000001"],
            ["bench", "--nranks", "1000"],
            ["algo", "run", "ring", "all_reduce", "--ranks", "100000"],
            ["bench", "-b", "1", "-e", "1G", "-i", "1"], ["bench", "-e", "100G"],
            ["sim", "-b", "10000000000000000000", "-e", "10000000000000000000"],
            ["sim", "-b", "100000000000000000000", "-e", "100000000000000000000"],
            ["sim", "--plot", d, "-e", "1K"], ["sim", "-f", "nan"], ["sim", "-f", "inf"],
            ["bench", "-f", "nan"], ["bench", "-w", "-1"], ["bench", "--check", "7"],
            ["plan", "--model", "llama3-8b", "--pp", "2", "--vpp", "7"],
            ["bench", "--collective", "sendrecv"], ["sim", "-o", "avg", "-d", "int32"],
            ["demo", "--ranks", "100000"], ["topo", "route", "0", "0"]]
    return out


def _limits():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def main() -> int:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        from hostile_cases import cases as corpus29
        from hostile_cases import prepare
        prepare(tmp)
        cases = [(argv, "") for argv in corpus(tmp)]
        cases += [(list(c.argv), c.message if c.expect == "error" else None)
                  for c in corpus29(tmp)]
        for argv, message in cases:
            t0 = time.perf_counter()
            try:
                p = subprocess.run([sys.executable, "-m", "gpucomm", *argv], capture_output=True,
                                   text=True, timeout=LIMIT_S, env=env, preexec_fn=_limits)
                code, err = p.returncode, p.stderr
            except subprocess.TimeoutExpired:
                code, err = None, "HANG"
            secs = time.perf_counter() - t0
            lines = err.strip().splitlines()
            ok = code == 0 if message is None else code == 0 and message == "" or (
                code == 2 and len(lines) == 1 and "Traceback" not in err
                and message.lower() in err.lower())
            bad += not ok
            shown = " ".join(a if len(a) < 40 else a[:37] + "..." for a in argv)
            print(f"{'ok ' if ok else 'BAD'} exit {code} {secs:5.1f} s  gpucomm {shown}\n"
                  f"      {(lines[-1] if lines else '(no error)')[:150]}", flush=True)
    print(f"{len(cases) - bad}/{len(cases)} hostile inputs handled cleanly; {bad} not")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
