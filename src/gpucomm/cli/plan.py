"""`gpucomm plan`: where a training or inference step of a real model spends its time.

The command parses its options into one `PlanRequest`, asks `workloads.request.answer` and
prints the PredictedStep, Comparison or SearchResult it gets back.

    gpucomm plan --model llama3-405b --system dgx-h100 --nodes 2048 --tp 8 --pp 16 --dp 128 \
        --vpp 8 --seq 8192 --global-batch 2048 --nic roce-400g --zero 2 --balanced-ends
    gpucomm plan --model llama3-70b --mode decode --tp 8 --seq 4096 --global-batch 1 \
        --compare system=dgx-h100,pcie
"""
from __future__ import annotations

import sys

from ..errors import ConfigError
from ..workloads.frameworks import PRECISIONS, list_frameworks
from ..workloads.layout import KINDS, MODES, RECOMPUTE, RECOMPUTE_MODULES
from ..workloads.models import list_models
from ..workloads.request import (COMPARE_KEYS, LAYOUT_KEYS, TOPOLOGY_KEYS, Comparison,
                                 PlanRequest, answer)
from ..workloads.search import SearchResult
from ..topology import FABRICS
from .common import (PLOT_SUFFIXES, add_format, html_arg, name_arg, nics_arg, output_file,
                     nonnegative_int, oversubscription_arg, positive_int,
                     print_json)
from .topo import add_network_args, network_from_args

_INTS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "seq", "global_batch", "micro_batch", "zero",
         "nodes", "pcie_gen", "nics_per_node", "gpus_per_node", "leaf_ports", "other_job")
_FLOATS = ("oversubscription", "moe_imbalance")
_BOOLS = ("sp", "p2p", "flash", "balanced_ends", "dp_overlap", "tp_overlap", "cp_overlap",
          "pp_overlap", "ep_overlap", "fp8_activations", "offload_activations",
          "offload_optimizer", "full_cuda_graph")


