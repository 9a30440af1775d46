"""`gpucomm plan`: where a training or inference step of a real model spends its time.

    gpucomm plan --model llama3-405b --system dgx-h100 --nodes 2048 --tp 8 --pp 16 --dp 128 \
        --seq 8192 --global-batch 2048 --nic roce-400g
    gpucomm plan --model llama3-70b --mode decode --tp 8 --seq 4096 --global-batch 1 \
        --compare system=dgx-h100,pcie
"""
from __future__ import annotations

import sys

from ..errors import ConfigError
from ..workloads.layout import KINDS, MODES, Layout
from ..workloads.models import get_model, list_models
from ..workloads.search import search_layouts
from ..workloads.steptime import make_cluster, plan
from ..topology import FABRICS
from .common import add_format, positive_int, print_json
from .topo import add_network_args, network_from_args

_LAYOUT_INTS = ("tp", "pp", "dp", "cp", "ep", "vpp", "seq", "global_batch", "micro_batch",
                "zero")
_TOPO_KEYS = ("gpu", "pcie_gen", "fabric", "oversubscription", "nics_per_node", "p2p",
              "leaf_ports", "placement", "network")
_COMPARE_KEYS = ("system", "nic", "nodes", "mode", "recompute", "sp") + _TOPO_KEYS + _LAYOUT_INTS


def register(sub) -> None:
    p = sub.add_parser("plan", help="step time, communication and memory of a model on a cluster",
                       description="Predict one training step (or prefill / decode step) of a "
                       "transformer on a cluster: compute, communication per kind and how much "
                       "of it is exposed, throughput, MFU and memory per GPU.")
    p.add_argument("--model", required=True,
                   help=f"a shipped model ({', '.join(list_models())}) or a .yaml config")
    p.add_argument("--system", default="dgx-h100", help="topology preset (default dgx-h100)")
    p.add_argument("--nodes", type=positive_int, default=1)
    p.add_argument("--nic", default=None, help="NIC technology, e.g. ib-ndr, roce-400g")
    p.add_argument("--gpu", default=None,
                   help="another GPU model in the system (e.g. --system pcie --gpu h100)")
    p.add_argument("--pcie-gen", type=int, choices=(3, 4, 5, 6), default=None,
                   help="set every PCIe link to this generation")
    p.add_argument("--fabric", choices=FABRICS, default=None)
    p.add_argument("--oversubscription", type=float, default=None,
                   help="fabric oversubscription (1 = full bisection)")
    p.add_argument("--nics-per-node", type=positive_int, default=None)
    p.add_argument("--no-p2p", dest="p2p", action="store_false", default=True,
                   help="PCIe boxes: GPU traffic bounces through host memory")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor parallel degree")
    p.add_argument("--pp", type=positive_int, default=1, help="pipeline parallel degree")
    p.add_argument("--dp", type=positive_int, default=None,
                   help="data parallel degree (default: GPUs / (tp*pp*cp))")
    p.add_argument("--cp", type=positive_int, default=1, help="context parallel degree")
    p.add_argument("--ep", type=positive_int, default=1, help="expert parallel degree (within dp)")
    p.add_argument("--vpp", type=positive_int, default=1,
                   help="interleaved virtual stages per pipeline rank")
    p.add_argument("--seq", type=positive_int, default=4096,
                   help="sequence length (training, prefill) or KV context length (decode)")
    p.add_argument("--global-batch", type=positive_int, default=None,
                   help="sequences per step (default: dp * micro-batch)")
    p.add_argument("--micro-batch", type=positive_int, default=1)
    p.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=1,
                   help="ZeRO stage (3 = FSDP); default 1 (distributed optimizer)")
    p.add_argument("--sp", action="store_true", default=True,
                   help="sequence parallelism with TP (default on in training)")
    p.add_argument("--no-sp", dest="sp", action="store_false")
    p.add_argument("--recompute", choices=("none", "full"), default="none")
    p.add_argument("--mode", choices=MODES, default="train")
    p.add_argument("--compare", action="append", default=[], metavar="KEY=V1,V2",
                   help=f"what-ifs side by side; KEY is one of {', '.join(_COMPARE_KEYS)}")
    p.add_argument("--search", action="store_true",
                   help="rank the layouts that fit on this cluster by predicted step time")
    p.add_argument("--top", type=positive_int, default=10, help="rows --search prints")
    p.add_argument("--plot", metavar="FILE.png", help="stacked bar of where the step time goes")
    p.add_argument("--sim-model", choices=("analytic", "flow"), default="analytic",
                   help="simulator model for the collectives (default analytic)")
    p.add_argument("--no-contention", dest="contention", action="store_false", default=True,
                   help="time each group alone, not together with the groups sharing its links")
    p.add_argument("--collectives", action="store_true",
                   help="also list every collective with its group, size and time")
    add_format(p)
    add_network_args(p)
    p.set_defaults(func=cmd_plan)


