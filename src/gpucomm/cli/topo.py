"""`gpucomm topo list | show | route | export`: presets, clusters and their routes.

`add_topology_args(parser)` and `topology_from_args(args)` give every command the same
cluster flags (--system, --nodes, --gpus-per-node, --nic, --nics-per-node, --pcie-gen,
--p2p/--no-p2p, --gpu, --fabric, --oversubscription, --topology FILE).
"""
from __future__ import annotations

import argparse
from typing import Any

from ..errors import ConfigError
from ..hardware import nic_names
from ..topology import (FABRICS, Topology, build_topology, preset_names)
from ..topology.analysis import bisection_bandwidth, gpu_bandwidths, summary
from ..topology.fabric import HASH_FIELDS, PLACEMENTS, ROUTINGS, Network, fabric_summary
from ..topology.build import PORT_LEVEL, preset_node
from ..outputs import write_text
from ._nccltests import retire
from .common import (PLOT_SUFFIXES, add_format, fail_links_arg, int_arg,
                     leaf_ports_arg, name_arg, nics_arg, output_file, oversubscription_arg,
                     positive_int, print_json, probability_arg, seed_arg)


def add_topology_args(p, default_system: str = "dgx-h100", nccl_tests: bool = False) -> None:
    """The cluster flags (`nccl_tests`: the parser has nccl-tests' flags, whose -N is theirs)."""
    g = p.add_argument_group("cluster")
    g.add_argument("--system", "-s", type=name_arg, default=None, metavar="PRESET",
                   help=f"node preset: {', '.join(preset_names())} (default {default_system})")
    g.add_argument("--topology", metavar="FILE",
                   help="a topology YAML file (docs/topology-yaml.md) instead of a preset; "
                   "a one-node file is replicated by --nodes")
    g.add_argument("--profile", metavar="PROFILE.yaml", help="a calibration profile (gpucomm "
                   "calibrate): its machine and fitted NIC/latency/NVLink parameters; the other "
                   "cluster flags override it")
    g.add_argument("--nodes", type=positive_int, default=None,
                   help="nodes (default 1); racks for a rack preset such as gb200-nvl72")
    g.add_argument("--gpus-per-node", type=positive_int, help="use the first K GPUs per node")
    g.add_argument("--nic", help=f"NIC technology: {', '.join(nic_names())}")
    g.add_argument("--nics-per-node", type=nics_arg,
                   help="NICs per node (a multiple of the GPUs: each GPU's ports fused into one "
                   "NIC, as NCCL does)")
    g.add_argument("--pcie-gen", type=int_arg, help="PCIe generation of every PCIe link: 3|4|5|6")
    g.add_argument("--p2p", action=argparse.BooleanOptionalAction, default=None,
                   help="GPU peer-to-peer over PCIe/NVLink (--no-p2p: bounce through host "
                   "memory; default: on, off where the GPUs' driver grants none, e.g. rtx4090)")
    g.add_argument("--gpu", help="GPU model for the pcie preset (e.g. l40s, rtx4090)")
    g.add_argument("--fabric", choices=FABRICS, default="rail",
                   help="rail-optimised (NIC i on rail switch i) or fat-tree (default rail)")
    g.add_argument("--oversubscription", type=oversubscription_arg, default=1.0,
                   help="leaf down:up bandwidth ratio (default 1 = full bisection; the port-level "
                   "fabrics take 0.5..1 too: spare uplinks, e.g. 0.889 = Meta's 1:1.125)")
    g.add_argument("--nvlink-partition", type=positive_int, metavar="GPUS",
                   help="split each node's NVLink switch domain into partitions (MNNVL "
                   "cliques) of GPUS GPUs, e.g. 36 on gb200-nvl72; each is a node of the result")
    add_network_args(p)
    if not nccl_tests:
        retire(p, "-N")
    p.set_defaults(_default_system=default_system)


