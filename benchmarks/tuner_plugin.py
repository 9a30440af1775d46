"""NVIDIA's example tuner plugin, fed `gpucomm tune`'s file, against what `gpucomm sim` reports.

    python benchmarks/tuner_plugin.py --plugin-src ~/nccl/plugins/tuner/example

compiles the plugin's `plugin.c` with the C compiler ($CC, default gcc) into a scratch
directory and drives it as NCCL drives a tuner plugin (facts from NVIDIA/nccl, no code copied):

- symbols tried newest first, as src/plugin/tuner.cc does: ncclTunerPlugin_v6, _v5, _v4, _v3;
  v5/v6 `init(&ctx, commId, nRanks, nNodes, logger, &nvlDomainInfo, &constants)`, v3/v4
  `init(nRanks, nNodes, logger, &ctx)` (src/include/plugin/tuner/tuner_v*.h), once per
  communicator, with NCCL_TUNER_CONFIG_FILE naming the file;
- per collective call (src/enqueue.cc ncclGetAlgoInfo): a `float[7][3]` cost table (algorithm x
  protocol, -1.0 = NCCL_ALGO_PROTO_IGNORE) passed as `float**`, nBytes = the larger buffer
  (ncclFuncMaxSendRecvCount: nccl-tests' size), numPipeOps 1, regBuff 0, `int nChannels = 0`;
  then NCCL takes the cheapest entry >= 0 (topoGetAlgoInfo) and the plugin's nChannels when
  it is not 0.

The table holds gpucomm's own costs for the pairs `predict` considered (what NCCL's table would
offer), the rest IGNORE, with the pair `sim` chose made the most expensive: only a rule the
plugin applies can select it. A probe matches when the plugin's outcome is `sim`'s algorithm,
protocol and channel count. Sizes: powers of two (on the file's probe grid) and 1.5x them
(between two probes: the rule boundary is there, so sim may pick the other side's choice).

The plugin runs in a child process (`--drive`), one JSON line per probe, so a plugin that
crashes (NCCL 2.27.5-2.29.7 indexed the `float**` as a 2-D array and dereference cost values
as pointers) is reported with the probe it died on.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes as C
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

FUNCS = {"broadcast": 0, "reduce": 1, "all_gather": 2, "reduce_scatter": 3, "all_reduce": 4}
ALGOS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOS = ("ll", "ll128", "simple")
IGNORE = -1.0
PRESETS = ("dgx-v100", "dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "pcie")
NODES = (1, 2, 4)


# ---- the driver: NCCL's side of the plugin API, in the child process -------------------------
Logger = C.CFUNCTYPE(None, C.c_int, C.c_ulong, C.c_char_p, C.c_int, C.c_char_p)
Init5 = C.CFUNCTYPE(C.c_int, C.POINTER(C.c_void_p), C.c_uint64, C.c_size_t, C.c_size_t, Logger,
                    C.c_void_p, C.c_void_p)
Init3 = C.CFUNCTYPE(C.c_int, C.c_size_t, C.c_size_t, Logger, C.POINTER(C.c_void_p))
Get4 = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int, C.c_size_t, C.c_int, C.c_void_p, C.c_int,
                   C.c_int, C.c_int, C.POINTER(C.c_int))
Get3 = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int, C.c_size_t, C.c_int, C.c_void_p, C.c_int,
                   C.c_int, C.POINTER(C.c_int))
Fini = C.CFUNCTYPE(C.c_int, C.c_void_p)
Table = C.c_float * 3 * 7


def _api(version: int) -> type[C.Structure]:
    init, get = (Init5, Get4) if version >= 5 else (Init3, Get4 if version == 4 else Get3)
    fields = [("name", C.c_char_p), ("init", init), ("getCollInfo", get), ("finalize", Fini)]
    if version == 6:
        fields.append(("getChunkSize", C.c_void_p))
    return type(f"Tuner_v{version}", (C.Structure,), {"_fields_": fields})


def load(so: str) -> tuple[int, C.Structure]:
    lib = C.CDLL(so)
    for version in (6, 5, 4, 3):
        try:
            return version, _api(version).in_dll(lib, f"ncclTunerPlugin_v{version}")
        except ValueError:
            continue
    raise SystemExit(f"{so}: no ncclTunerPlugin_v3..v6 symbol (not a tuner plugin?)")


class _NvlDomain(C.Structure):
    _fields_ = [("nNvlDomains", C.c_int), ("minRanks", C.c_int), ("maxRanks", C.c_int)]


def drive(job: dict) -> None:
    """Each communicator of `job`: init, one getCollInfo per probe (one JSON line each)."""
    version, api = load(job["so"])
    os.environ["NCCL_TUNER_CONFIG_FILE"] = job["conf"]
    warnings = [0]

    def log(level: int, flags: int, file: bytes, line: int, fmt: bytes) -> None:
        warnings[0] += level == 2  # NCCL_LOG_WARN

    logger = Logger(log)
    for comm_id, comm in enumerate(job["comms"]):
        ctx = C.c_void_p()
        nranks, nnodes = comm["nranks"], comm["nnodes"]
        if version >= 5:
            per = nranks // nnodes
            dom = _NvlDomain(nnodes, per, per)
            consts = (C.c_double * 256)()  # >= ncclTunerConstants_v5_t (144 doubles)
            rc = api.init(C.byref(ctx), comm_id, nranks, nnodes, logger, C.byref(dom),
                          C.byref(consts))
        else:
            rc = api.init(nranks, nnodes, logger, C.byref(ctx))
        if rc:
            raise SystemExit(f"init({nranks} ranks, {nnodes} nodes) returned {rc}")
        for probe in comm["probes"]:
            print(json.dumps({"probe": probe["id"], **_get(api, version, ctx, probe)}),
                  flush=True)
        api.finalize(ctx)
    print(json.dumps({"version": version, "warnings": warnings[0]}), flush=True)


def _get(api: C.Structure, version: int, ctx: C.c_void_p, probe: dict) -> dict:
    table = Table()
    for a in range(7):
        for p in range(3):
            table[a][p] = probe["table"][a][p]
    before = [list(row) for row in table]
    nch = C.c_int(0)
    args = [ctx, FUNCS[probe["coll"]], probe["nbytes"], 1, C.cast(table, C.c_void_p), 7, 3]
    rc = api.getCollInfo(*args, *([0] if version >= 4 else []), C.byref(nch))
    best, where = None, (-1, -1)
    for a in range(7):
        for p in range(3):
            if table[a][p] != IGNORE and table[a][p] >= 0 and (best is None or
                                                                table[a][p] < best):
                best, where = table[a][p], (a, p)
    changed = [list(row) for row in table] != before
    return {"rc": rc, "algorithm": ALGOS[where[0]] if best is not None else None,
            "protocol": PROTOS[where[1]] if best is not None else None,
            "channels": nch.value, "table_changed": changed}


# ---- the harness: gpucomm tune and sim, in this process --------------------------------------
def compile_plugin(src: Path, out: Path) -> Path:
    if not (src / "plugin.c").is_file():
        raise SystemExit(f"--plugin-src {src}: no plugin.c there (NVIDIA/nccl "
                         "plugins/tuner/example, or ext-tuner/example before 2.29.7)")
    so = out / "libnccl-tuner-example.so"
    cmd = [os.environ.get("CC", "gcc"), "-O2", "-fPIC", "-shared", f"-I{src / 'nccl'}",
           f"-I{src}", "-o", str(so), str(src / "plugin.c")]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        raise SystemExit(f"{cmd[0]}: no C compiler (set CC)") from None
    if done.returncode:
        raise SystemExit(f"compiling {src / 'plugin.c'} failed:\n{done.stderr}")
    return so


def _cli(argv: list[str]) -> str:
    from gpucomm.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    if rc:
        raise SystemExit(f"gpucomm {' '.join(argv)} exited {rc}")
    return out.getvalue()


def sim_rows(preset: str, nodes: int, gpus: int, coll: str, max_bytes: int) -> list[dict]:
    """`gpucomm sim`'s rows (powers of two and 1.5x them) with the channels it reports and the
    cost table NCCL would offer the plugin."""
    import re

    from gpucomm.simulate import predict
    from gpucomm.topology import build_topology
    topo = build_topology(preset, nodes=nodes, gpus_per_node=gpus)
    rows = []
    for first in ("8", "12"):
        doc = json.loads(_cli(["sim", coll, "--system", preset, "--nodes", str(nodes),
                               "--gpus-per-node", str(gpus), "-b", first, "-e", str(max_bytes),
                               "-f", "2", "--format", "json"]))
        for row in doc["rows"]:
            if row["size"] == 0:  # NCCL discards empty collectives before tuning them
                continue  # (enqueue.cc taskAppend: `if (info->count == 0) return`)
            ch = re.search(r"(\d+)ch\b", row["reason"])
            res = predict(coll, row["size"], topo)
            costs = {(a, p): t * 1e6 for a, p, t in res.candidates}
            worst = max(costs.values()) + 1.0
            table = [[costs.get((a, p), IGNORE) for p in PROTOS] for a in ALGOS]
            a, p = ALGOS.index(row["algorithm"]), PROTOS.index(row["protocol"])
            table[a][p] = worst  # only the plugin's rule can make sim's choice the cheapest
            rows.append({"coll": coll, "nbytes": row["size"], "grid": first == "8",
                         "table": table, "expect": [row["algorithm"], row["protocol"],
                                                    int(ch.group(1)) if ch else None]})
    return rows


def build_job(so: Path, conf: Path, preset: str, nodes: int, colls: list[str], max_bytes: int,
              cache: dict) -> dict:
    from gpucomm.interop.tuner import parse_csv
    _cli(["tune", "--system", preset, "--nodes", str(nodes), "-e", str(max_bytes),
          "--output", str(conf), *[x for c in colls for x in ("--collective", c)]])
    shapes = sorted({(r["nNodes"], r["nRanks"]) for r in parse_csv(conf.read_text())})
    comms = []
    for n, p in shapes:
        probes = []
        for coll in colls:
            key = (preset, n, p // n, coll)
            if key not in cache:
                cache[key] = sim_rows(preset, n, p // n, coll, max_bytes)
            probes += cache[key]
        probes = [dict(pr, nnodes=n, nranks=p) for pr in probes]
        comms.append({"nnodes": n, "nranks": p, "probes": probes})
    return {"so": str(so), "conf": str(conf), "comms": comms}


def run_job(job: dict, workdir: Path) -> tuple[list[dict], dict | None, str | None]:
    """Probe results, the driver's summary line, and how it died (None if it did not)."""
    probes = [pr for comm in job["comms"] for pr in comm["probes"]]
    for i, probe in enumerate(probes):
        probe["id"] = i
    path = workdir / "job.json"
    path.write_text(json.dumps(job))
    done = subprocess.run([sys.executable, __file__, "--drive", str(path)], capture_output=True,
                          text=True, timeout=900)
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    results = [dict(probes[x["probe"]], got=x) for x in lines if "probe" in x]
    summary = next((x for x in lines if "version" in x), None)
    death = None
    if done.returncode:
        death = (signal.Signals(-done.returncode).name if done.returncode < 0
                 else f"exit {done.returncode}: {done.stderr.strip()[-300:]}")
        if len(results) < len(probes):
            results.append(dict(probes[len(results)], got=None))
    return results, summary, death