def register(sub) -> None:
    p = sub.add_parser("plan", help="step time, communication and memory of a model on a cluster",
                       description="Predict one training step (or prefill / decode step) of a "
                       "transformer on a cluster: compute, communication per kind and how much "
                       "of it is exposed, throughput, MFU and memory per GPU.")
    p.add_argument("--model", required=True,
                   help=f"a shipped model ({', '.join(list_models())}) or a .yaml config")
    p.add_argument("--system", type=name_arg, default="dgx-h100",
                   help="topology preset (default dgx-h100)")
    p.add_argument("--topology", metavar="FILE", default=None,
                   help="one node's topology YAML (as gpucomm topo writes it) instead of a "
                   "preset; --nodes copies it onto the fabric")
    p.add_argument("--nodes", type=positive_int, default=1)
    p.add_argument("--nic", default=None, help="NIC technology, e.g. ib-ndr, roce-400g")
    p.add_argument("--gpu", default=None,
                   help="another GPU model in the system (e.g. --system pcie --gpu h100)")
    p.add_argument("--pcie-gen", type=int, choices=(3, 4, 5, 6), default=None,
                   help="set every PCIe link to this generation")
    p.add_argument("--fabric", choices=FABRICS, default=None)
    p.add_argument("--oversubscription", type=oversubscription_arg, default=None,
                   help="fabric oversubscription (1 = full bisection)")
    p.add_argument("--nics-per-node", type=nics_arg, default=None)
    p.add_argument("--profile", dest="profile_file", metavar="PROFILE.yaml", default=None,
                   help="a calibration profile (gpucomm calibrate): its fitted NIC, latency and "
                   "NVLink parameters on the system given")
    p.add_argument("--gpus-per-node", type=positive_int, default=None,
                   help="use the first K GPUs of each node (e.g. 64 of a 72-GPU NVL72 rack)")
    p.add_argument("--no-p2p", dest="p2p", action="store_false", default=True,
                   help="PCIe boxes: GPU traffic bounces through host memory")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor parallel degree")
    p.add_argument("--pp", type=positive_int, default=1, help="pipeline parallel degree")
    p.add_argument("--dp", type=positive_int, default=None,
                   help="data parallel degree (default: GPUs / (tp*pp*cp))")
    p.add_argument("--cp", type=positive_int, default=1, help="context parallel degree")
    p.add_argument("--ep", type=positive_int, default=1,
                   help="expert parallel degree (over a stage's tp*cp*dp/etp ranks)")
    p.add_argument("--etp", type=positive_int, default=None,
                   help="tensor parallelism of the experts (default: --tp); must divide --tp")
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
    p.add_argument("--recompute", choices=RECOMPUTE, default="none",
                   help="activation recomputation: selective re-runs the attention core "
                   "(Korthikanti et al. 2022), full every layer's forward")
    p.add_argument("--recompute-modules", default=None, metavar="M1,M2",
                   help="parts re-made in backward (Megatron-core --recompute-modules): "
                   + ", ".join(RECOMPUTE_MODULES))
    p.add_argument("--fp8-activations", action="store_true", default=None,
                   help="linear-layer inputs cached in fp8 (DeepSeek-V3)")
    p.add_argument("--offload-activations", action="store_true", default=None,
                   help="stored activations wait in host memory (over PCIe)")
    p.add_argument("--offload-optimizer", action="store_true", default=None,
                   help="optimizer states in host memory, Adam on the CPU (ZeRO-Offload)")
    p.add_argument("--full-cuda-graph", action="store_true", default=None,
                   help="the whole iteration replays from a CUDA graph (Megatron-core "
                   "full_iteration with fixed-capacity MoE buffers): a dropless MoE layer's "
                   "experts cost no per-expert host launches")
    p.add_argument("--fp32-grads", dest="grad_bytes", action="store_const", const=4,
                   default=None, help="gradients kept and reduced in fp32 (default: the "
                   "framework's: bf16 for megatron, fp32 for torchtitan and deepspeed)")
    p.add_argument("--bf16-grads", dest="grad_bytes", action="store_const", const=2,
                   help="gradients kept and reduced in bf16")
    p.add_argument("--no-flash", dest="flash", action="store_false", default=True,
                   help="attention materialises its score matrix (pre-FlashAttention kernels)")
    p.add_argument("--precision", choices=PRECISIONS, default="bf16",
                   help="GEMM arithmetic: bf16, fp8 (the framework's default recipe) or an fp8 "
                   "recipe (tensorwise, delayed, rowwise, blockwise, mxfp8); MFU is against the "
                   "dense peak of this precision")
    p.add_argument("--framework", choices=list_frameworks(), default="megatron",
                   help="kernel-efficiency and overlap set (data/frameworks/*.yaml; default "
                   "megatron); overlap flags given here override its defaults")
    p.add_argument("--balanced-ends", action="store_true", default=False,
                   help="first and last pipeline stages carry one layer fewer (embedding, "
                   "loss), as Llama 3 and Megatron-core's --account-for-*-in-pipeline-split")
    for name, what in (("dp", "DP gradient reduction bucket by bucket within backward"),
                       ("tp", "TP collectives hidden behind GEMMs (--tp-comm-overlap, AsyncTP)"),
                       ("cp", "CP K,V ring-overlapped with attention (off: all-gathered first)"),
                       ("pp", "pipeline sends asynchronous (off: they block the stage)"),
                       ("ep", "MoE all-to-alls behind another microbatch (DualPipe, 1F1B "
                        "all-to-all overlap)")):
        dest = f"{name}_overlap"
        p.add_argument(f"--{name}-overlap", dest=dest, action="store_true", default=None,
                       help=f"{what}; default: the framework's")
        p.add_argument(f"--no-{name}-overlap", dest=dest, action="store_false", default=None,
                       help=f"turn {name.upper()} overlap off")
    p.add_argument("--moe-imbalance", type=float, default=1.0, metavar="X",
                   help="tokens the busiest expert rank gets over the mean (default 1: even)")
    p.add_argument("--mode", choices=MODES, default="train")
    p.add_argument("--compare", action="append", default=[], metavar="KEY=V1,V2",
                   help=f"what-ifs side by side; KEY is one of {', '.join(COMPARE_KEYS)}")
    p.add_argument("--search", action="store_true",
                   help="rank the layouts (tp, pp, vpp, dp, cp, ep, micro-batch, "
                   "recomputation, ZeRO stage) that fit on this cluster by tokens/s")
    p.add_argument("--top", type=positive_int, default=10,
                   help="rows --search prints, each with why it lost to the best")
    p.add_argument("--plot", metavar="FILE.png", help="stacked bar of where the step time goes")
    p.add_argument("--html", type=html_arg, metavar="FILE.html",
                   help="a self-contained HTML report: step time "
                   "and memory per GPU, what-ifs side by side")
    p.add_argument("--sim-model", choices=("analytic", "flow"), default="analytic",
                   help="simulator model for the collectives (default analytic)")
    p.add_argument("--no-contention", dest="contention", action="store_false", default=True,
                   help="time each group alone, not together with the groups sharing its links")
    p.add_argument("--collectives", action="store_true",
                   help="also list every collective with its group, size and time")
    add_format(p)
    add_network_args(p)
    p.add_argument("--other-job", type=nonnegative_int, default=None, metavar="NODES",
                   help="a second job on NODES more nodes of the fabric, placed by --placement "
                   "on the nodes the job leaves; its groups, shaped like each of the job's "
                   "groups, run the same collective at the same moment and share the cables, "
                   "rings and NCCL's trees alike (needs a modelled fabric; 0: none)")
    p.set_defaults(func=cmd_plan)


