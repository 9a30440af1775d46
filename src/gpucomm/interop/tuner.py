"""NCCL's example tuner plugin file: gpucomm's `auto` choice per collective and size range.

NCCL's `ext-tuner/example` plugin reads a CSV (path in NCCL_TUNER_CONFIG_FILE), one rule a line:
`collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff`
with collectives broadcast/reduce/allgather/reducescatter/allreduce, algorithms
tree/ring/collnet_direct/collnet_chain/nvls/nvls_tree/pat, protocols ll/ll128/simple, and -1
for "keep NCCL's default" (channels) or "any" (the rest). Facts from its README; no code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..collectives import get_collective
from ..dtypes import get_dtype
from ..errors import ConfigError
from ..simulate import predict
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


@dataclass(frozen=True)
class TuneRequest:
    topology: Topology
    nodes: int
    collectives: tuple = tuple(NCCL_COLLECTIVES)
    min_bytes: int = 1
    max_bytes: int = 16 << 30
    dtype: str = "float32"
    model: str = "analytic"
    channels: bool = False  # write the model's channel count (default -1: NCCL's own)


def tune(req: TuneRequest) -> list[dict]:
    """Rules, contiguous per collective from 0 to MAX_BYTES: sizes are probed at powers of
    two, and each probe's choice covers the sizes from halfway below it (log scale) on."""
    nranks = req.topology.nranks
    itemsize = get_dtype(req.dtype).itemsize
    rules = []
    for name in req.collectives:
        coll = get_collective(name)
        if coll.name not in NCCL_COLLECTIVES:
            raise ConfigError(f"NCCL's tuner has no {coll.name}: allowed are "
                              f"{', '.join(NCCL_COLLECTIVES)}")
        unit = itemsize * coll.size_blocks(nranks)  # the smallest size every rank gets data of
        probes, s = [], 1
        while s <= req.max_bytes:
            if s >= req.min_bytes:
                probes.append(-(-s // unit) * unit)
            s *= 2
        probes = sorted(set(probes))
        if not probes:
            raise ConfigError(f"no sizes between {req.min_bytes} and {req.max_bytes}")
        choices = []
        for size in probes:
            res = predict(coll, size, req.topology, dtype=req.dtype, model=req.model)
            algo = NCCL_ALGORITHM.get(res.algorithm)
            if algo is None:
                raise ConfigError(f"{coll.name} at {size} B: the model chose {res.algorithm}, "
                                  "which NCCL does not have")
            choices.append((algo, res.protocol, res.channels if req.channels else -1))
        start = 0
        for i, (size, choice) in enumerate(zip(probes, choices)):
            last = i == len(probes) - 1
            if last or choices[i + 1] != choice:
                end = MAX_BYTES if last else (size + probes[i + 1]) // 2 - 1
                algo, proto, ch = choice
                rules.append({"collective": NCCL_COLLECTIVES[coll.name], "min_bytes": start,
                              "max_bytes": end, "algorithm": algo, "protocol": proto,
                              "channels": ch, "nNodes": req.nodes, "nRanks": nranks,
                              "numPipeOps": -1, "regBuff": -1})
                start = end + 1
    return rules


def to_csv(rules: list[dict], comment: str = "") -> str:
    lines = [f"# {c}" for c in comment.splitlines()]
    lines.append("# " + ",".join(HEADER))
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
