"""A grid of predictions pinned before a refactor: `python tests/pin_predictions.py --write`.

The grid: every preset, on 1 node and on 2, for NCCL's algorithms (and `auto`) on the
collectives they run, at three sizes; plus a few small cases on the flow model. Each case is
the call `gpucomm sim` makes (simulate.predict with the CLI's defaults). The fixture holds the
printed time, algorithm, protocol and channels of each, or the error a case raises;
tests/test_pinned_predictions.py checks that every case still gives the same.

Regenerate it (when a model change moves numbers on purpose) with the one command above.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

FIXTURE = Path(__file__).parent / "data" / "pinned_predictions.json"
PRESETS = ("cray-ex254n", "dgx-a100", "dgx-b200", "dgx-h100", "dgx-v100", "gb200-nvl72",
           "hgx-h200", "mi300x", "pcie", "polaris")
ALGORITHMS = ("auto", "ring", "tree", "nvls", "nvls_tree", "pat")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
P2P = ("all_to_all", "sendrecv")  # NCCL runs them as grouped send/recv: auto only
SIZES = (8, 1 << 16, 64 << 20)
FLOW = (("dgx-h100", 1, "all_reduce", "ring", 1 << 20), ("pcie", 1, "all_reduce", "auto", 1 << 20),
        ("dgx-a100", 2, "all_gather", "ring", 1 << 16),
        ("dgx-h100", 1, "reduce_scatter", "auto", 1 << 16))


def cases() -> list[dict]:
    """Every case of the grid, as the keyword arguments of `run_case`."""
    out = []
    for system in PRESETS:
        for nodes in (1,) if system == "gb200-nvl72" else (1, 2):  # 144 ranks: slow
            for coll in COLLECTIVES + P2P:
                for alg in ALGORITHMS if coll not in P2P else ("auto",):
                    for size in SIZES:
                        out.append(dict(system=system, nodes=nodes, collective=coll,
                                        algorithm=alg, size=size, model="analytic"))
    for system, nodes, coll, alg, size in FLOW:
        out.append(dict(system=system, nodes=nodes, collective=coll, algorithm=alg, size=size,
                        model="flow"))
    return out


def key(case: dict) -> str:
    return "{system}x{nodes} {collective} {algorithm} {size} {model}".format(**case)


_TOPOLOGIES: dict = {}


def run_case(case: dict) -> dict:
    """What `gpucomm sim` prints for the case: time, algorithm/protocol and channels."""
    from gpucomm.errors import GpucommError
    from gpucomm.simulate import predict
    from gpucomm.topology import build_topology
    tk = (case["system"], case["nodes"])
    if tk not in _TOPOLOGIES:
        _TOPOLOGIES[tk] = build_topology(case["system"], nodes=case["nodes"])
    try:
        r = predict(case["collective"], case["size"], _TOPOLOGIES[tk],
                    algorithm=case["algorithm"], model=case["model"])
    except GpucommError as e:
        return {"error": type(e).__name__}
    return {"time_s": r.time_s, "algorithm": r.algorithm, "protocol": r.protocol,
            "channels": r.nccl_channels or r.channels}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {FIXTURE.name}")
    args = ap.parse_args()
    pinned = {key(c): run_case(c) for c in cases()}
    if args.write:
        FIXTURE.parent.mkdir(exist_ok=True)
        FIXTURE.write_text(json.dumps(pinned, indent=0, sort_keys=True) + "\n")
        print(f"wrote {len(pinned)} cases to {FIXTURE}")
    else:
        print(json.dumps(pinned, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
