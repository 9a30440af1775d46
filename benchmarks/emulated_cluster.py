"""Measured vs predicted all-reduce on an emulated cluster (network namespaces, tc-shaped links).

    sudo PYTHONPATH=src python3 benchmarks/emulated_cluster.py [--hosts 2 --ranks-per-host 2]
        [--rate 1e9] [--qdisc tbf] [--sizes 1M,4M,16M] [--iters 5] [--topology-out FILE]

Builds the cluster (gpucomm.emulate), measures its links (raw TCP: ping-pong latency, bulk
goodput; and, by default, inside a host gloo's goodput with every local pair exchanging at
once), writes the topology YAML from the shaping applied and those measurements, runs gpucomm's ring
and hierarchical all-reduce over the torch transport (gloo process group) on every rank, and
gloo's own all-reduce as the named peer. Prints per size and algorithm: measured time (median
of --iters, each the slowest rank's; the minimum beside it), busbw, the simulator's prediction
on the written topology
(`gpucomm.simulate.simulate`, flow model, Simple protocol) and the error; then whether the
hierarchical all-reduce beat the flat ring, measured and predicted. `gpucomm sim --topology FILE`
gives the same predictions from the command line.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "src"))

from gpucomm.dtypes import format_size, parse_size  # noqa: E402
from gpucomm.emulate import ClusterSpec, EmulatedCluster, Measured, available  # noqa: E402

BAR = 0.15  # the prediction must be within 15% for sizes >= 1 MiB


def predict_times(topo_path: str, algorithms: list, sizes: list, rph: int, model: str) -> dict:
    """{(algorithm, size): predicted seconds}; empty if the simulator is not there."""
    try:
        from gpucomm.algorithms import build
        from gpucomm.simulate import simulate
        from gpucomm.topology import Topology
    except ImportError as e:
        print(f"(no prediction: {e})")
        return {}
    topo = Topology.load(topo_path)
    out = {}
    for name in algorithms:
        if name == "gloo":
            continue
        params = {"group_size": rph} if name == "hierarchical" else {}
        sched = build("all_reduce", name, topo.nranks, **params)
        for size in sizes:
            out[(name, size)] = simulate(sched, topo, size, dtype="float32", model=model,
                                         protocol="simple").time_s
    return out


def engine_model(tcp: Measured, e: dict, inter_bandwidth: str = "engine") -> Measured:
    """The links as the ranks use them (gloo through the torch transport), for the topology.

    Latency: the per-message latency the ranks see, the engine's ping-pong (median round trip
    / 2 of a 4-byte message through the transport: ~0.1 ms where raw TCP sees ~10 us; it
    includes gloo and the waking of a process), in a host and between hosts.
    Goodput inside a host: each host's ranks running a ring all-reduce among themselves over
    the transport, every host at once (slices, reductions and the competition for this
    machine's cores, as a collective's in-host part meets them); one lone TCP flow over
    loopback gets 5-10x more. Between hosts: the engine's bulk transfer in the transport's
    slices (default) or raw TCP's (`tcp`)."""
    lat_intra = e.get("intra_latency_s", tcp.intra_latency_s)
    lat_inter = e.get("inter_latency_s", tcp.inter_latency_s)
    inter_bw = tcp.inter_bandwidth_Bps
    if inter_bandwidth == "engine" and e.get("inter_bandwidth_Bps"):
        inter_bw = e["inter_bandwidth_Bps"]
    intra_bw = e.get("intra_bandwidth_Bps") or tcp.intra_bandwidth_Bps
    return Measured(lat_inter, inter_bw, lat_intra, intra_bw,
                    {"engine": e, "tcp": tcp.raw,
                     "method": "latency: engine ping-pong (gloo via the torch transport); "
                               f"inter-host goodput: {inter_bandwidth} bulk; in-host goodput: "
                               "engine, every host's ranks all-reducing at once"})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--ranks-per-host", type=int, default=2)
    ap.add_argument("--rate", type=float, default=1e9, help="link rate, bits/s per direction")
    ap.add_argument("--qdisc", choices=("tbf", "htb"), default="tbf")
    ap.add_argument("--no-bridge", action="store_true", help="two hosts back to back")
    ap.add_argument("--sizes", default="1M,4M,16M")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--algorithms", default="ring,hierarchical,gloo")
    ap.add_argument("--model", choices=("flow", "analytic"), default="flow")
    ap.add_argument("--link-probe", choices=("engine", "tcp"), default="engine",
                    help="measure the links with the engine (gloo send/recv, default) or raw TCP")
    ap.add_argument("--inter-bandwidth", choices=("engine", "tcp"), default="engine",
                    help="inter-host goodput in the topology: the engine's bulk transfer "
                    "(default) or raw TCP's")
    ap.add_argument("--topology-out", default=None, help="where to write the topology YAML")
    ap.add_argument("--format", choices=("table", "json"), default="table")
    a = ap.parse_args(argv)
    ok, why = available()
    if not ok:
        print(f"cannot emulate a cluster here: {why}")
        return 2
    spec = ClusterSpec(a.hosts, a.ranks_per_host, a.rate, a.qdisc, not a.no_bridge)
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    algos = a.algorithms.split(",")
    topo_path = a.topology_out or os.path.join(tempfile.mkdtemp(prefix="gcx-"), "emulated.yaml")
    with EmulatedCluster(spec) as c:
        tcp = c.measure()  # raw TCP, for the record
        procs = c.launch([sys.executable, "-m", "gpucomm.emulate.worker", "bench", "--sizes",
                          a.sizes, "--algorithms", a.algorithms, "--iters", str(a.iters)]
                         + ([] if a.link_probe == "tcp" else ["--probe"]),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        results = c.wait(procs, timeout=1200)
        lines = [line for _, out, _ in results for line in out.splitlines()]
        rows = [json.loads(line[6:]) for line in lines if line.startswith("BENCH ")]
        if not rows:
            print("no measurements; rank 0 said:\n" + results[0][2][-3000:])
            return 1
        probes = [json.loads(line[6:]) for line in lines if line.startswith("PROBE ")]
        m = tcp
        if probes:
            m = engine_model(tcp, probes[0], a.inter_bandwidth)
        c.write_topology(topo_path, m)
    pred = predict_times(topo_path, algos, sizes, a.ranks_per_host, a.model)
    p = spec.nranks
    for r in rows:
        r["predicted_s"] = pred.get((r["algorithm"], r["size"]))
        r["busbw_GBps"] = r["size"] / r["time_s"] / 1e9 * 2 * (p - 1) / p
        r["error"] = (r["predicted_s"] / r["time_s"] - 1) if r["predicted_s"] else None
    measured = {(r["algorithm"], r["size"]): r["time_s"] for r in rows}
    if a.format == "json":
        print(json.dumps({"spec": spec.__dict__, "measured_link": {
            "inter_latency_s": m.inter_latency_s, "inter_bandwidth_Bps": m.inter_bandwidth_Bps,
            "intra_latency_s": m.intra_latency_s, "intra_bandwidth_Bps": m.intra_bandwidth_Bps},
            "topology": topo_path, "rows": rows}, indent=2))
        return 0
    print(f"# emulated cluster: {spec.hosts} hosts x {spec.ranks_per_host} ranks, tc {spec.qdisc} "
          f"{spec.rate_bps / 1e9:g} Gbit/s per direction, {'bridge' if spec.bridge else 'direct'}")
    if m.raw.get("method"):
        print(f"# model: {m.raw['method']}")
    for what, x in (("raw TCP", tcp), ("in the topology", m)):
        print(f"# link, {what}: {x.inter_bandwidth_Bps / 1e6:.1f} MB/s goodput, "
              f"{x.inter_latency_s * 1e6:.1f} us one-way; in a host "
              f"{x.intra_bandwidth_Bps / 1e9:.2f} GB/s, {x.intra_latency_s * 1e6:.1f} us")
    print(f"# topology: {topo_path}  (gpucomm sim --topology {topo_path})")
    print(f"{'size':>6} {'algorithm':>13} {'measured ms':>12} {'(min ms)':>9} {'busbw GB/s':>11} "
          f"{'predicted ms':>13} {'error':>7}")
    for r in rows:
        pr = "" if r["predicted_s"] is None else f"{r['predicted_s'] * 1e3:13.2f}"
        err = "" if r["error"] is None else f"{r['error'] * 100:+6.1f}%"
        print(f"{format_size(r['size']):>6} {r['algorithm']:>13} {r['time_s'] * 1e3:12.2f} "
              f"{min(r['times_s']) * 1e3:9.2f} {r['busbw_GBps']:11.4f} {pr:>13} {err:>7}")
    errs = [abs(r["error"]) for r in rows if r["error"] is not None and r["size"] >= 1 << 20]
    if errs:
        print(f"prediction error for sizes >= 1 MiB: max {max(errs) * 100:.1f}% "
              f"(bar {BAR * 100:.0f}%): {'met' if max(errs) <= BAR else 'NOT met'}")
    for size in sizes:
        if ("ring", size) in measured and ("hierarchical", size) in measured:
            sp = measured[("ring", size)] / measured[("hierarchical", size)]
            line = f"{format_size(size):>6}: hierarchical vs ring measured {sp:.2f}x"
            if ("ring", size) in pred:
                line += f", predicted {pred[('ring', size)] / pred[('hierarchical', size)]:.2f}x"
            if ("gloo", size) in measured:
                line += (f"; gloo's own all-reduce {measured[('gloo', size)] * 1e3:.2f} ms = "
                         f"{measured[('gloo', size)] / measured[('hierarchical', size)]:.2f}x "
                         "the hierarchical time")
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
