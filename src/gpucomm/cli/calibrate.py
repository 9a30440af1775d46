"""`gpucomm calibrate LOG… --output PROFILE.yaml`: a cluster's physical parameters from its logs.

    gpucomm calibrate run_2n.log run_8n.log --output cluster.yaml
    gpucomm sim --profile cluster.yaml --nodes 540 -c all_gather

Reads each test of each nccl-tests log as `gpucomm doctor` does (machine flags override what
the logs say), fits the NICs' delivered fraction of line rate, the per-message network hop
latency and the intra-node NVLink/xGMI efficiency, and writes them with the machine and the
logs they came from as a YAML profile that sim, doctor and tune take with --profile.
"""
from __future__ import annotations

from ..outputs import write_text
from ._nccltests import retire
from .common import add_format, add_select, output_file, print_json
from .doctor import add_log_args


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="fit a cluster's NIC, latency and NVLink parameters "
                       "from its nccl-tests logs into a profile",
                       description=__doc__.split("\n\n")[2] if __doc__ else None)
    add_log_args(p)
    p.add_argument("--output", required=True, metavar="PROFILE.yaml")
    p.add_argument("--sim-model", dest="model", default="analytic", choices=("analytic", "flow"),
                   help="the simulator: analytic (alpha-beta) or flow (link sharing)")
    add_select(p, default="nccl")
    retire(p, "-c", "-N", "-o", "--model")
    add_format(p)
    p.set_defaults(func=cmd_calibrate, algorithm=None, protocol=None)


def cmd_calibrate(args) -> int:
    from ..interop.calibrate import CalibrateRequest, calibrate
    from .doctor import requests_of
    output_file(args.output, "--output", (".yaml", ".yml"))
    reqs = tuple(r for path in args.logs for r in requests_of(args, path))
    prof = calibrate(CalibrateRequest(reqs))
    write_text(args.output, prof.to_yaml())
    if args.format == "json":
        print_json({"output": args.output, "machine": prof.machine,
                    "parameters": prof.parameters, "details": prof.details, "fit": prof.fit,
                    "sources": list(prof.sources)})
        return 0
    print(f"wrote {args.output}: {len(prof.sources)} test(s) on "
          + ", ".join(f"{k}={v}" for k, v in prof.machine.items()))
    for name, value in prof.parameters.items():
        d = prof.details[name]
        shown = f"{int(value):8d}" if name.endswith("_bytes") else f"{value:8.4g}"
        print(f"  {name:23s} {shown}  (catalog {d['catalog']}): {d['note']}")
    for when in ("before", "after"):
        errs = ", ".join(f"{k} {100 * v:.1f}%" for k, v in prof.fit[when].items())
        print(f"  median |busbw error| {when:6s} calibration: {errs}")
    return 0