def request(args) -> PlanRequest:
    """The command line as one request value."""
    topology = tuple((k, getattr(args, k)) for k in TOPOLOGY_KEYS
                     if getattr(args, k, None) is not None and not (k == "p2p" and args.p2p))
    network = network_from_args(args)
    if network is not None:
        topology += (("network", network),)
    if getattr(args, "profile_file", None):
        from ..topology.profile import load_profile
        topology += (("profile", tuple(sorted(load_profile(args.profile_file).parameters
                                              .items()))),)
    given = {k: getattr(args, k) for k in LAYOUT_KEYS if hasattr(args, k)}
    layout = tuple((k, v) for k, v in given.items() if v is not None)
    system = args.topology or args.system
    return PlanRequest(args.model, system, args.nodes, args.nic, topology, layout,
                       args.sim_model, args.contention, _parse_compare(args.compare),
                       args.search, args.top)


def _value(key: str, text: str):
    if key in _INTS:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"--compare {key}: {text!r} is not an integer") from None
    if key in _FLOATS:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"--compare {key}: {text!r} is not a number") from None
    if key in _BOOLS:
        return text.lower() in ("1", "true", "on", "yes")
    return text


def _parse_compare(items: list[str]) -> tuple:
    out = []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--compare {item!r} must look like KEY=V1,V2")
        key, values = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if key not in COMPARE_KEYS:
            raise ConfigError(f"--compare key {key!r} is unknown: allowed are "
                              f"{', '.join(COMPARE_KEYS)}")
        vals = tuple(_value(key, v.strip()) for v in values.split(",") if v.strip())
        if not vals:
            raise ConfigError(f"--compare {key}= needs at least one value")
        out.append((key, vals))
    return tuple(out)


def cmd_plan(args) -> int:
    if args.plot:
        output_file(args.plot, "--plot", PLOT_SUFFIXES)
    result = answer(request(args))
    doc = _json(result, args.collectives)
    if args.html:
        from ..report.html import write_html
        print(f"wrote {write_html(args.html, doc, args=args)}", file=sys.stderr)
    if args.format == "json":
        print_json(doc)
    elif isinstance(result, SearchResult):
        print(_search_table(result))
    elif isinstance(result, Comparison):
        print(_compare_table(list(result.variants)))
    else:
        print(_table(result, args.collectives))
    if args.plot and not isinstance(result, SearchResult):
        _plot(list(result.variants) if isinstance(result, Comparison) else [("", result)],
              args.plot)
    return 0


def _json(result, collectives: bool):
    def one(plan):
        d = plan.to_dict()
        if not collectives:
            d.pop("collectives")
        return d
    if isinstance(result, SearchResult):
        return result.to_dict()
    if isinstance(result, Comparison):
        return [{"variant": lab, **one(r)} for lab, r in result.variants]
    return one(result)


