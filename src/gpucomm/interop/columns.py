"""Which collective an nccl-tests table measured when the log does not name its test.

The columns say most of it (nccl-tests `src/*.cu`, `getCollByteCount`, facts only):
- `redop` is `none` unless the collective reduces, or is sendrecv, which runs the test's op
  (`src/sendrecv.cu` SendRecvRunTest: `sum` by default);
- `root` (releases since 2.10) is -1 unless the collective has a root;
- `count` is the per-rank element count: `size / count / itemsize` is 1 for all_reduce,
  broadcast, reduce and sendrecv, and the rank count for all_gather, reduce_scatter, alltoall,
  gather and scatter;
- `busbw / algbw` is the collective's bus-bandwidth factor: 2(n-1)/n for all_reduce, (n-1)/n
  for the gather family, 1 for broadcast, reduce and sendrecv;
- sendrecv and alltoall do not check their in-place results (`src/sendrecv.cu`,
  `src/alltoall.cu`: `reportErrors = in_place ? 0 : 1`), so with validation on their in-place
  `#wrong` is `N/A` beside a number out of place (`src/util.cu` writeBenchmarkLineBody).
What the columns leave open, the command line and the file name may settle.

    >>> infer_collective(log, "logs/ag_2node.txt")            # doctest: +SKIP
    Inference(collective='all_gather', evidence='redop none, size = 16 × count × 4 B, ...')
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..collectives import get_collective

ITEMSIZE = {"int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1,
            "fp8_e5m2": 1, "half": 2, "float16": 2, "bfloat16": 2, "bf16": 2, "int": 4,
            "int32": 4, "uint32": 4, "float": 4, "float32": 4, "int64": 8, "uint64": 8,
            "double": 8, "float64": 8}
ONE = ("all_reduce", "broadcast", "reduce", "sendrecv")
PER_RANK = ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
WITH_OP = REDUCING + ("sendrecv",)  # collectives whose rows print a redop other than none
UNCHECKED_IN_PLACE = ("sendrecv", "all_to_all")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
# Names people give files and scripts, beside nccl-tests' own X_perf.
_NAMES = ((r"all[_-]?reduce|allreduce|\bar\b", "all_reduce"),
          (r"reduce[_-]?scatter|reducescatter|\brs\b", "reduce_scatter"),
          (r"all[_-]?gather|allgather|\bag\b", "all_gather"),
          (r"all[_-]?to[_-]?all|alltoall|\ba2a\b", "all_to_all"),
          (r"send[_-]?recv|sendrecv|\bp2p\b", "sendrecv"),
          (r"broadcast|\bbcast\b", "broadcast"),
          (r"(?<![a-z_])gather", "gather"), (r"(?<![a-z_])scatter", "scatter"),
          (r"(?<![a-z_])reduce(?![_-]?scatter)", "reduce"))


@dataclass(frozen=True)
class Inference:
    collective: str | None  # None: still ambiguous
    evidence: str
    candidates: tuple = ()


def names_in(text: str) -> tuple:
    """Collectives a command line or file name mentions, in the order of _NAMES."""
    low = text.lower()
    return tuple(dict.fromkeys(c for pat, c in _NAMES if re.search(pat, low)))


def infer_collective(log, hint: str = "") -> Inference:
    """The collective of a log without a test name: its columns, then `hint` (the command
    line and file name) among what the columns allow."""
    rows = log.good_rows or log.rows
    cands = list(get_collective(c).name for c in ONE + PER_RANK)
    why = []
    redops = {r["redop"] for r in rows}
    if redops == {"none"}:
        cands = [c for c in cands if c not in REDUCING]
        why.append("redop none")
    elif redops and "none" not in redops:
        cands = [c for c in cands if c in WITH_OP]
        why.append(f"redop {'/'.join(sorted(redops))}")
    checked = _in_place_checked(rows)
    if checked is not None:
        cands = [c for c in cands if (c in UNCHECKED_IN_PLACE) != checked]
        why.append("in-place #wrong " + ("checked" if checked else "N/A"))
    if log.root_column:
        rooted = any(r["root"] >= 0 for r in rows)
        cands = [c for c in cands if (c in ROOTED) == rooted]
        why.append(f"root {'given' if rooted else '-1'}")
    per = _per_rank(rows)
    nranks = log.nranks or (per if per and per > 1 else 0)
    if per == 1:
        cands = [c for c in cands if c in ONE]
        why.append("size = count × itemsize")
    elif per:
        cands = [c for c in cands if c in PER_RANK]
        why.append(f"size = {per} × count × itemsize")
        nranks = nranks or per
    factor = _factor(rows)
    if factor is not None and nranks >= 2:
        fit = [c for c in cands if abs(get_collective(c).busbw_factor(nranks) - factor) < 0.03]
        if fit:
            cands = fit
            why.append(f"busbw/algbw {factor:.3f} on {nranks} ranks")
    if len(cands) > 1 and hint:
        named = [c for c in names_in(hint) if c in cands]
        if named:
            cands = named[:1]
            why.append(f"named in {hint[:60]!r}")
    evidence = ", ".join(why)
    if len(cands) == 1:
        return Inference(cands[0], evidence, tuple(cands))
    return Inference(None, evidence, tuple(cands))


def _in_place_checked(rows) -> bool | None:
    """Whether the in-place half was validated: True when its #wrong is a number, False when
    it is N/A beside numbers out of place; None when the rows do not say (validation off)."""
    halves = [(r.get("wrong"), r.get("ip_wrong")) for r in rows if "ip_wrong" in r]
    if not halves or any(w is None for w, _ in halves):
        return None
    if all(ip is None for _, ip in halves):
        return False
    if all(ip is not None for _, ip in halves):
        return True
    return None


def _per_rank(rows) -> int | None:
    """size / (count × itemsize), when every row with a known type agrees."""
    seen = set()
    for r in rows:
        item = ITEMSIZE.get(r["type"].lower())
        if item is None or r["count"] <= 0:
            continue
        q, rem = divmod(r["size"], r["count"] * item)
        if rem:
            return None
        seen.add(q)
    return seen.pop() if len(seen) == 1 else None


def _factor(rows) -> float | None:
    """busbw / algbw of the rows with the most digits (the largest algbw)."""
    usable = [r for r in rows if r.get("algbw") and r["algbw"] >= 1 and r.get("busbw")]
    if not usable:
        return None
    best = max(usable, key=lambda r: r["algbw"])
    return best["busbw"] / best["algbw"]