def _settings(args) -> dict:
    return {"system": args.system, "nodes": args.nodes, "nic": args.nic, "mode": args.mode,
            "recompute": args.recompute, "sp": args.sp, "tp": args.tp, "pp": args.pp,
            "dp": args.dp, "cp": args.cp, "ep": args.ep, "vpp": args.vpp, "seq": args.seq,
            "global_batch": args.global_batch, "micro_batch": args.micro_batch,
            "zero": args.zero, "gpu": args.gpu, "pcie_gen": args.pcie_gen,
            "fabric": args.fabric, "oversubscription": args.oversubscription,
            "nics_per_node": args.nics_per_node, "p2p": args.p2p,
            "leaf_ports": args.leaf_ports, "placement": args.placement,
            "network": network_from_args(args)}


def _topology_options(s: dict) -> dict:
    opts = {k: s[k] for k in _TOPO_KEYS if s.get(k) is not None and k != "p2p"}
    if not s.get("p2p", True):
        opts["p2p"] = False
    return opts


def _run(model, s: dict, sim_model: str, contention: bool = True):
    cluster = make_cluster(s["system"], s["nodes"], s["nic"], **_topology_options(s))
    others = s["tp"] * s["pp"] * s["cp"]
    dp = s["dp"]
    if dp is None:
        if cluster.gpus % others:
            raise ConfigError(f"tp*pp*cp = {others} does not divide the {cluster.gpus} GPUs of "
                              f"{s['nodes']} x {s['system']}")
        dp = cluster.gpus // others
    gb = s["global_batch"] or dp * (s["micro_batch"] if s["mode"] == "train" else 1)
    lay = Layout(tp=s["tp"], pp=s["pp"], dp=dp, cp=s["cp"], ep=s["ep"], seq=s["seq"],
                 global_batch=gb, micro_batch=s["micro_batch"], sp=s["sp"], zero=s["zero"],
                 vpp=s["vpp"], recompute=s["recompute"], mode=s["mode"])
    return plan(model, s["system"], s["nodes"], lay, s["nic"], cluster=cluster,
                sim_model=sim_model, contention=contention)


def _parse_compare(items: list[str]) -> list[tuple[str, list]]:
    out = []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--compare {item!r} must look like KEY=V1,V2")
        key, values = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if key not in _COMPARE_KEYS:
            raise ConfigError(f"--compare key {key!r} is unknown: allowed are "
                              f"{', '.join(_COMPARE_KEYS)}")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if len(vals) < 1:
            raise ConfigError(f"--compare {key}= needs at least one value")
        conv = []
        for v in vals:
            if key in _LAYOUT_INTS or key in ("nodes", "pcie_gen", "nics_per_node"):
                try:
                    conv.append(int(v))
                except ValueError:
                    raise ConfigError(f"--compare {key}: {v!r} is not an integer") from None
            elif key == "oversubscription":
                try:
                    conv.append(float(v))
                except ValueError:
                    raise ConfigError(f"--compare {key}: {v!r} is not a number") from None
            elif key in ("sp", "p2p"):
                conv.append(v.lower() in ("1", "true", "on", "yes"))
            else:
                conv.append(v)
        out.append((key, conv))
    return out


