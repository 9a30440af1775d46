"""The documentation's command blocks: find them, run them, compare and rewrite their output.

Conventions (CONTRIBUTING.md, "Docs that run"):

- A ```sh block is a shell script. It runs with bash (`set -e`, `pipefail`) in a scratch
  directory that the blocks of one Markdown file share, in order. A ```python block runs the
  same way, as a script of this Python. `gpucomm`, `python` and
  `python3` there are this environment's Python and the gpucomm package it imports; the
  repository's `examples/`, `benchmarks/` and `data/` are linked into the scratch directory.
- A ```text block right after a ```sh block (blank lines and markers between are allowed) is
  what that script prints on stdout, compared line by line (trailing spaces ignored). A line
  `...` in it stands for any number of lines.
- `<!-- doc: skip: REASON -->` right before a ```sh block: not run (it needs other machines,
  installs software, or takes minutes). A ```text block after it is a recorded output, not
  compared; the prose beside it must say so.
- `<!-- doc: file: NAME -->` right before any block (```yaml, say): its text is written to
  NAME in the scratch directory at that point, for the commands after it to read.
- `<!-- doc: timing -->` right before a ```text block: its output is a timing of this
  machine. Words and integers must still match; a decimal number must have as many decimal
  places and, unless one of them is zero, be within a factor TIMING_FACTOR.

    python3 tools/regen_docs.py [FILE.md ...]   rewrites the compared ```text blocks
"""
from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINKED = ("examples", "benchmarks", "data")  # what the docs' commands read from the repository
TIMING_FACTOR = 100.0  # a loaded 2-core CI machine; still catches a unit off by 1000
BLOCK_TIMEOUT_S = 120
RUNNABLE = ("sh", "python")
MARKER = re.compile(r"<!--\s*doc:\s*(skip|timing|file)\b:?\s*(.*?)\s*-->")
FENCE = re.compile(r"^```(\S*)\s*$")
NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")


@dataclass(kw_only=True)
class Block:
    """One fenced block of a Markdown file: `lang` (sh, text, ...), its text, where it starts
    (line of the opening fence, 1-based) and the markers right before it."""
    lang: str
    text: str
    line: int
    end: int  # line of the closing fence
    markers: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class Example:
    """A ```sh or ```python block and the ```text block that shows its output (None: none)."""
    command: Block
    output: Block | None

    @property
    def skipped(self) -> bool:
        return "skip" in self.command.markers


def blocks(text: str) -> list[Block]:
    lines = text.splitlines()
    out: list[Block] = []
    markers: dict[str, str] = {}
    i = 0
    while i < len(lines):
        m = MARKER.search(lines[i])
        fence = FENCE.match(lines[i])
        if m:
            markers[m.group(1)] = m.group(2)
        elif fence:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if j == len(lines):
                raise ValueError(f"line {i + 1}: a ``` block that is never closed")
            out.append(Block(lang=fence.group(1), text="\n".join(lines[i + 1:j]) + "\n",
                             line=i + 1, end=j + 1, markers=markers))
            markers = {}
            i = j
        elif lines[i].strip():
            markers = {}  # a marker belongs to the block right after it
        i += 1
    return out


def examples(text: str) -> list[Example]:
    """The ```sh and ```python blocks of a Markdown text, in order, each with the ```text
    block after it."""
    bs = blocks(text)
    lines = text.splitlines()
    out = []
    for k, b in enumerate(bs):
        if b.lang not in RUNNABLE and "file" not in b.markers:
            continue
        if "skip" in b.markers and not b.markers["skip"]:
            raise ValueError(f"line {b.line}: `doc: skip` needs a reason (`doc: skip: WHY`)")
        nxt = bs[k + 1] if k + 1 < len(bs) else None
        between = lines[b.end:nxt.line - 1] if nxt else []
        adjacent = nxt is not None and all(not s.strip() or MARKER.search(s) for s in between)
        out.append(Example(command=b, output=nxt if adjacent and nxt.lang == "text" else None))
    return out


def scratch_env(scratch: Path) -> dict[str, str]:
    """The environment of the docs' commands: `gpucomm`, `python`, `python3` are this Python
    with this gpucomm package first on its path; the repository's data folders linked."""
    import gpucomm
    src = str(Path(gpucomm.__file__).resolve().parents[1])
    bindir = scratch / ".bin"
    bindir.mkdir(exist_ok=True)
    for name, tail in (("gpucomm", " -m gpucomm"), ("python", ""), ("python3", "")):
        shim = bindir / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}"{tail} "$@"\n')
        shim.chmod(0o755)
    for name in LINKED:
        link = scratch / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])]),
               COLUMNS="200", NO_COLOR="1", TERM="dumb", GPUCOMM_CACHE_DIR=str(scratch / ".cache"),
               GPUCOMM_HOST_YAML=str(scratch / ".cache" / "host.yaml"))
    return env


