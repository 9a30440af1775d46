"""`gpucomm doctor LOG…`: is this nccl-tests busbw normal for the machine it ran on?

    gpucomm doctor all_reduce_perf.log
    gpucomm doctor ag.log rs.log --system dgx-h100 --nodes 2 --format json

Reads each log as nccl-tests printed it (with NCCL_DEBUG=INFO lines if present), infers the
collective, GPU model, nodes, GPUs per node and NIC, predicts every row on that machine, and
prints measured vs expected, a verdict and the likeliest causes the log shows.
"""
from __future__ import annotations


from ..errors import ConfigError
from ._nccltests import retire
from .common import (add_format, add_select, name_arg, nccl_version_arg, nics_arg, positive_int,
                     print_json)


def add_log_args(p) -> None:
    """The logs and the machine they ran on, as doctor infers it from them; each flag overrides
    only what it names (doctor and calibrate)."""
    p.add_argument("logs", nargs="+", metavar="LOG", help="nccl-tests output file(s)")
    p.add_argument("--collective", help="when a log does not name its test")
    p.add_argument("--system", "-s", type=name_arg, metavar="PRESET",
                   help="override the inferred node preset")
    p.add_argument("--nodes", type=positive_int, help="override the inferred node count")
    p.add_argument("--gpus-per-node", type=positive_int, help="override GPUs per node")
    p.add_argument("--nic", help="override the inferred NIC technology (catalog name)")
    p.add_argument("--nics-per-node", type=nics_arg, help="override NICs per node")
    p.add_argument("--gpu", help="override the GPU model the device lines name (catalog name)")
    p.add_argument("--nccl-version", metavar="X.Y", type=nccl_version_arg,
                   help="the NCCL the log ran, where its INFO lines do not say (or to override "
                   "them): that release's tuning constants and algorithms (e.g. 2.18)")
    p.add_argument("--topology", metavar="FILE", help="a topology YAML file to model instead of "
                   "a preset (a one-node file is replicated to the log's node count)")


def register(sub) -> None:
    p = sub.add_parser("doctor", help="is an nccl-tests log normal for its machine? (and why not)",
                       description=__doc__.split("\n\n")[2] if __doc__ else None)
    add_log_args(p)
    p.add_argument("--profile", metavar="PROFILE.yaml", help="judge against a calibrated "
                   "cluster (gpucomm calibrate): its fitted NIC, latency and NVLink figures")
    p.add_argument("--algorithm", help="predict this algorithm (default: the log's NCCL_ALGO, "
                   "else auto)")
    p.add_argument("--protocol", choices=("auto", "ll", "ll128", "simple"))
    add_select(p, default="nccl")
    p.add_argument("--sim-model", dest="model", default="analytic", choices=("analytic", "flow"),
                   help="the simulator: analytic (default) or flow")
    retire(p, "-c", "-N", "--model")
    add_format(p)
    p.set_defaults(func=cmd_doctor)


def requests_of(args, path: str, **extra) -> list:
    """One DoctorRequest per test in a log file (a file may hold several back to back), with
    the command line's overrides."""
    from ..interop.doctor import DoctorRequest
    from ..interop.nccltests import parse_logs
    from ..inputs import read_text
    text = read_text(path, "nccl-tests log")
    try:
        logs = parse_logs(text)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    if getattr(args, "topology", None) and "topology" not in extra:
        from ..topology import Topology
        extra["topology"] = Topology.load(args.topology)
    if getattr(args, "profile", None) and "profile" not in extra:
        from ..topology.profile import load_profile
        extra["profile"] = load_profile(args.profile)
    out = []
    for i, log in enumerate(logs):
        name = path if len(logs) == 1 else f"{path} [test {i + 1}: {log.test or 'unnamed'}]"
        out.append(DoctorRequest(log, name=name, collective=args.collective, system=args.system,
                                 nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                                 nic=args.nic, nics_per_node=args.nics_per_node,
                                 gpu=getattr(args, "gpu", None), model=args.model,
                                 algorithm=args.algorithm,
                                 protocol=None if args.protocol in (None, "auto")
                                 else args.protocol,
                                 select=getattr(args, "select", "nccl"),
                                 nccl_version=getattr(args, "nccl_version", None), **extra))
    return out


def request_of(args, path: str, **extra):
    """The DoctorRequest of a log file's one test: with several, the one of --collective."""
    reqs = requests_of(args, path, **extra)
    if len(reqs) == 1:
        return reqs[0]
    from ..collectives import get_collective
    want = get_collective(args.collective).name if args.collective else None
    match = [r for r in reqs if want and r.log.collective == want]
    if len(match) == 1:
        return match[0]
    tests = ", ".join(r.log.test or "unnamed" for r in reqs)
    raise ConfigError(f"{path} holds {len(reqs)} tests ({tests}): give -c/--collective to pick "
                      "one" + (" that occurs once" if match else "") + ", or run gpucomm doctor, "
                      "which diagnoses each")


def cmd_doctor(args) -> int:
    from ..interop.doctor import diagnose
    results = [diagnose(req) for path in args.logs for req in requests_of(args, path)]
    if args.format == "json":
        dicts = [d.to_dict() for d in results]
        print_json(dicts[0] if len(dicts) == 1 else {"logs": dicts})
        return 0
    for i, d in enumerate(results):
        if i:
            print()
        print(render(d))
    return 0


def render(d) -> str:
    g = d.guess
    lines = [f"# gpucomm doctor: {d.name}"]
    gpus = f"{g.gpus_per_node} × {g.gpu_name}" if g.gpu_name else f"{g.gpus_per_node} GPUs"
    lines.append(f"# log: {d.collective}, {g.nranks} ranks on {g.nodes} node(s) of {gpus}"
                 + (f", NCCL {d.info.get('version')}" if d.info.get("version") else ""))
    lines.append(f"# modelled as {d.label} ({', '.join(f'{k}={v}' for k, v in d.system.items())})")
    for w in d.warnings:
        lines.append(f"# warning: {w}")
    lines.append(f"#{'size':>12} {'meas us':>10} {'pred us':>10} {'meas busbw':>11} "
                 f"{'pred busbw':>11} {'of pred':>8}  model's choice")
    for r in d.rows:
        if r.get("flag"):
            lines.append(f" {r['size']:>12} {'row not judged: ' + r['flag']}")
            continue
        pct = "-" if r["ratio"] is None else f"{100 * r['ratio']:.0f}%"
        lines.append(f" {r['size']:>12} {r['time_us']:>10.2f} {r['predicted_time_us']:>10.2f} "
                     f"{r['busbw']:>11.2f} {r['predicted_busbw']:>11.2f} {pct:>8}  "
                     f"{r['algorithm']}/{r['protocol']}")
    lines.append(f"verdict: {d.verdict}")
    if d.causes:
        lines.append("likeliest causes seen in the log:")
        lines += [f"  - {c}" for c in d.causes]
    if d.notes:
        lines.append("notes:")
        lines += [f"  - {n}" for n in d.notes]
    return "\n".join(lines)