def add_network_args(p) -> None:
    """Flags of the fabric's behaviour beyond line rate (gpucomm.topology.fabric.Network)."""
    g = p.add_argument_group("fabric behaviour (any of these turns the fabric model on)")
    g.add_argument("--leaf-ports", type=leaf_ports_arg, default=None,
                   help="nodes per leaf (rail-2tier, rail-3tier, tor-2tier; fat-tree: NIC ports "
                   "per leaf; default 32)")
    g.add_argument("--placement", choices=PLACEMENTS, default=None,
                   help="rail-2tier, rail-3tier, tor-2tier: the job's nodes packed under leaves "
                   "in rank order, or spread over the leaf groups (default packed)")
    g.add_argument("--routing", choices=ROUTINGS, default=None,
                   help="ecmp: per-QP hash onto one path; flowlet: each QP placed once on the "
                   "least loaded path; adaptive (InfiniBand AR), spectrum-x (Spectrum-X AR) or "
                   "spray (per-packet): an even split over the paths")
    g.add_argument("--qps-per-connection", type=positive_int, default=None, metavar="N",
                   help="queue pairs per connection, as NCCL_IB_QPS_PER_CONNECTION (default 1)")
    g.add_argument("--hash-inputs", default=None, metavar="FIELDS",
                   help=f"what the ECMP hash reads, from {','.join(HASH_FIELDS)} (default all; "
                   "without qp all QPs between two NICs collide)")
    g.add_argument("--hash-polarized", dest="polarized", action="store_true", default=None,
                   help="every switch hashes alike (same function and seed): on rail-3tier "
                   "the aggregation tier repeats the leaf's choice (default: per-switch seeds)")
    g.add_argument("--seed", type=seed_arg, default=None, help="one seed for the switch hash, the "
                   "failed links and a random placement (default 0); --hash-seed and "
                   "--placement-seed override it for one of them")
    g.add_argument("--hash-seed", type=seed_arg, default=None, metavar="SEED",
                   help="switch hash seed and which links fail (default: --seed)")
    g.add_argument("--placement-seed", type=seed_arg, default=None, metavar="SEED",
                   help="where --placement random puts the job's nodes (default: --seed)")
    g.add_argument("--lossless", action=argparse.BooleanOptionalAction, default=None,
                   help="PFC on (default) or --no-lossless/--lossy: drops and go-back-N")
    g.add_argument("--lossy", dest="lossless", action="store_false",
                   help="RoCE without PFC (give --loss-rate)")
    g.add_argument("--loss-rate", type=probability_arg, default=None, metavar="P",
                   help="per-packet loss probability on a lossy fabric")
    g.add_argument("--cc", choices=("dcqcn", "none"), default=None,
                   help="congestion control of a lossless fabric: dcqcn (default) or none "
                   "(PFC alone: pauses spread to victim flows)")
    g.add_argument("--fail-links", type=fail_links_arg, default=None, metavar="K",
                   help="K leaf-spine cables down (capacity lost, ECMP rehashed)")
    g.add_argument("--background", type=float, default=None, metavar="FRACTION",
                   help="other jobs' mean share of each leaf-spine cable (per cable up to "
                   "twice that, by the hash seed; adaptive routing pools a leaf's up-links, "
                   "InfiniBand's the down-links into a leaf too)")


def network_from_args(args):
    """The Network the fabric flags give, or None if none was given (the plain model). The
    port-level fabric (--fabric rail-2tier, --leaf-ports, --placement) always gets one: its
    routing then is the NIC's default (topology.fabric.DEFAULT_ROUTING)."""
    keys = ("routing", "qps_per_connection", "hash_inputs", "seed", "lossless", "loss_rate",
            "cc", "fail_links", "placement_seed", "background", "polarized")
    given: dict[str, Any] = {k: getattr(args, k, None) for k in keys}
    given = {k: v for k, v in given.items() if v is not None}
    if getattr(args, "hash_seed", None) is not None:
        given.setdefault("placement_seed", given.get("seed", 0))
        given["seed"] = args.hash_seed
    port_level = getattr(args, "fabric", None) in PORT_LEVEL or \
        getattr(args, "leaf_ports", None) is not None or getattr(args, "placement", None)
    if not given and not port_level:
        return None
    if "hash_inputs" in given:
        given["hash_inputs"] = tuple(x.strip() for x in given["hash_inputs"].split(",")
                                     if x.strip())
    return Network(**given)


