"""Calibrate on one run of a cluster, predict its other runs: uncalibrated vs calibrated error.

    PYTHONPATH=src python3 benchmarks/calibration.py [--cluster NAME] [-v] [--residuals]
                                                     [--select fastest|nccl] [--published]

For every cluster of data/logs/index.json with several runs (other node counts, GPUs per node
or collectives), `gpucomm calibrate`'s library call fits a profile on the run marked
`calibrate_on`; every other run of that cluster is then predicted by `doctor`'s code on its own
machine (nodes, GPUs per node as its log says), without and with the profile. Printed: median
|busbw error| of the held-out rows per size class, side by side, and the bars of issue 23:
median within 10% at >= 64 MiB and within 20% at 1-64 MiB, calibrated, on held-out runs.
`--residuals`: per cluster and per size, the held-out rows' median measured/predicted time,
calibrated, and what the model ran there (where the mid sizes miss, and why). `--select`: how
auto chooses, in the fit and the predictions: as doctor and calibrate do by default, the pair
NCCL's tuning model picks (nccl; the logs ran NCCL's choice), or gpucomm's fastest pair.
`--published`: the same, on pairs of published tables (and logs) of one cluster (PAIRS), printed
beside the bar. Clusters whose index entries say `after_rules` were added to data/logs after
the calibration rules were chosen (first contact): their held-out rows are also pooled alone.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import nccl_logs  # noqa: E402  (a published table as the log nccl-tests prints)
from gpucomm.errors import GpucommError  # noqa: E402
from gpucomm.interop.calibrate import CalibrateRequest, calibrate  # noqa: E402
from gpucomm.interop.doctor import DoctorRequest, diagnose  # noqa: E402
from gpucomm.interop.nccltests import parse_logs  # noqa: E402
from gpucomm.simulate.versions import parse_version  # noqa: E402

LOGS = ROOT / "data" / "logs"
PUBLISHED = nccl_logs.DATA
# Published tables (data/published) of one cluster at two runs: calibrate on the first, predict
# the second, as for the logs. A source is a log of data/logs or a table id; `flags` is what the
# source does not say of the machine (DoctorRequest fields). Held-out evidence beside the bar:
# none of these were looked at when the calibration rules were chosen.
PAIRS = (
    ("aws-p4d EFA (log NCCL 2.9.9 -> table NCCL 2.8.3)", "aws-p4d-eks-2n-nccl2.9.9-efa.log",
     "aws_p4d_2n16g_all_reduce", {"collective": "all_reduce", "gpu": "a100",
                                  "nic": "efa-100g", "nics_per_node": 4}),
    ("aws-p4d EFA (table NCCL 2.8.3 -> log NCCL 2.9.9)", "aws_p4d_2n16g_all_reduce",
     "aws-p4d-eks-2n-nccl2.9.9-efa.log", {"collective": "all_reduce", "gpu": "a100",
                                          "nic": "efa-100g", "nics_per_node": 4}),
    ("nccl-tests#309 cluster B IB (4 nodes -> 8 nodes)",
     "nccltests309_h100_4n32g_ib_all_reduce_clusterB",
     "nccltests309_h100_8n64g_ib_all_reduce_clusterB", {"gpu": "h100", "nic": "ib-ndr"}),
    ("nccl-tests#309 cluster B IB (8 nodes -> 4 nodes)",
     "nccltests309_h100_8n64g_ib_all_reduce_clusterB",
     "nccltests309_h100_4n32g_ib_all_reduce_clusterB", {"gpu": "h100", "nic": "ib-ndr"}),
)
CLASSES = ((">=64MiB", lambda s: s >= 64 << 20, 0.10),
           ("1-64MiB", lambda s: (1 << 20) <= s < 64 << 20, 0.20),
           ("<=64KiB", lambda s: s <= 64 << 10, None))


def requests(entry, select="nccl") -> list:
    path = LOGS / entry["file"]
    return [DoctorRequest(log, name=entry["file"], select=select,  # where the source states
                          nccl_version=entry.get("nccl_version"),  # them: the NCCL, and the
                          algorithm=entry.get("algorithm"))  # NCCL_ALGO the run forced
            for log in parse_logs(path.read_text())]


def table_version(table: dict) -> str | None:
    """The NCCL version a published table states, or None where it states none ("not printed
    (2025)"): DoctorRequest refuses text that is not a version."""
    text = table["nccl_version"].split("+")[0]
    return text if parse_version(text) else None


def source_requests(source: str, flags: dict, tables: dict) -> list:
    """DoctorRequests of a pair's source: a log of data/logs or a published table's id."""
    text = (LOGS / source).read_text() if source.endswith(".log") \
        else nccl_logs.render(tables[source])
    version = table_version(tables[source]) if source in tables else None
    return [DoctorRequest(log, name=source, nccl_version=version, **flags)
            for log in parse_logs(text)]


def published_pairs(verbose: bool) -> None:
    """Calibrate on one source of each PAIRS entry, predict the other: median |busbw error| of
    the held-out rows per size class, uncalibrated and calibrated, and pooled."""
    tables = {e["id"]: e for e in json.loads(PUBLISHED.read_text())}
    pooled: dict = {"uncal": defaultdict(list), "cal": defaultdict(list)}
    print("published tables, pairs of one cluster (not part of the bar):")
    for label, train, held, flags in PAIRS:
        try:
            prof = calibrate(CalibrateRequest(tuple(source_requests(train, flags, tables))))
        except GpucommError as e:
            print(f"{label}: calibration refused: {e}")
            continue
        reqs = source_requests(held, flags, tables)
        u, c = errors(reqs, None), errors(reqs, prof)
        for k in u:
            pooled["uncal"][k] += u[k]
            pooled["cal"][k] += c.get(k, [])
        print(f"  {label:56s} " + "  ".join(f"{med(u.get(n, []))} {med(c.get(n, []))}"
                                             for n, _, _ in CLASSES)
              + (f"   [{', '.join(f'{k}={v:.3g}' for k, v in prof.parameters.items())}]"
                 if verbose else ""))
    print(f"  {'all pairs':56s} " + "  ".join(
        f"{med(pooled['uncal'].get(n, []))} {med(pooled['cal'].get(n, []))}"
        for n, _, _ in CLASSES))


def errors(reqs, profile, resid=None) -> dict:
    """class -> list of |predicted/measured - 1| busbw over the requests' rows; `resid`, when
    given, collects size -> [(measured/predicted time, algorithm/protocol)]."""
    out: dict = defaultdict(list)
    for req in reqs:
        if profile is not None:
            req = DoctorRequest(**{**req.__dict__, "profile": profile})
        for r in diagnose(req).rows:
            if not r.get("ratio"):
                continue
            if resid is not None and r.get("predicted_time_us"):
                resid[r["size"]].append((r["time_us"] / r["predicted_time_us"],
                                         f"{r.get('algorithm')}/{r.get('protocol')}"))
            for name, keep, _ in CLASSES:
                if keep(r["size"]):
                    out[name].append(abs(1 / r["ratio"] - 1))
    return out


def print_residuals(resid) -> None:
    """One line per size: median measured/predicted time of the held-out rows, calibrated
    (> 1: the model is too fast), and the model's most frequent algorithm/protocol."""
    for size in sorted(resid):
        ratios = [r for r, _ in resid[size]]
        runs = [c for _, c in resid[size]]
        print(f"      {size:>12d} B  t_meas/t_pred {statistics.median(ratios):5.2f}  "
              f"({len(ratios)} row(s), model ran {max(set(runs), key=runs.count)})")


def pool(un, ca, into, per_cluster) -> None:
    """Add one cluster's held-out errors to the pools `into` and its medians to per_cluster."""
    for k in ca:
        if ca[k]:
            per_cluster[k].append(statistics.median(ca[k]))
    for k in un:
        for p in into:
            p["uncal"][k] += un[k]
            p["cal"][k] += ca.get(k, [])


def med(xs) -> str:
    return f"{100 * statistics.median(xs):6.1f}%" if xs else "     -"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", help="only this cluster of data/logs/index.json")
    ap.add_argument("-v", action="store_true", help="print every held-out run")
    ap.add_argument("--residuals", action="store_true",
                    help="per cluster and size: median measured/predicted time, calibrated")
    ap.add_argument("--select", default="nccl", choices=("fastest", "nccl"),
                    help="how auto chooses, in the fit and the predictions: gpucomm's fastest "
                    "pair, or the pair NCCL's tuning model picks")
    ap.add_argument("--published", action="store_true",
                    help="also calibrate on one published table (or log) of a cluster and "
                    "predict another of the same cluster (PAIRS; printed beside the bar)")
    args = ap.parse_args(argv)
    index = json.loads((LOGS / "index.json").read_text())
    clusters: dict = defaultdict(list)
    for e in index:
        clusters[e["cluster"]].append(e)
    pooled = {"uncal": defaultdict(list), "cal": defaultdict(list)}
    unseen = {"uncal": defaultdict(list), "cal": defaultdict(list)}  # after_rules clusters
    per_cluster: dict = defaultdict(list)  # class -> each cluster's calibrated median
    head = "  ".join(f"{n:>8s} {'':8s}" for n, _, _ in CLASSES)
    print(f"{'cluster (calibrated on -> held-out runs)':58s} {head}")
    print(f"{'':58s} " + "  ".join(f"{'uncal':>8s} {'calib':>8s}" for _ in CLASSES))
    for name, entries in clusters.items():
        train = [e for e in entries if e.get("calibrate_on")]
        held = [e for e in entries if not e.get("calibrate_on")]
        if args.cluster and name != args.cluster or not train or not held:
            continue
        t0 = time.perf_counter()
        try:
            prof = calibrate(CalibrateRequest(tuple(r for e in train
                                                    for r in requests(e, args.select))))
        except GpucommError as e:
            print(f"{name}: calibration refused: {e}")
            continue
        un, ca = defaultdict(list), defaultdict(list)
        resid: dict = defaultdict(list)
        for e in held:
            reqs = requests(e, args.select)
            u, c = errors(reqs, None), errors(reqs, prof, resid)
            for k in u:
                un[k] += u[k]
                ca[k] += c.get(k, [])
            if args.v:
                print(f"    {e['file']:54s} " + "  ".join(
                    f"{med(u.get(n, []))} {med(c.get(n, []))}" for n, _, _ in CLASSES))
        if args.residuals:
            print_residuals(resid)
        pool(un, ca, (pooled, unseen) if all(e.get("after_rules") for e in entries)
             else (pooled,), per_cluster)
        label = f"{name} ({train[0]['file'][:24]} -> {len(held)} run(s))"
        print(f"{label:58s} " + "  ".join(f"{med(un.get(n, []))} {med(ca.get(n, []))}"
                                          for n, _, _ in CLASSES)
              + f"   [{', '.join(f'{k}={v:.3g}' for k, v in prof.parameters.items())}; "
                f"{time.perf_counter() - t0:.0f} s]")
    print(f"{'all held-out rows':58s} " + "  ".join(
        f"{med(pooled['uncal'].get(n, []))} {med(pooled['cal'].get(n, []))}"
        for n, _, _ in CLASSES))
    if unseen["uncal"]:
        print(f"{'  of which clusters added after the rules':58s} " + "  ".join(
            f"{med(unseen['uncal'].get(n, []))} {med(unseen['cal'].get(n, []))}"
            for n, _, _ in CLASSES))
    print(f"{'  median of the clusters medians (not the bar)':58s} " + "  ".join(
        f"{'':8s} {med(per_cluster.get(n, []))}" for n, _, _ in CLASSES))
    if args.published:
        published_pairs(args.v)
    ok = True
    for n, _, bar in CLASSES:
        if bar is None or not pooled["cal"].get(n):
            continue
        m = statistics.median(pooled["cal"][n])
        ok &= m <= bar
        print(f"bar {n}: calibrated median {100 * m:.1f}% <= {100 * bar:.0f}%: "
              f"{'PASS' if m <= bar else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
