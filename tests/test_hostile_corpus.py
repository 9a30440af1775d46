"""The hostile-input corpus of issue 29 (tests/data/hostile/cases.txt), run in-process: every
case ends in exit 2 with one line naming what is wrong (or exit 0 where the input is fine),
within a time bound, leaving no process behind. benchmarks/hostile_cli.py runs the same cases
as a user would, one `gpucomm` process each."""
import os
import signal
import time

import pytest

from gpucomm.cli import main
from hostile_cases import cases, prepare

LIMIT_S = 30


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    prepare(tmp)
    return tmp


def _children() -> set[int]:
    """Pids of this process's children (from /proc: no psutil needed)."""
    me, out = str(os.getpid()), set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[1] == me:
                        out.add(int(pid))
            except (OSError, IndexError):
                continue
    return out


def _alarm(signum, frame):
    raise TimeoutError(f"ran past {LIMIT_S} s")


@pytest.mark.parametrize("case", cases("{T}"), ids=lambda c: c.id)
def test_hostile_input(case, scratch, capsys):
    case = next(c for c in cases(scratch) if c.id == case.id)
    before = _children()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(LIMIT_S)
    t0 = time.monotonic()
    try:
        code = main(list(case.argv))
    except SystemExit as e:   # argparse's own errors
        code = e.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out, err = capsys.readouterr()
    assert time.monotonic() - t0 < LIMIT_S
    left = _children() - before
    assert not left, f"processes left running: {left}"
    if case.expect == "ok":
        assert code == 0, err
        return
    assert code == 2, (code, out[-300:], err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert case.message.lower() in err.lower(), err