def verdict(r: dict) -> str:
    got = r["got"]
    if got is None:
        return "crashed"
    if not got["table_changed"]:
        return "no rule applied"
    if [got["algorithm"], got["protocol"]] != r["expect"][:2]:
        return "algorithm/protocol"
    return "channels" if got["channels"] != r["expect"][2] else "ok"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plugin-src", type=Path, help="NVIDIA/nccl plugins/tuner/example")
    ap.add_argument("--drive", help=argparse.SUPPRESS)
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--nodes", default=",".join(map(str, NODES)))
    ap.add_argument("--collectives", default=",".join(FUNCS))
    ap.add_argument("--max-bytes", type=int, default=1 << 30)
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args()
    if args.drive:
        drive(json.loads(Path(args.drive).read_text()))
        return 0
    if args.plugin_src is None:
        ap.error("--plugin-src DIR is required")
    colls = args.collectives.split(",")
    report: dict = {"plugin_src": str(args.plugin_src), "cases": []}
    cache: dict = {}
    with tempfile.TemporaryDirectory(prefix="gpucomm-tuner-") as tmp:
        work = Path(tmp)
        so = compile_plugin(args.plugin_src.resolve(), work)
        for preset in args.presets.split(","):
            for nodes in map(int, args.nodes.split(",")):
                conf = work / f"{preset}-{nodes}.conf"
                job = build_job(so, conf, preset, nodes, colls, args.max_bytes, cache)
                results, summary, death = run_job(job, work)
                report["cases"].append(_case(preset, nodes, conf, job, results, summary,
                                             death))
                if not args.json:
                    _print_case(report["cases"][-1])
                if death:  # it dies on any matching rule: the other cases would too
                    return _finish(report, args.json)
    return _finish(report, args.json)


