"""NCCL's example tuner plugin file: gpucomm's `auto` choice per collective and size range.

NCCL's `ext-tuner/example` plugin reads a CSV (path in NCCL_TUNER_CONFIG_FILE), one rule a line:
`collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff`
with collectives broadcast/reduce/allgather/reducescatter/allreduce, algorithms
tree/ring/collnet_direct/collnet_chain/nvls/nvls_tree/pat, protocols ll/ll128/simple, and -1
for "keep NCCL's default" (channels) or "any" (the rest). Facts from its README and
plugins/tuner/example/plugin.c (NCCL 2.29): lines are read with fgets into MAX_LINE_LENGTH
(256) bytes, '#' in the first column marks a comment, the first rule that matches applies,
nNodes and nRanks match exactly (or -1: any), and the channel count is set to 1 before
matching, so a -1 channel field leaves 1 channel, not NCCL's default.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..collectives import Collective, get_collective
from ..dtypes import get_dtype
from ..errors import ConfigError
from ..simulate import predict
from ..simulate.concurrent import check_other_job, fastest_beside, other_job_groups
from ..topology import Topology

HEADER = ("collective", "min_bytes", "max_bytes", "algorithm", "protocol", "channels", "nNodes",
          "nRanks", "numPipeOps", "regBuff")
NCCL_COLLECTIVES = {"all_reduce": "allreduce", "all_gather": "allgather",
                    "reduce_scatter": "reducescatter", "broadcast": "broadcast",
                    "reduce": "reduce"}
# gpucomm schedule -> NCCL algorithm name (both of gpucomm's spellings of the tree)
NCCL_ALGORITHM = {"ring": "ring", "tree": "tree", "nvls": "nvls",
                  "nvls_tree": "nvls_tree", "collnet_direct": "collnet_direct",
                  "collnet_chain": "collnet_chain", "pat": "pat"}
NCCL_ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
NCCL_PROTOCOLS = ("ll", "ll128", "simple")
MAX_BYTES = (1 << 63) - 1  # the last rule covers every larger size (fits signed parsers)


MAX_LINE_BYTES = 200  # the plugin reads lines with fgets into 256 bytes (MAX_LINE_LENGTH)
_UNSAFE = re.compile(r"[^A-Za-z0-9 ._:/()+=x*-]")  # no comma, '#', newline or control


@dataclass(frozen=True, kw_only=True)
class TuneRequest:
    topology: Topology
    collectives: tuple = tuple(NCCL_COLLECTIVES)
    min_bytes: int = 1
    max_bytes: int = 16 << 30
    dtype: str = "float32"
    model: str = "analytic"
    # also rules for the communicators a job splits the cluster into (nNodes x GPUs per node)
    sub_communicators: bool = True
    # a second job on the topology's last `other_job` nodes (the job on the others), running
    # each communicator's collective at the same moment on groups of its shape (as `gpucomm
    # sim --other-job`); each rule holds the pair fastest with it (concurrent.fastest_beside)
    other_job: int = 0


def shapes(topology: Topology, sub_communicators: bool = True,
           other_job: int = 0) -> list[tuple[int, list[int]]]:
    """(nodes, ranks) of the communicators to write rules for: the whole cluster (less the
    second job's last `other_job` nodes) first, then (with `sub_communicators`) 1, 2, 4, ...
    nodes times 1, 2, 4, ... GPUs of each (the first GPUs of the first nodes: NCCL's plugin
    tells communicators apart only by their node and rank counts)."""
    per_node: dict[int, list[int]] = {}
    for r in range(topology.nranks):
        per_node.setdefault(topology.node_of(r), []).append(r)
    nodes = [per_node[k] for k in sorted(per_node)]
    nodes = nodes[:len(nodes) - other_job]
    gpus = min(len(g) for g in nodes)
    out = [(len(nodes), [r for node in nodes for r in node])]
    if not sub_communicators:
        return out
    for n in sorted({*_powers(len(nodes)), len(nodes)}):
        for g in sorted({*_powers(gpus), gpus}):
            ranks = [r for node in nodes[:n] for r in node[:g]]
            if len(ranks) >= 2 and (n, len(ranks)) not in {(m, len(rs)) for m, rs in out}:
                out.append((n, ranks))
    return out


def _powers(n: int) -> list[int]:
    return [1 << k for k in range(n.bit_length()) if 1 << k <= n]


def tune(req: TuneRequest) -> list[dict]:
    """Rules, contiguous per communicator shape and collective from 0 to MAX_BYTES: sizes are
    probed at the first and last size of each octave (powers of two: where the cost models
    step), and where two neighbours differ the size where the choice switches is found by
    bisection to the element (of every rank), so a rule holds `sim`'s choice at the sizes
    it covers, not only at the probes. The channels are those of the run that was timed
    (simulate.timed), so the plugin sets what `gpucomm sim` reports; never -1, which that
    plugin turns into 1. With `other_job`, each rule holds the pair fastest with the second
    job beside the communicator (concurrent.fastest_beside), timed as `gpucomm sim
    --other-job` times it."""
    _check_other_job(req)
    for name in req.collectives:
        coll = get_collective(name)
        if coll.name not in NCCL_COLLECTIVES:
            raise ConfigError(f"NCCL's tuner has no {coll.name}: allowed are "
                              f"{', '.join(NCCL_COLLECTIVES)}")
    rules = []
    shaped = shapes(req.topology, req.sub_communicators, req.other_job)
    for nodes, ranks in shaped:
        # the second job's groups shaped like this communicator (none inside one node)
        second = [list(g) for g in other_job_groups(tuple(ranks), shaped[0][0], req.other_job,
                                                    req.topology.gpus_per_node)] \
            if req.other_job else []
        for name in req.collectives:
            rules += _rules(req, get_collective(name), nodes, ranks, second)
        # what the simulator kept for this placement (its path table, per rank) is not used
        # by the next, and 60 of them on a large cluster held tens of GB (2,048 nodes: 15 GB)
        req.topology.cache.clear()
    return rules


def _check_other_job(req: TuneRequest) -> None:
    """A second job needs a fabric model and leaves the job at least one node."""
    if not req.other_job:
        return
    check_other_job(req.other_job, req.topology.network is not None, True)
    total = len({req.topology.node_of(r) for r in range(req.topology.nranks)})
    if req.other_job >= total:
        raise ConfigError(f"other_job {req.other_job}: the second job's nodes are the last of "
                          f"the cluster's {total}; leave the job at least one")


def _rules(req: TuneRequest, coll: Collective, nodes: int, ranks: list[int],
           second: list[list[int]]) -> list[dict]:
    from ..simulate.core import SizeSweep
    unit = get_dtype(req.dtype).itemsize * coll.size_blocks(len(ranks))
    # in units: the first, the middle and the last size of each octave (NCCL's and gpucomm's
    # costs step at powers of two, e.g. treeCorrectionFactor by log2 size, and a protocol can
    # win inside an octave whose two ends the other wins), bisected in between
    probes, s = [], 1
    while s <= req.max_bytes:
        if s >= req.min_bytes:
            probes += [-(-s // unit), -(-3 * s // (2 * unit)), max(1, -(-2 * s // unit) - 1)]
        s *= 2
    probes = sorted(set(probes))
    if not probes:
        raise ConfigError(f"no sizes between {req.min_bytes} and {req.max_bytes}")

    sweep = SizeSweep([n * unit for n in probes])

    def choice(n_units: int) -> tuple[str, str, int]:
        nbytes = n_units * unit
        res = fastest_beside(coll, nbytes, req.topology, ranks, second, dtype=req.dtype,
                             model=req.model, sweep=sweep) if second else \
            predict(coll, nbytes, req.topology, ranks=ranks, dtype=req.dtype, model=req.model,
                    sweep=sweep)
        algo = NCCL_ALGORITHM.get(res.algorithm)
        if algo is None or res.timed is None:
            raise ConfigError(f"{coll.name} at {n_units * unit} B: the model chose "
                              f"{res.algorithm}, which NCCL does not have")
        return algo, res.protocol, res.timed.channels

    choices = [choice(n) for n in probes]
    # (first unit, choice): each switch between two probes found exactly by bisection
    starts = [(0, choices[0])]
    for a, b, ca, cb in zip(probes, probes[1:], choices, choices[1:]):
        starts += _switches(choice, a, ca, b, cb) if ca != cb else []
    rules = []
    for i, (first, (algo, proto, ch)) in enumerate(starts):
        last = i == len(starts) - 1
        rules.append({"collective": NCCL_COLLECTIVES[coll.name], "min_bytes": first * unit,
                      "max_bytes": MAX_BYTES if last else starts[i + 1][0] * unit - 1,
                      "algorithm": algo, "protocol": proto, "channels": ch, "nNodes": nodes,
                      "nRanks": len(ranks), "numPipeOps": -1, "regBuff": -1})
    return rules


def _switches(choice: Callable[[int], tuple], a: int, ca: tuple, b: int, cb: tuple
              ) -> list[tuple[int, tuple]]:
    """Where the choice changes in (a, b] (sizes in units; ca at a, cb at b, ca != cb): the
    first unit of each new choice, by bisection (every switch a bisection meets)."""
    if b - a == 1:
        return [(b, cb)]
    mid = (a + b) // 2
    cm = choice(mid)
    if cm == ca:
        return _switches(choice, mid, cm, b, cb)
    out = _switches(choice, a, ca, mid, cm)
    return out + (_switches(choice, mid, cm, b, cb) if cm != cb else [])


def comment_lines(text: str) -> list[str]:
    """`text` as comment lines the plugin skips whole: each starts with '#', holds no comma,
    control character or non-ASCII (a name cannot add a line or a field), and fits its
    256-byte line buffer (longer lines are cut, the rest on lines of their own)."""
    out = []
    for raw in text.splitlines():
        line = _UNSAFE.sub("_", raw)
        while True:
            out.append(("# " + line[:MAX_LINE_BYTES - 2]).rstrip())
            line = line[MAX_LINE_BYTES - 2:]
            if not line:
                break
    return out


def to_csv(rules: list[dict], comment: str = "") -> str:
    lines = comment_lines(comment)
    lines.append("# " + " ".join(HEADER))
    lines += [",".join(str(r[k]) for k in HEADER) for r in rules]
    return "\n".join(lines) + "\n"


def parse_csv(text: str) -> list[dict]:
    """Read a tuner file back (ConfigError naming the line on anything NCCL would reject)."""
    rules = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        f = [x.strip() for x in line.split(",")]
        if len(f) not in (8, 9, 10):
            raise ConfigError(f"line {n}: {len(f)} fields, expected 8 to 10 ({','.join(HEADER)})")
        f += ["-1"] * (10 - len(f))
        try:
            r: dict[str, Any] = dict(zip(HEADER, [f[0]] + [int(f[1]), int(f[2])] + f[3:5]
                         + [int(x) for x in f[5:]]))
        except ValueError:
            raise ConfigError(f"line {n}: a number field is not an integer: {line!r}") from None
        if r["collective"] not in NCCL_COLLECTIVES.values():
            raise ConfigError(f"line {n}: collective {r['collective']!r}, allowed are "
                              f"{', '.join(NCCL_COLLECTIVES.values())}")
        if r["algorithm"] not in NCCL_ALGORITHMS:
            raise ConfigError(f"line {n}: algorithm {r['algorithm']!r}, allowed are "
                              f"{', '.join(NCCL_ALGORITHMS)}")
        if r["protocol"] not in NCCL_PROTOCOLS:
            raise ConfigError(f"line {n}: protocol {r['protocol']!r}, allowed are "
                              f"{', '.join(NCCL_PROTOCOLS)}")
        if r["min_bytes"] > r["max_bytes"]:
            raise ConfigError(f"line {n}: min_bytes {r['min_bytes']} > max_bytes {r['max_bytes']}")
        rules.append(r)
    return rules
