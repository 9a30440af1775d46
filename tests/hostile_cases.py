"""The hostile-input corpus of issue 29 (tests/data/hostile/cases.txt): reading it, and making
the inputs too large or too special to keep in the repository (a FIFO, 10^6 devices, ...).
Shared by tests/test_hostile_corpus.py (in-process) and benchmarks/hostile_cli.py (as a user
runs them, one process each)."""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "hostile"


@dataclass(frozen=True)
class Case:
    id: str
    expect: str        # "ok" or "error"
    message: str       # text the error line must hold ("" for any)
    argv: tuple


def cases(tmp) -> list[Case]:
    out = []
    for line in (DATA / "cases.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        words = shlex.split(line.replace("{D}", str(DATA)).replace("{T}", str(tmp)))
        expect, _, message = words[1].partition(":")
        out.append(Case(words[0], expect, message, tuple(words[2:])))
    return out


def prepare(tmp) -> None:
    """The generated inputs the cases name under {T}."""
    tmp = Path(tmp)
    for name in ("fifo", "fifo.yaml"):
        if not (tmp / name).exists():
            os.mkfifo(tmp / name)
    noise = bytes(range(256)) * 16
    for name in ("binary.xml", "binary.yaml", "binary-results.jsonl"):
        (tmp / name).write_bytes(noise)
    (tmp / "million-points.yaml").write_text(   # 1000^2 = 10^6 points
        "command: sim\ngrid:\n  minbytes: [" + ", ".join(map(str, range(1, 1001)))
        + "]\n  maxbytes: [" + ", ".join(str(1 << 20) for _ in range(1000)) + "]\n")
    (tmp / "huge-chunks.xml").write_text(
        '<algo name="x" proto="Simple" nchannels="1" ngpus="2" coll="allreduce">'
        + "".join(f'<gpu id="{g}" i_chunks="1000000000" o_chunks="0" s_chunks="0"/>'
                  for g in range(2)) + "</algo>")
    (tmp / "many-ranks.xml").write_text(
        '<algo name="x" proto="Simple" nchannels="1" ngpus="4096" coll="allreduce">'
        + "".join(f'<gpu id="{g}" i_chunks="1" o_chunks="0" s_chunks="0"/>'
                  for g in range(4096)) + "</algo>")
    million = tmp / "million.yaml"
    if not million.exists():   # 10^6 GPUs: far above the 131,072-GPU limit, 27 MB
        with open(million, "w") as f:
            f.write("name: million\nlinks: []\ndevices:\n")
            f.writelines(f"- {{name: g{i}, kind: gpu, node: {i >> 3}}}\n"
                         for i in range(1_000_000))