def _case(preset, nodes, conf, job, results, summary, death) -> dict:
    counts: dict[str, int] = {}
    grid: dict[str, int] = {}
    for r in results:
        v = verdict(r)
        counts[v] = counts.get(v, 0) + 1
        if r["grid"]:
            grid[v] = grid.get(v, 0) + 1
    bad = [{k: r[k] for k in ("coll", "nbytes", "nnodes", "nranks", "expect", "got")}
           | {"verdict": verdict(r)} for r in results if verdict(r) != "ok"][:20]
    rules = sum(1 for x in conf.read_text().splitlines() if x and not x.startswith("#"))
    return {"preset": preset, "nodes": nodes, "rules": rules,
            "communicators": len(job["comms"]), "probes": len(results),
            "verdicts": counts, "grid_verdicts": grid, "crash": death,
            "api": summary and summary["version"], "warnings": summary and summary["warnings"],
            "first_mismatches": bad}


def _print_case(c: dict) -> None:
    ok = c["verdicts"].get("ok", 0)
    print(f"{c['preset']:>10} x{c['nodes']}: {c['rules']:4} rules, {c['communicators']:2} "
          f"communicators, {c['probes']:5} probes, {c['probes'] - ok:4} mismatches "
          f"({_bad(c['grid_verdicts'])} on the probe grid) {_bad(c['verdicts'], True)}"
          + (f"  CRASH {c['crash']}" if c["crash"] else ""), flush=True)


def _bad(verdicts: dict, named: bool = False) -> int | str:
    if named:
        return ", ".join(f"{k}: {v}" for k, v in sorted(verdicts.items()) if k != "ok")
    return sum(v for k, v in verdicts.items() if k != "ok")


def _finish(report: dict, as_json: bool) -> int:
    total = sum(c["probes"] for c in report["cases"])
    bad = sum(c["probes"] - c["verdicts"].get("ok", 0) for c in report["cases"])
    grid_bad = sum(int(_bad(c["grid_verdicts"])) for c in report["cases"])
    report.update(probes=total, mismatches=bad, grid_mismatches=grid_bad,
                  crashes=sum(bool(c["crash"]) for c in report["cases"]))
    if as_json:
        print(json.dumps(report, indent=1))
    else:
        print(f"total: {total} probes, {bad} mismatches ({grid_bad} on the probe grid), "
              f"{report['crashes']} crashed runs")
    return 1 if report["crashes"] or grid_bad else 0


if __name__ == "__main__":
    sys.exit(main())
