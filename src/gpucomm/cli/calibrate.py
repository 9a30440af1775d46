"""`gpucomm calibrate LOG… --output PROFILE.yaml`: a cluster's physical parameters from its logs.

    gpucomm calibrate run_2n.log run_8n.log --output cluster.yaml
    gpucomm sim --profile cluster.yaml --nodes 540 -c all_gather

Reads each test of each nccl-tests log as `gpucomm doctor` does (machine flags override what
the logs say), fits the NICs' delivered fraction of line rate, the per-message network hop
latency and the intra-node NVLink/xGMI efficiency, and writes them with the machine and the
logs they came from as a YAML profile that sim, doctor and tune take with --profile.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import stat

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
    _write_whole(args.output, prof.to_yaml())
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


def _write_whole(path: str, text: str) -> None:
    """Write `path` all at once (a temporary file renamed over it): never half a profile. The
    file gets the mode a plain open(path, "w") gives: 0666 less the umask, or the old file's."""
    from ..errors import ConfigError
    target = os.path.realpath(path)  # a symbolic link's file is replaced, the link kept
    try:
        old = os.stat(target)
    except OSError:
        old = None
    try:
        fd, tmp = _create_beside(target)
    except OSError as e:
        raise ConfigError(f"cannot write {path!r}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "w") as f:
            if old is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode))
            f.write(text)
        os.replace(tmp, target)
    except BaseException as e:  # an interrupt too: no temporary file is left behind
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise ConfigError(f"cannot write {path!r}: {e.strerror}") from None
        raise


def _create_beside(target: str) -> tuple[int, str]:
    """A new file in `target`'s folder, created as open(..., "w") creates one (mode 0666 less
    the umask; tempfile.mkstemp would give 0600, unreadable by the cluster's other users)."""
    folder = os.path.dirname(target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = os.path.join(folder, f".gpucomm-{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
