"""`gpucomm hw list | compare`: the hardware catalog, with sources."""
from __future__ import annotations

from ..errors import ConfigError
from ..hardware import catalog, get_gpu, get_link_tech, gpus, link_techs, nvswitches
from .common import add_format, print_json
from .topo import _table


def register(sub) -> None:
    p = sub.add_parser("hw", help="the hardware catalog: links, GPUs, NVSwitches")
    hsub = p.add_subparsers(dest="hw_command", metavar="ACTION", required=True)

    lp = hsub.add_parser("list", help="tables of link technologies, GPUs and NVSwitches")
    lp.add_argument("--kind", choices=("links", "gpus", "nvswitches", "all"), default="all")
    lp.add_argument("--sources", action="store_true", help="print the source of every entry")
    add_format(lp)
    lp.set_defaults(func=cmd_list)

    cp = hsub.add_parser("compare", help="two link technologies (or two GPUs) side by side")
    cp.add_argument("a")
    cp.add_argument("b")
    add_format(cp)
    cp.set_defaults(func=cmd_compare)


def link_row(t) -> dict:
    return {"name": t.name, "kind": t.kind, "GBps_per_direction": t.bandwidth_Bps / 1e9,
            "GBps_bidirectional": t.bidirectional_Bps / 1e9, "links": t.links,
            "efficiency": t.efficiency, "achievable_GBps": round(t.achievable_Bps / 1e9, 3),
            "latency_us": round(t.latency_s * 1e6, 4),
            "nccl_GBps": None if t.nccl_Bps is None else t.nccl_Bps / 1e9, "source": t.source}


def gpu_row(g) -> dict:
    return {"name": g.name, "sm": g.sm, "memory_GB": g.hbm_bytes / 1e9,
            "memory_GBps": g.hbm_bandwidth_Bps / 1e9, "bf16_TFLOPS": g.bf16_flops / 1e12,
            "nvlink": g.nvlink, "nvlink_links": g.nvlink_links,
            "nvlink_GBps_bidirectional": (get_link_tech(g.nvlink).bidirectional_Bps / 1e9
                                          if g.nvlink else 0.0),
            "pcie": g.pcie, "source": g.source}


def switch_row(s) -> dict:
    return {"name": s.name, "generation": s.generation, "nvlink": s.nvlink, "ports": s.ports,
            "reduces_in_switch": s.reduces_in_switch, "source": s.source}


def cmd_list(args) -> int:
    data = {}
    if args.kind in ("links", "all"):
        data["links"] = [link_row(t) for t in link_techs()]
    if args.kind in ("gpus", "all"):
        data["gpus"] = [gpu_row(g) for g in gpus()]
    if args.kind in ("nvswitches", "all"):
        data["nvswitches"] = [switch_row(s) for s in nvswitches()]
    if args.format == "json":
        print_json(data)
        return 0
    src = ["source"] if args.sources else []
    if "links" in data:
        print("Link technologies (GB/s = 1e9 B/s; nominal, per direction unless said; "
              "achievable = nominal x efficiency):")
        _table(data["links"], ["name", "kind", "GBps_per_direction", "GBps_bidirectional",
                               "efficiency", "achievable_GBps", "latency_us", "nccl_GBps"]
               + src, indent=2)
    if "gpus" in data:
        print("GPUs (dense BF16; V100 figure is FP16, it has no BF16):")
        _table(data["gpus"], ["name", "sm", "memory_GB", "memory_GBps", "bf16_TFLOPS",
                              "nvlink", "nvlink_links", "nvlink_GBps_bidirectional", "pcie"]
               + src, indent=2)
    if "nvswitches" in data:
        print("NVSwitch generations:")
        _table(data["nvswitches"], ["name", "generation", "nvlink", "ports",
                                    "reduces_in_switch"] + src, indent=2)
    if not args.sources:
        print("(--sources prints where every number comes from; the catalog is "
              "gpucomm/data/hardware.yaml)")
    return 0


def cmd_compare(args) -> int:
    names = set(catalog()["gpus"])
    if args.a.lower() in names and args.b.lower() in names:
        return _compare_gpus(args)
    try:
        a, b = get_link_tech(args.a), get_link_tech(args.b)
    except ConfigError as e:
        raise ConfigError(f"{e} (or two GPUs: {', '.join(sorted(names))})") from None
    ratio = a.bandwidth_Bps / b.bandwidth_Bps
    ach = a.achievable_Bps / b.achievable_Bps
    out = {"a": link_row(a), "b": link_row(b), "ratio": ratio, "achievable_ratio": ach}
    if args.format == "json":
        print_json(out)
        return 0
    for t in (a, b):
        print(f"{t.name:>10}: {t.bidirectional_Bps / 1e9:g} GB/s bidirectional "
              f"({t.bandwidth_Bps / 1e9:g} GB/s per direction), achievable "
              f"{t.achievable_Bps / 1e9:.4g} GB/s per direction (efficiency {t.efficiency:g}), "
              f"latency {t.latency_s * 1e6:g} us per hop   [{t.source}]")
        if t.links > 1:
            print(f"{'':>10}  {_per_link_note(t)}")
    print(f"{a.name} / {b.name}: {ratio:.2f}x nominal ({a.bidirectional_Bps / 1e9:g} / "
          f"{b.bidirectional_Bps / 1e9:g}), {ach:.2f}x achievable")
    return 0


def _per_link_note(t) -> str:
    """What one peer gets: a switch gives any peer all the links, a mesh one link's worth."""
    unit, total = t.unit_Bps / 1e9, t.bandwidth_Bps / 1e9
    head = f"{t.links} links x {unit:g} GB/s per link per direction"
    if t.kind == "xgmi":
        return f"{head}; a full mesh without a switch: {unit:g} GB/s to one peer"
    return f"{head}; through an NVSwitch all {total:g} GB/s go to one peer"


def _compare_gpus(args) -> int:
    a, b = get_gpu(args.a), get_gpu(args.b)
    ra, rb = gpu_row(a), gpu_row(b)
    keys = ("memory_GBps", "memory_GB", "bf16_TFLOPS", "nvlink_GBps_bidirectional")
    ratios = {k: (ra[k] / rb[k] if rb[k] else None) for k in keys}
    if args.format == "json":
        print_json({"a": ra, "b": rb, "ratios": ratios})
        return 0
    rows = [{"": k, a.name: ra[k], b.name: rb[k],
             "ratio": "-" if ratios[k] is None else f"{ratios[k]:.2f}x"} for k in keys]
    _table(rows, ["", a.name, b.name, "ratio"])
    return 0
