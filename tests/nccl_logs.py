"""Render the published nccl-tests tables (data/published/, sources in its README) as the logs
nccl-tests prints."""
from __future__ import annotations

import json
import re
from pathlib import Path

from gpucomm.bench.table import format_log
from gpucomm.collectives import get_collective, layout

DATA = Path(__file__).resolve().parents[1] / "data" / "published" / "nccl-tests-published.json"
# How CUDA names the boards the tables describe.
DEVICE_NAMES = (("4090", "NVIDIA GeForce RTX 4090", "rtx4090"),
                ("H200", "NVIDIA H200", "h200"),
                ("H100", "NVIDIA H100 80GB HBM3", "h100"),
                ("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "a100"),
                ("A100", "NVIDIA A100-SXM4-80GB", "a100"),
                ("V100", "Tesla V100-SXM2-16GB", "v100"))
TYPES = {"double": "double", "float": "float", "half": "half"}


def published() -> list[dict]:
    return json.loads(DATA.read_text())


def device_of(table: dict) -> tuple[str, str]:
    """(CUDA device name, catalog GPU) of a table's hardware description."""
    for key, name, gpu in DEVICE_NAMES:
        if key in table["hardware"]:
            return name, gpu
    raise KeyError(table["hardware"])


def render(table: dict) -> str:
    """One published table as an nccl-tests log: header, one device line per rank (host per
    node), the table (out-of-place from the data, in-place the same), footer."""
    coll = get_collective(table["collective"])
    test = re.sub(r"^all_to_all$", "alltoall", coll.name) + "_perf"
    name, _ = device_of(table)
    p, per = int(table["gpus"]), int(table["gpus_per_node"])
    typ = table["dtype"].split()[0]
    dtype = {"double": "float64", "float": "float32", "half": "float16"}[typ]
    devices = [(r, f"node{r // per + 1:02d}", r % per, f"0x{0x18 + 16 * (r % per):x}", name,
                1000 + r) for r in range(p)]
    rows = []
    for row in table["rows"]:
        size = int(row["bytes"])
        lay = layout(coll, size, dtype, p)
        factor = coll.busbw_factor(p)
        busbw = row.get("busbw_gbs")
        algbw = row.get("algbw_gbs") or (busbw / factor if busbw else None)
        t = row.get("time_us") or (size / (algbw * 1e9) * 1e6 if algbw else None)
        if t is None:
            continue
        algbw = algbw if algbw is not None else size / (t * 1e-6) / 1e9
        busbw = busbw if busbw is not None else algbw * factor
        rows.append({"size": size, "count": lay.count, "type": TYPES[typ],
                     "redop": "sum" if coll.reduces else "none",
                     "root": 0 if coll.rooted else -1, "time_us": t, "algbw": algbw,
                     "busbw": busbw, "wrong": 0, "ip_time_us": t, "ip_algbw": algbw,
                     "ip_busbw": busbw, "ip_wrong": 0})
    g = re.search(r"-g\s*(\d+)", table.get("command") or "")
    return format_log(rows, test=test, devices=devices, ngpus=int(g.group(1)) if g else 1)