def topology_from_args(args) -> Topology:
    """The Topology the cluster flags describe (ConfigError/TopologyError on bad input); with
    --profile, the profile's machine where a flag is not given, and its fitted parameters."""
    if getattr(args, "profile", None):
        from ..topology.profile import apply_profile, load_profile
        prof = load_profile(args.profile)
        given = argparse.Namespace(**vars(args))
        given.profile = None
        if not args.topology:
            for key, value in prof.machine.items():
                if getattr(given, key, None) is None:
                    setattr(given, key, value)
        return apply_profile(topology_from_args(given), prof)
    opts = dict(gpus_per_node=args.gpus_per_node, nic=args.nic, nics_per_node=args.nics_per_node,
                pcie_gen=args.pcie_gen, p2p=args.p2p, fabric=args.fabric,
                oversubscription=args.oversubscription, gpu=args.gpu,
                nvlink_partition=getattr(args, "nvlink_partition", None))
    fabric_opts = {k: v for k, v in (("leaf_ports", getattr(args, "leaf_ports", None)),
                                     ("placement", getattr(args, "placement", None)),
                                     ("network", network_from_args(args))) if v is not None}
    opts.update(fabric_opts)
    if args.topology:
        if args.system:
            raise ConfigError("give either --system or --topology, not both")
        topo = Topology.load(args.topology)
        changed = [k for k, v in opts.items() if v not in (None, True, "rail", 1.0)]
        if "network" in changed and topo.nodes > 1:  # a whole cluster: the network applies
            from ..topology.fabric import with_network
            changed.remove("network")
            if not changed and args.nodes in (None, topo.nodes):
                return with_network(topo, opts["network"])
        if topo.nodes == 1 and len({d.node for d in topo.devices}) == 1 \
                and (changed or (args.nodes or 1) > 1):
            # a node description: build a cluster of it
            return build_topology(nodes=args.nodes or 1, node_topology=topo, **opts)
        if args.nodes not in (None, topo.nodes) or changed:
            raise ConfigError(f"{args.topology} describes a whole {topo.nodes}-node cluster; "
                              "--nodes and the other cluster flags apply only to one-node files")
        topo.check_routes()
        return topo
    return build_topology(args.system or getattr(args, "_default_system", "dgx-h100"),
                          nodes=args.nodes or 1, **opts)


def register(sub) -> None:
    p = sub.add_parser("topo", help="node presets, cluster topologies, routes")
    tsub = p.add_subparsers(dest="topo_command", metavar="ACTION", required=True)

    lp = tsub.add_parser("list", help="the node presets")
    add_format(lp)
    lp.set_defaults(func=cmd_list)

    sp = tsub.add_parser("show", help="devices, links, per-GPU bandwidths, bisection")
    add_topology_args(sp)
    sp.add_argument("--plot", metavar="FILE.png", help="draw the topology (needs matplotlib)")
    sp.add_argument("--all", action="store_true", help="list every device and link")
    add_format(sp)
    sp.set_defaults(func=cmd_show)

    rp = tsub.add_parser("route", help="the links between two ranks (ECMP alternatives)")
    add_topology_args(rp)
    rp.add_argument("src", type=int_arg)
    rp.add_argument("dst", type=int_arg)
    add_format(rp)
    rp.set_defaults(func=cmd_route)

    ep = tsub.add_parser("export", help="write the topology as YAML (to edit, or to load with "
                         "--topology)")
    add_topology_args(ep)
    ep.add_argument("--output", type=name_arg, metavar="FILE.yaml",
                    help="file (default: stdout)")
    retire(ep, "-o")
    ep.set_defaults(func=cmd_export)


def cmd_list(args) -> int:
    rows = []
    for name in preset_names():
        t = preset_node(name)
        gpu = next((d.model for d in t.devices if d.kind == "gpu"), "")
        nics = [d.model for d in t.devices if d.kind == "nic"]
        rows.append({"name": name, "gpus": t.nranks, "gpu": gpu,
                     "nvswitch": next((d.model for d in t.devices if d.kind == "nvswitch"), None),
                     "nics": f"{len(nics)}x {nics[0]}" if nics else "none",
                     "in_switch_reduction": t.in_switch_reduction})
    if args.format == "json":
        print_json(rows)
        return 0
    _table(rows, ["name", "gpus", "gpu", "nvswitch", "nics", "in_switch_reduction"])
    return 0