def _search_table(res: SearchResult) -> str:
    r = res.to_dict()
    lines = [f"{res.model} on {res.nodes} x {res.system} ({res.gpus} {res.gpu}), {res.mode}: "
             f"{res.structures} layouts considered, {r['rejected']['divisibility']} cannot "
             f"split, {r['rejected']['memory']} do not fit, {res.bounded} bounded out, "
             f"{res.timed} timed in {res.elapsed_s:.1f} s; best {len(res.ranked)} "
             f"(MFU against the dense "
             f"{'fp8' if res.ranked[0].plan.layout.fp8 else 'bf16'} peak):"]
    head = ["rank", "tp", "pp", "vpp", "dp", "cp", "ep", "mb", "recompute", "zero", "step",
            "tokens/s", "TFLOP/s", "MFU", "exposed comm", "bubble", "mem/GPU", "why not best"]
    rows = []
    for i, x in enumerate(res.ranked, 1):
        p, lay = x.plan, x.plan.layout
        rows.append([str(i), str(lay.tp), str(lay.pp), str(lay.vpp), str(lay.dp), str(lay.cp),
                     str(lay.ep), str(lay.micro_batch), lay.recompute, str(lay.zero),
                     _t(p.step_time_s), f"{p.tokens_per_s:,.0f}", f"{p.tflops_per_gpu:.0f}",
                     f"{p.mfu:.1%}", _t(p.exposed_comm_s), _t(p.bubble_s),
                     f"{p.memory.total / 1e9:.1f} GB", x.why or "best"])
    return "\n".join(lines) + "\n" + _grid(head, rows)


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
            + (f" etp={lay.etp}" if lay.etp and lay.etp != lay.tp else "")
            + (f" vpp={lay.vpp}" if lay.vpp > 1 else "")
            + (f" sp={'on' if lay.sequence_parallel else 'off'} zero={lay.zero} "
               f"recompute={lay.recompute} mb={lay.micro_batch}" if lay.mode == "train" else "")
            + ("" if lay.flash else " no-flash")
            + (f" precision={lay.precision}" if lay.fp8 else "")
            + (f" framework={lay.framework}" if lay.framework != "megatron" else "")
            + (" balanced-ends" if lay.balanced_ends else "")
            + (f" moe-imbalance={lay.moe_imbalance:g}" if lay.moe_imbalance != 1 else "")
            + (f" recompute-modules={','.join(lay.recompute_modules)}"
               if lay.recompute_modules else "")
            + (" fp8-activations" if lay.fp8_activations else "")
            + (" offload-activations" if lay.offload_activations else "")
            + (" offload-optimizer" if lay.offload_optimizer else "")
            + (" full-cuda-graph" if lay.full_cuda_graph else ""))


def _metric_rows(r) -> list[tuple[str, str]]:
    per = "per token" if r.layout.mode == "decode" else "per step"
    step = r.step_time_s
    rows = [(f"step time ({per})", _t(step)),
            ("compute", f"{_t(r.compute_time_s)} ({r.compute_time_s / step:.1%})")]
    for k in KINDS:
        if k in r.comm_time_s:
            rows.append((f"{k} comm total / exposed",
                         f"{_t(r.comm_time_s[k])} / {_t(r.exposed_by_kind[k])}"))
            if k == "EP" and r.ep_exposed_share is not None:
                rows.append(("  EP exposed share", f"{r.ep_exposed_share:.0%}"))
            if k == "EP":
                for part, label in (("intra", "inside nodes (NVLink)"),
                                    ("inter", "across nodes (RDMA)")):
                    if part in r.ep_split:
                        rows.append((f"  EP all-to-all {label}", _t(r.ep_split[part])))
    rows += [("exposed comm", f"{_t(r.exposed_comm_s)} ({r.exposed_comm_s / step:.1%})")]
    if r.second_job_by_kind:  # --other-job: against the job alone on the same cluster
        rows.append(("second job slows comm", ", ".join(
            f"{k} x{v:.2f}" for k, v in sorted(r.second_job_by_kind.items()))))
    if r.layout.mode == "train":
        rows.append(("pipeline bubble", f"{_t(r.bubble_s)} ({r.bubble_s / step:.1%})"))
        rows.append(("optimizer step", _t(r.optimizer_s)))
    rows += [("tokens/s", f"{r.tokens_per_s:,.0f}"),
             ("TFLOP/s per GPU (model)", f"{r.tflops_per_gpu:.1f}"),
             (f"MFU (vs dense {'fp8' if r.layout.fp8 else 'bf16'} peak)", f"{r.mfu:.1%}"),
             ("memory per GPU", f"{r.memory.total / 1e9:.1f} GB of {r.hbm_bytes / 1e9:.1f} GB")]
    return rows


def _table(r, collectives: bool = False) -> str:
    rows = _metric_rows(r)
    w = max(len(k) for k, _ in rows)
    out = [_header(r)] + [f"  {k.ljust(w)}  {v}" for k, v in rows]
    mem = r.memory.to_dict()
    out.append("  " + " ".ljust(w) + "  " + ", ".join(
        f"{k} {v / 1e9:.1f} GB" for k, v in mem.items() if k != "total" and v))
    for o in r.overlaps():
        out.append(f"  overlap {o['switch'].replace('_overlap', '').upper():2s} "
                   f"{'on ' if o['on'] else 'off'}  {o['source']}")
    k = r.kernels
    gemm = (f"fp8 GEMMs at {k.gemm_fp8:.0%} of the fp8 peak, other GEMMs"
            if r.layout.fp8 else "GEMMs")
    out.append(f"  kernels ({r.layout.framework}): {gemm} at {k.gemm:.0%} of the bf16 peak, "
               f"attention at {k.attention:.0%} of bf16 ({k.source})")
    for w_ in r.warnings:
        out.append(f"  warning: {w_}")
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
    table: dict = {}
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