def cmd_plan(args) -> int:
    model = get_model(args.model)
    base = _settings(args)
    if args.search:
        return _cmd_search(args, model, base)
    compares = _parse_compare(args.compare)
    if not compares:
        result = _run(model, base, args.sim_model, args.contention)
        if args.format == "json":
            d = result.to_dict()
            if not args.collectives:
                d.pop("collectives")
            print_json(d)
        else:
            print(_table(result, args.collectives))
        if args.plot:
            _plot([("", result)], args.plot)
        return 0
    variants = [({}, base)]
    for key, vals in compares:
        variants = [({**lab, key: v}, {**s, key: v}) for lab, s in variants for v in vals]
    results = []
    for lab, s in variants:
        if "dp" not in lab and any(k in lab for k in ("tp", "pp", "cp", "nodes")):
            s = {**s, "dp": None}  # re-derive dp for the changed layout
        label = ",".join(f"{k}={v}" for k, v in lab.items())
        results.append((label, _run(model, s, args.sim_model, args.contention)))
    if args.format == "json":
        print_json([{"variant": lab, **r.to_dict()} for lab, r in results]
                   if args.collectives else
                   [{"variant": lab, **{k: v for k, v in r.to_dict().items()
                                        if k != "collectives"}} for lab, r in results])
    else:
        print(_compare_table(results))
    if args.plot:
        _plot(results, args.plot)
    return 0


def _cmd_search(args, model, base) -> int:
    cluster = make_cluster(base["system"], base["nodes"], base["nic"],
                           **_topology_options(base))
    ranked, rejected = search_layouts(model, cluster, base, sim_model=args.sim_model,
                                      contention=args.contention)
    if not ranked:
        raise ConfigError(f"no layout of {model.name} fits {cluster.gpus} GPUs of "
                          f"{base['system']} ({rejected} rejected); add nodes, a shorter "
                          f"--seq or --zero 3")
    top = ranked[:args.top]
    if args.format == "json":
        print_json([{k: v for k, v in r.to_dict().items() if k != "collectives"} for r in top])
        return 0
    print(f"{model.name} on {cluster.nodes} x {cluster.system} ({cluster.gpus} "
          f"{cluster.gpu.name}), {base['mode']}: {len(ranked)} layouts fit, "
          f"{rejected} rejected; best {len(top)}:")
    head = ["rank", "tp", "pp", "vpp", "dp", "cp", "ep", "step", "tokens/s", "MFU", "exposed comm",
            "bubble", "mem/GPU"]
    rows = []
    for i, r in enumerate(top, 1):
        lay = r.layout
        rows.append([str(i), str(lay.tp), str(lay.pp), str(lay.vpp), str(lay.dp), str(lay.cp), str(lay.ep),
                     _t(r.step_time_s), f"{r.tokens_per_s:,.0f}", f"{r.mfu:.1%}",
                     _t(r.exposed_comm_s), _t(r.bubble_s), f"{r.memory.total / 1e9:.1f} GB"])
    print(_grid(head, rows))
    return 0


# -- output --------------------------------------------------------------------------------
def _t(s: float) -> str:
    if s == 0:
        return "0"
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


def _grid(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) for i in range(len(head))]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in
                       enumerate(zip(head, widths)))]
    for r in rows:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                               enumerate(zip(r, widths))))
    return "\n".join(lines)


def _header(r) -> str:
    lay = r.layout
    what = {"train": f"train, {lay.microbatches} microbatches of {lay.micro_batch} x {lay.seq}",
            "prefill": f"prefill of {lay.global_batch} x {lay.seq} tokens",
            "decode": f"decode, {lay.global_batch} sequences at context {lay.seq}"}[lay.mode]
    nic = f", nic {r.nic}" if r.nic else ""
    return (f"{r.model} on {r.nodes} x {r.system} ({r.gpus} {r.gpu}{nic}): {what}\n"
            f"layout tp={lay.tp} pp={lay.pp} dp={lay.dp} cp={lay.cp} ep={lay.ep}"
            + (f" vpp={lay.vpp}" if lay.vpp > 1 else "")
            + (f" sp={'on' if lay.sequence_parallel else 'off'} zero={lay.zero} "
               f"recompute={lay.recompute}" if lay.mode == "train" else ""))