def _gbps(v):
    return None if v is None else round(v / 1e9, 3)


# The bisection is a max flow over every link (networkx, pure Python): about 10 s for 20,000
# links (256 DGX nodes) on a busy 2-core host, minutes at 80,000. Above this it is not
# computed (null in JSON, said in the table), so `topo show` answers at the 131,072-GPU limit.
MAX_BISECTION_LINKS = 25_000


def _bisection(topo, achievable: bool):
    if len(topo.links) > MAX_BISECTION_LINKS:
        return None
    return _gbps(bisection_bandwidth(topo, achievable=achievable))


def show_dict(topo, full: bool = False) -> dict:
    bw = gpu_bandwidths(topo)
    out = {"name": topo.name, "nodes": topo.nodes, "gpus_per_node": topo.gpus_per_node,
           "ranks": topo.nranks, "p2p": topo.p2p,
           "in_switch_reduction": topo.in_switch_reduction,
           "bisection_GBps": _bisection(topo, False),
           "bisection_achievable_GBps": _bisection(topo, True),
           "per_gpu_GBps": [{"rank": r["rank"], "gpu": r["gpu"], "model": r["model"],
                             "nvlink": _gbps(r["nvlink_Bps"]), "nic": r["nic"],
                             "to_nic": _gbps(r["to_nic_Bps"]),
                             "to_host": _gbps(r["to_host_Bps"])} for r in bw]}
    s = summary(topo)
    out["fabric"] = fabric_summary(topo)
    out["devices"] = s["devices"]
    out["links"] = {t: {"links": v["links"], "GBps": [_gbps(b) for b in v["bandwidth_Bps"]]}
                    for t, v in s["links"].items()}
    if full:
        out["device_list"] = [{"name": d.name, "kind": d.kind, "node": d.node, "model": d.model}
                              for d in topo.devices]
        out["link_list"] = [{"index": i, "src": ln.src, "dst": ln.dst, "tech": ln.tech,
                             "GBps": _gbps(ln.bandwidth_Bps), "efficiency": ln.efficiency,
                             "latency_us": round(ln.latency_s * 1e6, 4)}
                            for i, ln in enumerate(topo.links)]
    return out


def cmd_show(args) -> int:
    if args.plot:
        output_file(args.plot, "--plot", PLOT_SUFFIXES)
    topo = topology_from_args(args)
    info = show_dict(topo, full=args.all)
    if args.plot:
        from ..topology.plot import plot_topology
        info["plot"] = plot_topology(topo, args.plot)
    if args.format == "json":
        print_json(info)
        return 0
    print(f"{topo.name}: {topo.nodes} node(s) x {topo.gpus_per_node} GPU(s) = {topo.nranks} "
          f"ranks; p2p {'on' if topo.p2p else 'off (through host memory)'}; in-switch "
          f"reduction {'yes' if topo.in_switch_reduction else 'no'}")
    print("devices: " + ", ".join(f"{n} {k}" for k, n in info["devices"].items()))
    print("links (directed, nominal GB/s per direction):")
    _table([{"tech": t, "links": v["links"], "GB/s": ", ".join(f"{b:g}" for b in v["GBps"])}
            for t, v in info["links"].items()], ["tech", "links", "GB/s"], indent=2)
    print("per GPU (nominal GB/s per direction):")
    rows = info["per_gpu_GBps"]
    if len(rows) > 16 and not args.all:   # identical nodes: the first node says it all
        rows = [r for r in rows if r["rank"] < min(topo.gpus_per_node, 8)]
        shown = "node 0" if topo.gpus_per_node <= 8 else "the first 8 GPUs of node 0"
        print(f"  ({shown} shown; --all for every rank)")
    _table(rows, ["rank", "gpu", "model", "nvlink", "nic", "to_nic", "to_host"], indent=2)
    half = f"first half of the {'nodes' if topo.nodes > 1 else 'GPUs'} to the rest"
    if info["bisection_GBps"] is None:
        print(f"bisection bandwidth ({half}): not computed for {len(topo.links)} links (a max "
              f"flow above {MAX_BISECTION_LINKS} links takes minutes; see the fabric line)")
    else:
        print(f"bisection bandwidth ({half}): {info['bisection_GBps']:g} GB/s nominal, "
              f"{info['bisection_achievable_GBps']:g} GB/s achievable")
    if info["fabric"]:
        _print_fabric(info["fabric"])
    if args.all:
        print("devices:")
        _table(info["device_list"], ["name", "kind", "node", "model"], indent=2)
        print("links:")
        _table(info["link_list"], ["index", "src", "dst", "tech", "GBps", "efficiency",
                                   "latency_us"], indent=2)
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0


