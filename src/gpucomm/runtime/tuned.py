"""This host's tuned runtime options: what `gpucomm bench --tune` measured fastest here.

How large a piece a direct reduction works through, and from which chunk size reading the
peer's buffer by cross-memory attach beats staging through shared memory, depend on the
host's caches: the first defaults, measured on an AMD EPYC VM (1 MiB L2, 32 MiB L3) with
direct reductions in Python, were 1 MiB pieces, direct from 3 MiB; on an Intel Xeon VM (2 MiB
L2), with them in C, 256 KiB pieces, direct from 16 KiB, ran 2-rank all-reduces of 64 KiB-16
MiB 1.35-2x faster (docs/runtime.md has the numbers), and are the defaults now. Likewise
the size up to which the small-message path beats the general one (`ll_max_bytes`): 16 KiB
on the AMD host, 2 KiB on the Intel one (the default). Only a measurement on the host can
tell, so `gpucomm bench --tune` times the candidates and saves the fastest in
~/.cache/gpucomm/runtime.yaml (`GPUCOMM_RUNTIME_YAML`; `off`: no file). Every later
`RuntimeOptions` of this host starts from those values (the `GPUCOMM_*` variables still
override them), and bench's header says so. A file written on
another host (a home directory shared across machines) is not used: its CPU model and core
count must match this host's.

A leaf module: it imports nothing from gpucomm but the errors.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import ConfigError

VAR = "GPUCOMM_RUNTIME_YAML"
DEFAULT_PATH = os.path.join(os.path.expanduser("~"), ".cache", "gpucomm", "runtime.yaml")
FORMAT = 2  # 2: the direct threshold's candidates reach 16 KiB, timed at 256 KiB too
OLD_FORMATS = (1,)  # files a former `--tune` wrote: set aside (not used), not refused
# the RuntimeOptions fields `--tune` chooses (ll_max_bytes may be 0: the path off)
FIELDS = ("piece_bytes", "direct_min_bytes", "ll_max_bytes")


def path() -> str | None:
    """Where the tuned options are kept (None: `GPUCOMM_RUNTIME_YAML=off`)."""
    value = os.environ.get(VAR, "") or DEFAULT_PATH
    return None if value == "off" else value


def fingerprint() -> dict:
    """What a tuned file must have been measured on: this host's CPU model and core count."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), "")
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count() or 1}


@dataclass(frozen=True)
class Tuned:
    """A tuned file as read: `values` the options it sets here ({} where it is for another
    host), `note` one line saying what was used (bench's header prints it)."""
    path: str
    values: dict = field(default_factory=dict)
    note: str = ""


def read(where: str | None = None) -> Tuned | None:
    """The tuned options at `where` (default `path()`); None where there is no file."""
    where = path() if where is None else where
    if where is None or not os.path.exists(where):
        return None

    def bad(what: str) -> ConfigError:
        return ConfigError(f"{where}: {what}; run `gpucomm bench --tune` again, or set "
                           f"{VAR}=off to use the defaults")
    import yaml  # here: a run without a tuned file (the simulator's) starts without a parser
    try:
        with open(where) as f:
            doc = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise bad(f"not a readable tuned-options file ({str(e).splitlines()[0]})") from None
    if isinstance(doc, dict) and doc.get("format") in OLD_FORMATS:
        return Tuned(where, {}, f"not tuned: {where} was written by an older gpucomm bench "
                                f"--tune (format {doc['format']}, other candidates): not "
                                f"used; run `gpucomm bench --tune` again")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise bad(f"not a tuned-options file of format {FORMAT}")
    values = doc.get("options")
    if not isinstance(values, dict) or not set(values) <= set(FIELDS):
        raise bad(f"'options' must map some of {', '.join(FIELDS)} to byte counts")
    for k, v in values.items():
        least = 0 if k == "ll_max_bytes" else 1
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise bad(f"options.{k} must be an integer >= {least} (bytes), got {v!r}")
    host = doc.get("host")
    if host != fingerprint():
        return Tuned(where, {}, f"not tuned: {where} was measured on another host "
                                f"({_host(host)}; this is {_host(fingerprint())}): not used")
    shown = ", ".join(f"{k} {v}" for k, v in values.items()) or "the defaults"
    return Tuned(where, dict(values), f"tuned for this host by gpucomm bench --tune "
                                      f"({doc.get('tuned', '?')}, {where}): {shown}")


def _host(host) -> str:
    if not isinstance(host, dict):
        return "unknown"
    return f"{host.get('cpu') or '?'}, {host.get('cores', '?')} cores"