def _metric_rows(r) -> list[tuple[str, str]]:
    per = "per token" if r.layout.mode == "decode" else "per step"
    step = r.step_time_s
    rows = [(f"step time ({per})", _t(step)),
            ("compute", f"{_t(r.compute_time_s)} ({r.compute_time_s / step:.1%})")]
    for k in KINDS:
        if k in r.comm_time_s:
            rows.append((f"{k} comm total / exposed",
                         f"{_t(r.comm_time_s[k])} / {_t(r.exposed_by_kind[k])}"))
    rows += [("exposed comm", f"{_t(r.exposed_comm_s)} ({r.exposed_comm_s / step:.1%})")]
    if r.layout.mode == "train":
        rows.append(("pipeline bubble", f"{_t(r.bubble_s)} ({r.bubble_s / step:.1%})"))
    rows += [("tokens/s", f"{r.tokens_per_s:,.0f}"),
             ("TFLOP/s per GPU (model)", f"{r.tflops_per_gpu:.1f}"),
             ("MFU", f"{r.mfu:.1%}"),
             ("memory per GPU", f"{r.memory.total / 1e9:.1f} GB of {r.hbm_bytes / 1e9:.1f} GB")]
    return rows


def _table(r, collectives: bool = False) -> str:
    rows = _metric_rows(r)
    w = max(len(k) for k, _ in rows)
    out = [_header(r)] + [f"  {k.ljust(w)}  {v}" for k, v in rows]
    mem = r.memory.to_dict()
    out.append("  " + " ".ljust(w) + "  " + ", ".join(
        f"{k} {v / 1e9:.1f} GB" for k, v in mem.items() if k != "total" and v))
    if collectives:
        head = ["kind", "collective", "group", "together", "size", "calls", "each", "per step",
                "algorithm", "what"]
        rows2 = [[c.comm.kind, c.comm.collective, f"{len(c.ranks)}", f"{c.together}",
                  _size(c.comm.nbytes), f"{c.comm.count:g}/{c.comm.per[:5]}", _t(c.time_s),
                  _t(c.total_s), f"{c.algorithm}/{c.protocol}", c.comm.what] for c in r.comms]
        if rows2:
            out += ["", _grid(head, rows2)]
    return "\n".join(out)


def _size(n: float) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            return f"{n / f:.1f} {unit}"
    return f"{int(n)} B"


def _compare_table(results) -> str:
    head = ["metric"] + [lab for lab, _ in results]
    keys = []
    table = {}
    for lab, r in results:
        for k, v in _metric_rows(r):
            if k not in table:
                keys.append(k)
                table[k] = {}
            table[k][lab] = v
    rows = [["GPUs"] + [f"{r.gpus} {r.gpu}" for _, r in results]]
    rows += [[k] + [table[k].get(lab, "-") for lab, _ in results] for k in keys]
    base = results[0][1]
    ratios = [f"{r.step_time_s / base.step_time_s:.2f}x" for _, r in results]
    rows.append(["step time vs first"] + ratios)
    what = "; ".join(sorted({part.split("=")[0] for lab, _ in results for part in lab.split(",")
                             if part}))
    return (_header(base) + f"\nwhat-ifs on {what} (first column = the settings above)\n\n"
            + _grid(head, rows))


def _plot(results, path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib (pip install matplotlib)") from None
    parts = ["compute"] + [f"{k} exposed" for k in KINDS] + ["bubble"]
    fig, ax = plt.subplots(figsize=(max(4, 1.6 * len(results) + 2), 4.5))
    labels = [lab or f"tp={r.layout.tp} pp={r.layout.pp} dp={r.layout.dp}" for lab, r in results]
    bottoms = [0.0] * len(results)
    for part in parts:
        vals = []
        for _, r in results:
            if part == "compute":
                vals.append(r.compute_time_s)
            elif part == "bubble":
                vals.append(r.bubble_s)
            else:
                vals.append(r.exposed_by_kind.get(part.split()[0], 0.0))
        if any(vals):
            ax.bar(labels, vals, bottom=bottoms, label=part)
            bottoms = [b + v for b, v in zip(bottoms, vals)]
    r0 = results[0][1]
    ax.set_ylabel("seconds per " + ("token" if r0.layout.mode == "decode" else "step"))
    ax.set_title(f"{r0.model}: where the step time goes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as e:
        raise ConfigError(f"cannot write plot {path!r}: {e.strerror}") from None
    plt.close(fig)
    print(f"wrote {path}", file=sys.stderr)