def run(example: Example, scratch: Path, env: dict[str, str]) -> str:
    """stdout of the example's script; RuntimeError (with its stderr) if it fails."""
    script = example.command.text
    name = example.command.markers.get("file")
    if name is not None:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"line {example.command.line}: `doc: file: NAME` needs a plain "
                             "file name")
        (scratch / name).write_text(script)
        return ""
    argv = ([sys.executable, "-c", script] if example.command.lang == "python"
            else ["bash", "-e", "-o", "pipefail", "-c", script])
    proc = subprocess.run(argv,
                          cwd=scratch, env=env, capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"exit status {proc.returncode}\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def _numbers_close(want: str, got: str) -> bool:
    """A timing line: the same words and integers; decimals within TIMING_FACTOR."""
    if NUMBER.sub("#", want).split() != NUMBER.sub("#", got).split():  # columns may widen
        return False
    for a, b in zip(NUMBER.findall(want), NUMBER.findall(got)):
        if "." not in a and "." not in b:
            if a != b:
                return False
            continue
        if len(a.partition(".")[2]) != len(b.partition(".")[2]):
            return False
        x, y = abs(float(a.replace(",", ""))), abs(float(b.replace(",", "")))
        if x and y and not 1 / TIMING_FACTOR <= y / x <= TIMING_FACTOR:
            return False
    return True


def _lines(text: str) -> list[str]:
    return [s.rstrip() for s in text.rstrip("\n").split("\n")] if text.strip() else []


def matches(expected: str, got: str, timing: bool = False) -> bool:
    """Does `got` print what `expected` shows (a `...` line: any lines)?"""
    want, have = _lines(expected), _lines(got)
    same = _numbers_close if timing else (lambda a, b: a == b)
    if "..." not in want:
        return len(want) == len(have) and all(same(a, b) for a, b in zip(want, have))
    head, tail = want[:want.index("...")], want[want.index("...") + 1:]
    if "..." in tail:
        raise ValueError("one `...` line per output block")
    return (len(have) >= len(head) + len(tail)
            and all(same(a, b) for a, b in zip(head, have))
            and all(same(a, b) for a, b in zip(tail, have[len(have) - len(tail):])))


def rewritten(expected: str, got: str) -> str:
    """The output block's new text: what the command printed, keeping a `...` line and as many
    lines before and after it as the block showed."""
    want, have = _lines(expected), _lines(got)
    if "..." in want:
        k = want.index("...")
        n_tail = len(want) - k - 1
        if len(have) > k + n_tail:
            have = have[:k] + ["..."] + (have[len(have) - n_tail:] if n_tail else [])
    return "\n".join(have) + "\n"


def diff(expected: str, got: str) -> str:
    return "".join(difflib.unified_diff(expected.splitlines(True), got.splitlines(True),
                                        "shown in the docs", "printed now"))


def doc_files() -> list[Path]:
    """Every Markdown file whose blocks run: the README, CONTRIBUTING and docs/*.md."""
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def check_file(path: Path) -> list[str]:
    """Run every example of `path` in order in one scratch directory; the problems found."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="gpucomm-docs-") as d:
        scratch = Path(d)
        env = scratch_env(scratch)
        for ex in examples(path.read_text()):
            if ex.skipped:
                continue
            where = f"{path.relative_to(ROOT)}:{ex.command.line}"
            try:
                got = run(ex, scratch, env)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                problems.append(f"{where}: the block failed: {e}\n{ex.command.text}")
                continue
            if ex.output is not None and not matches(ex.output.text, got,
                                                     "timing" in ex.output.markers):
                problems.append(f"{where}: its output changed (if on purpose: python3 "
                                f"tools/regen_docs.py {path.relative_to(ROOT)})\n"
                                + diff(ex.output.text, got))
    return problems


def regenerate(path: Path) -> int:
    """Rewrite the compared output blocks of `path` with what their commands print now (timing
    blocks only when their words or integers changed). Returns how many changed."""
    lines = path.read_text().split("\n")
    changes = []
    with tempfile.TemporaryDirectory(prefix="gpucomm-docs-") as d:
        scratch = Path(d)
        env = scratch_env(scratch)
        for ex in examples("\n".join(lines)):
            if ex.skipped:
                continue
            try:
                got = run(ex, scratch, env)
            except RuntimeError as e:
                raise RuntimeError(f"{path}:{ex.command.line}: the block failed: {e}") from None
            out = ex.output
            if out is not None and not matches(out.text, got, "timing" in out.markers):
                changes.append((out.line, out.end, rewritten(out.text, got)))
    for start, end, text in reversed(changes):  # from the bottom: line numbers stay valid
        lines[start:end - 1] = text.rstrip("\n").split("\n")
    path.write_text("\n".join(lines))
    return len(changes)