def _print_fabric(f) -> None:
    print("fabric:")
    for t in f["tiers"]:
        extra = ", ".join(f"{k.replace('_', ' ')} {v:g}" for k, v in t.items()
                          if k not in ("tier", "switches") and v is not None)
        print(f"  {t['tier']:<6} {t['switches']} switch(es){', ' + extra if extra else ''}")
    red = f["redundancy"]
    if red["paths"]:
        print(f"  redundancy: {red['paths']} tied path(s) between leaves; one failed cable "
              f"takes {100 * red['cable_share']:g}% of a leaf's uplink")
    net = f["network"]
    if net:
        mode = "lossless (PFC" + (", DCQCN)" if net["cc"] == "dcqcn" else ", no CC)") \
            if net["lossless"] else f"lossy (go-back-N, loss rate {net['loss_rate']:g})"
        how = "by destination (subnet manager tables)" if net["routing"] == "static" else \
            f"hash on {'+'.join(net['hash_inputs'])}"
        place = net.get("placement_seed", -1)
        seeds = f"seed {net['seed']}" + (f", placement seed {place}" if place >= 0 else "")
        print(f"  network: {net['routing']} routing, {net['qps_per_connection']} QP(s) per "
              f"connection, {how}, {seeds}; {mode}; {net['fail_links']} failed cable(s)")


def cmd_route(args) -> int:
    topo = topology_from_args(args)
    paths = topo.routes(args.src, args.dst)
    rows = []
    for p in paths:
        rows.append({"links": list(p), "hops": [f"{topo.links[i].src}->{topo.links[i].dst} "
                                                f"({topo.links[i].tech})" for i in p],
                     "bottleneck_GBps": _gbps(min((topo.links[i].bandwidth_Bps for i in p),
                                                  default=None)),  # None: same rank, no link
                     "latency_us": round(sum(topo.links[i].latency_s for i in p) * 1e6, 4)})
    if args.format == "json":
        print_json({"src": args.src, "dst": args.dst, "routes": rows})
        return 0
    print(f"rank {args.src} ({topo.ranks[args.src]}) -> rank {args.dst} "
          f"({topo.ranks[args.dst]}): {len(rows)} shortest path(s)")
    for k, r in enumerate(rows):
        if r["bottleneck_GBps"] is None:
            print(f"  path {k}: the same rank, no links")
            continue
        print(f"  path {k}: bottleneck {r['bottleneck_GBps']:g} GB/s, latency "
              f"{r['latency_us']:g} us")
        for h in r["hops"]:
            print(f"    {h}")
    return 0


def cmd_export(args) -> int:
    if args.output:
        output_file(args.output, "--output", (".yaml", ".yml"))
    topo = topology_from_args(args)
    text = topo.to_yaml()
    if args.output:
        write_text(args.output, text)
        print(f"wrote {topo} to {args.output}")
    else:
        print(text, end="")
    return 0


def _table(rows, cols, indent=0) -> None:
    """A plain aligned text table (no colour, safe in pipes)."""
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    pad = " " * indent
    print(pad + "  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for row in cells:
        print(pad + "  ".join(v.ljust(w) for v, w in zip(row, widths)))
