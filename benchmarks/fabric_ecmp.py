"""InfiniBand or RoCE at cluster scale: published fabric effects against what gpucomm predicts.

    PYTHONPATH=src python3 benchmarks/fabric_ecmp.py [--seeds 5] [--patterns N]
        [--checks 1,1b,2a,2b,3,4]

Every number but 2b's comes from `gpucomm sim ... --format json` run as a subprocess (the
CLI users run), analytic model. The cluster of 2a and 3: 64 x DGX H100 (512 GPUs, 8 x 400G
NICs each) on a rail-optimised 2-tier fabric (`--fabric rail-2tier --leaf-ports 32`: 32
nodes per leaf, 32 spines, 1:1), the job's nodes placed at random over the two leaf groups
(a seed is one job: `--seed` moves its placement and the switches' hash together). Each
check prints PASS or FAIL against a published bar; the exit status is 1 if any fails.

1. QP scaling on RoCE ECMP, on Meta's published setup (Gangidi et al., "RDMA over Ethernet for
   Distributed AI Training at Meta Scale", SIGCOMM 2024, and Engineering at Meta, "A RoCE
   network for distributed AI training at scale", 2024-08-05): an AI Zone is a two-stage Clos
   of rack training switches (RTSW, copper to two Grand Teton hosts' 16 x 400G NICs: a
   top-of-rack leaf, not rail-optimised) under cluster training switches (CTSW) with 1:1.125
   spine over-provisioning (18 uplinks for 16 NIC ports: `--fabric tor-2tier --leaf-ports 2
   --oversubscription 0.8889`); Meta's scheduler is topology-aware and assigns ranks by
   position, so a job's nodes are packed rack by rack in rank order (`--placement packed`;
   random placement, the partial racks Meta saw cost it, printed beside). Baseline: ECMP on the
   5-tuple with one QP per connection (each QP its own UDP source port); E-ECMP adds the
   destination QP to the hash and QP scaling raises NCCL_IB_QPS_PER_CONNECTION, each message
   whole on the next QP in turn (NCCL_IB_SPLIT_DATA_ON_QPS=0, Meta's pick). Meta's published
   data is the paper's Figure 7 ("Performance Impact on AllReduce Benchmark: E-ECMP and Queue
   Pair Scaling"): normalized bandwidth of QP=1 ("Out of Box") and QP=4 round-robin at 2 MB-2
   GB, printed (META_FIG7, read off the bars). As a ratio it gains +65% (32 MB) to +157% (512
   MB), +69% at 2 GB; the blog's "up to 40%" is the 2 GB bars' difference in points (58 ->
   98%), not a bound on these ratios. The job size, the algorithm NCCL picked and the platform
   are not given. Here: NCCL's default all-reduce (`--algorithm auto`) and the ring, 4 QPs
   against 1, median over seeds (the hash seed; packed placement does not move), at 256 MiB, 1
   GiB and 4 GiB, 64 nodes (32 racks: the job's share of a zone; racks outside the job carry
   nothing here), each also as a share of the same case sprayed (the even split, the analogue
   of Meta's 100%). Meta ran NCCL, whose tuner is blind to hash collisions, so the algorithm
   and protocol are the pair NCCL's own tuning model picks (`--select nccl`: the same pair for
   1 and 4 QPs); gpucomm's contention-aware pick (`--select fastest`) is printed for auto. Bar,
   for auto and the ring packed at 4 GiB, where both are bandwidth-bound: the gain inside the
   gains of Figure 7's two largest sizes, +69..+157% (META_GAIN). Smaller sizes are printed: a
   512-rank ring is latency-bound at 256 MiB and 1 GiB, where Meta's job, of unpublished size,
   was not. The connections are NCCL's: a ring channel per connection (16 on 8 NICs: 2 per
   NIC), a tree 1 per tree and NIC, NVLSTree 8 per tree and NIC (every NVLS channel of a head,
   nccl_trees.tree_fabric_slowdown), each with its queue pairs. The ring's gain at 4 GiB is the
   ratio of the worst rack's uplink loads: 16 ring connections per rack boundary hashed onto 18
   uplinks, each of which carries about 2.6 of them at the ring's full pace (1 QP: the worst
   cable of the 32 racks carries 5-7) against 64 quarter-lanes (4 QPs: the worst carries
   2.5-2.75 connections' worth; seeds 0-4): 49% -> 89% of sprayed, beside Figure 7's 58% -> 98%
   at 2 GB. The pass depends on the job size, which Figure 7 does not give: at 4 GiB the ring
   gains +77% on 8 nodes, +61% on 16 (the 128 GPUs of the paper's Figure 10: just below), +100%
   on 32. Nothing in NCCL softens it: each channel gets an equal, fixed slice of the buffer
   (src/enqueue.cc, countPerChannels), its NCCL_STEPS (8) slots are freed in order, QPs take
   whole messages in turn (src/transport/net_ib.cc), and each QP is its own 5-tuple
   (grh.flow_label 0: the UDP source port comes from the QP numbers). NVLSTree (NCCL 2.18 and
   later, v2.18.1-1 to v2.30.7-1 alike on H100) opens 8 connections per tree edge on each
   head's NIC: all NCCL_NVLS_NCHANNELS (16; NVLS_NCHANNELS_SM90 in 2.30) channels carry data at
   every size (enqueue.cc: nc = nvlsChannels), channel c runs tree c%2 (connect.cc
   connectNvls), every channel's
   connections leave by the head's own NIC (search.cc getNvlsNetDev) and are its own (net.cc:
   no shared comms with a graph), each with NCCL_IB_QPS_PER_CONNECTION (1) queue pairs taking
   whole messages in turn (net_ib.cc, NCCL_IB_SPLIT_DATA_ON_QPS 0). So it spreads well with 1
   QP (89% of sprayed) and gains +12%, below the range. The paper's figure captions and the
   summaries of its text I could reach name neither the platform nor the NCCL of Figure 7; its
   Figure 8 puts LLM NICs at no more than 300 QPs with QP scaling (16 per connection for LLM):
   NVLSTree alone opens at least 32 connections on a head's NIC (16 channels, a send and a
   receive each; init.cc connects them at init), 512 QPs, while ring and tree open 12 here
   (192 QPs). Printed beside, where NCCL's auto is the
   tree: H100 with NCCL 2.17 (before NVLSTree: `--nccl-version 2.17`) and A100 hosts on 200G
   NICs (`--system dgx-a100 --nic roce-200g`; no NVLS: NCCL needs NVSwitch multicast,
   transport/nvls.cc CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED), both inside the range; NCCL's
   tree on its own (1 connection per tree edge and NIC), the ring with random placement, and
   the ring on 16 nodes with twice the uplinks (Meta's 1:2 stopgap, `--oversubscription 0.5`),
   where it gains only +21% at 4 GiB. Also printed, the other reading of the "Out of Box"
   baseline: the paper found while debugging QP scaling that the RoCE packets of different
   QPs kept one destination UDP port and "in some cases" one source port, hence E-ECMP; if
   the 1-QP bars were hashed that way (`--hash-inputs src,dst`: all connections of a NIC pair
   on one path), NVLSTree's 16 connections per head pair collapse onto one path and it gains
   +173% at 4 GiB (+144% at 256 MiB), the ring +118%. Meta's 1-QP bars (58% of normalized
   at 2 GB) sit between the two readings (NVLSTree 89% or 37% of sprayed); the bar keeps the
   baseline it had, a source port per QP.
1b. ECMP with 1 QP against the even split (`--routing spray`) at 4 GiB, for ring, tree and
   nvls_tree, on Meta's AI Zone and on the 1:1 rail cluster of 2a. Bar: ECMP slower, except
   nvls_tree on the 1:1 rail fabric, printed: an inner node's NIC sends on 4 tree edges x 8
   connections (one per NVLS channel of that tree, connect.cc connectNvls) = 32 at once, each
   at 1/32 of a NIC, and a leaf-spine cable has a NIC's capacity, so hashing slows it only
   when some cable draws more than 32 of the 15-18 it carries on average (seeds 0-4: the
   worst cables carry 27-33, so one seed loses 33/32). The tree's 4 connections on that NIC
   meet cables of 6-10 and slow down. Printed under it: the same with a switch hash that sees
   only the NIC pair (`--hash-inputs src,dst`, as where every QP has one UDP source port):
   a head pair's 16 connections then share one path, and hashing slows NVLSTree too.
2. Shares of ideal bandwidth.
   a. The ring all-reduce at 4 GiB on 64 x DGX H100 (`--fabric rail-2tier --leaf-ports 32
      --placement random`): its busbw over the same job on a fabric that never collides (the
      plain rail model). A collective's pace is its slowest pair. Bars: static ECMP hashing
      38-60% (Geoffray & Hoefler 38%, below; NVIDIA's Spectrum-X announcements put standard
      Ethernet at 60% of effective bandwidth at scale); spraying, the even split by
      construction, 97-101% (a check of the lanes, not a published number). Flowlet,
      per-packet InfiniBand AR and Spectrum-X AR are printed.
   b. Geoffray & Hoefler's own setup and statistic (P. Geoffray and T. Hoefler, "Adaptive
      Routing Strategies for Modern High Performance Networks", HOTI 2008; P. Geoffray,
      "Static vs Adaptive Routing", the benchmark's page): a 512-node Clos of 32-port
      crossbars (16 one-NIC nodes per leaf, 16 spines), MPI_Sendrecv between random pairs of
      nodes, the mean over pairs of each pair's bandwidth over the point-to-point bandwidth;
      static routing 38%, their best adaptive routing (the NIC probes the paths) 77% at 512
      nodes, 100% at smaller counts. Here: random
      pairings, every flow at once, max-min rates (fabric_ar.maxmin_rates over the CLI's
      lane routes, in-process: the CLI times collectives, whose pace is their slowest
      pair), one connection per pair, a pair's bandwidth the lower of its two directions.
      Bars: ECMP (a random static route per flow) 38-60%; flowlet routing (a queue pair
      keeps the path it was placed on, chosen with every earlier choice's load on each
      whole path in view) 77-95%. The range joins two sources: 77% is G&H's best scheme
      (the benchmark page calls it probing adaptive routing: the Myrinet NIC, which source-
      routes, probes the paths and picks one) at 512 nodes, a point value rounded to a
      whole percent, and 95% is NVIDIA's Spectrum-X claim for per-packet AR. Neither is
      flowlet switching in switches; the fluid `flowlet` row is the class of G&H's scheme
      (a path chosen at the source with whole-path knowledge, kept), and its mean sits on
      77% itself (77.0% +- 0.06 s.e. over 1000 pairings, `--patterns 1000`), so at the
      default 20 pairings (s.e. 0.4) it passes or fails by chance. Per-packet AR
      (InfiniBand AR; Spectrum-X, NVIDIA: 95%), bar 77-95%, is the even split less what
      head-of-line blocking costs, from the cell model (simulate/fabric_cells.py): ingress
      buffers stop their sender when full (credits on InfiniBand: the loop's worth, 2 x the
      catalog's 0.5 us hop at 400 Gb/s, plus one MTU, as NVIDIA publishes no Quantum-2
      buffer; Spectrum-4's 128 MB shared buffer over 128 ports on Spectrum-X), and the leaf
      chooses by its own egress queues. The fabric model's streaming share (what every
      `--routing adaptive` or `spectrum-x` prediction takes, fabric_ar.ar_share) prints
      unbarred; the bar is on G&H's own loop, run in the cell model: 20 MPI_Sendrecv of 1 MB
      per pair from an empty fabric, over a lone pair's loop. A pair waits for both
      messages, so a deep buffer's queues (Spectrum-X) cost the loop what streaming does not
      see. Unbarred below them: InfiniBand AR with twice the credits (how much the
      unpublished buffer decides), and flowlets switched by the leaf after an idle gap of
      two ingress buffers (the delay a reordering must stay under): the leaf sees only its
      own queues, and a collision on a spine's down-link has drained from them by the time
      a pair idles, so it cannot do what G&H's NIC probes do. Then the same flowlets chosen
      by CONGA's leaf-to-leaf feedback (Alizadeh et al., SIGCOMM 2014: each path's
      congestion to the destination leaf, the larger of its up- and down-port queue, a
      round trip old, each leaf knowing only its own choices): it sees the remote collision
      and moves between messages; and with a 16 us gap (the low end of a Tomahawk DLB
      switch's typical flowlet timer, 16-256 us, IP Infusion's OcNOS DLB page), longer
      than a pair's idle time between messages (a round trip, about 2 us here; a 1 MB
      message takes about 21 us at 400 Gb/s), so a flowlet moves only when a pair stalls
      that long. No published flowlet-switching number exists for this setup, so these
      rows carry no bar; switch-side flowlet switching stays below G&H's 77%. Two sweeps
      of the CONGA row close it: the view's age (0, half and a whole round trip) and the
      message size (256 KiB, 1 MiB, 4 MiB: a pair re-chooses only between messages, each
      time with a view that old).
3. Lossy RoCE, go-back-N: the ring's busbw at 1% packet loss against lossless. Bar: <= 20%
   (go-back-N collapses at percent-level loss: Mittal et al., "Revisiting Network Support for
   RDMA", SIGCOMM 2018). The model's mechanism: a rollback of the window per loss, and a
   retransmission timeout (NCCL_IB_TIMEOUT 20: 4.096 us x 2^20, ~4.3 s) whenever the NAK or
   the resent packet is lost (simulate/fabric.py); lower loss rates are printed unbarred.
4. Hash polarization on a three-tier fabric (`--fabric rail-3tier --leaf-ports 4`: per rail
   a fat tree of 8-port switches, pods of 4 leaves, shared cores): where every switch hashes
   the same fields alike (`--hash-polarized`), the aggregation tier repeats the leaf's choice
   and uses 1 of its 4 core cables per leaf choice (Alibaba HPN, SIGCOMM 2024, gives hash
   polarization in three-tier Clos fabrics as a reason for its two-tier dual-plane design; no
   published magnitude to bar against). Bar: polarized ECMP slower than per-switch seeds, and
   spraying untouched by it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ["--collective", "all_reduce", "--system", "dgx-h100", "--nodes", "64",
           "--fabric", "rail-2tier", "--leaf-ports", "32", "--placement", "random",
           "--format", "json"]
SIZES = ["256M", "1G", "4G"]
# Meta's AI Zone (SIGCOMM 2024): RTSW over two 8-NIC hosts, 1:1.125 spine over-provisioning
def ai_zone(system: str, nic: str) -> list[str]:
    return ["--collective", "all_reduce", "--system", system, "--nodes", "64", "--fabric",
            "tor-2tier", "--leaf-ports", "2", "--oversubscription", str(1 / 1.125), "--nic", nic,
            "--routing", "ecmp", "--format", "json"]


META = ai_zone("dgx-h100", "roce-400g")
# the same zone of A100 hosts on 200G NICs (the GPU generation of Meta's 200G AI Zones; DGX
# A100: 8 GPUs, 8 x 200G NICs, second-generation NVSwitch without multicast, so no NVLS and
# NCCL's auto is ring or tree), printed
META_A100 = ai_zone("dgx-a100", "roce-200g")
# a smaller job on twice the uplinks (the RTSW over-provisioning Meta used as a stopgap before
# E-ECMP), printed
STOPGAP = ("--nodes", "16", "--oversubscription", "0.5")
# the NCCL before NVLSTree (2.18.1): across nodes its auto all-reduce is ring or tree, printed
NCCL_217 = ("--nccl-version", "2.17")
# a baseline ECMP whose 5-tuple is the same for every QP between two NICs (the RoCE UDP
# destination port is fixed, and Meta found the source port "in some cases" the same too),
# so all connections of a NIC pair share one path; 4 QPs with E-ECMP against it, printed
SAME_PORT = ("--hash-inputs", "src,dst")
SCENARIO = {STOPGAP: "the same ring, 16 nodes on twice the uplinks (Meta's 1:2 stopgap)",
            NCCL_217: "NCCL's auto with NCCL 2.17, before NVLSTree (Figure 7's NCCL is not "
                      "published)",
            "a100": "the same zone of 64 x DGX A100 on RoCE 200G, no NVLS (Figure 7's platform "
                    "is not published)",
            SAME_PORT: "the other reading of Meta's baseline: 1 QP where every QP of a NIC pair "
                       "has one UDP source port (hash on src,dst), 4 QPs with E-ECMP"}
# Gangidi et al., SIGCOMM 2024, Figure 7 ("Performance Impact on AllReduce Benchmark: E-ECMP
# and Queue Pair Scaling"): normalized bandwidth (%) per message size of QP=1 ("Out of Box")
# and QP=4 round-robin, read off the bars to about a point
META_FIG7 = {"32M": (24.0, 39.5), "128M": (33.5, 63.0), "512M": (35.0, 90.0),
             "2G": (58.0, 98.0)}
# the gains (4 QPs over 1) at its two largest sizes, where the collective is bandwidth-bound:
# the published range a bandwidth-bound gain is held to
META_GAIN = tuple(sorted(META_FIG7[k][1] / META_FIG7[k][0] - 1 for k in ("512M", "2G")))
ECMP_SHARE = (0.38, 0.60)
AR_SHARE = (0.77, 0.95)
SPRAY_SHARE = (0.97, 1.01)  # the even split over every path: the ideal, up to rounding
LOSSY_MAX_SHARE = 0.20
# the shortest flowlet inactivity timer of a Tomahawk DLB switch's typical range, 16-256 us
# (IP Infusion, "Dynamic Load Balancing — Adaptive Routing for AI Fabrics", OcNOS DLB page)
DLB_GAP_S = 16e-6
CHECKS = ("1", "1b", "2a", "2b", "3", "4")


def sim(*flags: str) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "gpucomm", "sim", *flags]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if out.returncode:
        sys.exit(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    rows: list[dict] = json.loads(out.stdout)["rows"]
    return rows


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def qp_gain(seeds: range) -> bool:
    print("1. QP scaling on Meta's AI Zone (RTSW over 2 hosts, 18 uplinks: 1:1.125), RoCE 400G "
          "ECMP: 4 QPs/connection (E-ECMP: hash on dst QP) vs 1")
    fig7 = ", ".join(f"{k} {a:g} -> {b:g} ({100 * (b / a - 1):+.0f}%)"
                     for k, (a, b) in META_FIG7.items())
    print(f"   Meta, Figure 7 (AllReduce, normalized bandwidth %, QP=1 -> 4 round-robin): {fig7}")
    ok = True
    for zone, alg, placement, select, other in (
            (META, "auto", "packed", "nccl", ()), (META, "ring", "packed", "nccl", ()),
            (META, "ring", "random", "nccl", ()), (META, "tree", "packed", "nccl", ()),
            (META, "auto", "packed", "fastest", ()), (META, "ring", "packed", "nccl", STOPGAP),
            (META, "auto", "packed", "nccl", NCCL_217), (META_A100, "auto", "packed", "nccl", ()),
            (META, "auto", "packed", "nccl", SAME_PORT),
            (META, "ring", "packed", "nccl", SAME_PORT)):
        if (other or zone is not META) and (alg, other) != ("ring", SAME_PORT):
            print(f"   {SCENARIO[other if other else 'a100']}:")
        barred = zone is META and alg in ("auto", "ring") and placement == "packed" and \
            select == "nccl" and not other
        ok &= _gain_rows(zone, ["--placement", placement, "--algorithm", alg, "--select", select,
                                "-b", SIZES[0], "-e", SIZES[-1], "-f", "4"], other, seeds,
                         f"{alg:<4} {placement:<6} {select:<7}", barred)
    return ok


def _gain_rows(zone: list[str], flags: list[str], other: tuple[str, ...], seeds: range,
               label: str, barred: bool) -> bool:
    """One case of check 1 at every size: median busbw with 1 and 4 QPs per connection and
    their gain, the largest size barred if `barred`. `other` is added to every run, but
    SAME_PORT only to the 1-QP baseline (4 QPs are E-ECMP's)."""
    one_only = other if other is SAME_PORT else ()
    flags = [*flags, *(() if one_only else other)]
    bw = {q: [sim(*zone, *flags, *(one_only if q == 1 else ()), "--qps-per-connection",
                  str(q), "--seed", str(s)) for s in seeds] for q in (1, 4)}
    even = sim(*zone, *flags, "--routing", "spray", "--seeds", str(len(seeds)))
    ok = True
    for i, size in enumerate(SIZES):
        g = statistics.median(b4[i]["busbw"] / b1[i]["busbw"] - 1
                              for b1, b4 in zip(bw[1], bw[4]))
        good = META_GAIN[0] <= g <= META_GAIN[1]
        bar = barred and size == SIZES[-1]
        ok &= good or not bar
        picked = " -> ".join(f"{bw[q][0][i].get('algorithm', '?')}/"
                             f"{bw[q][0][i].get('protocol', '?')}" for q in (1, 4))
        one = statistics.median(r[i]["busbw"] for r in bw[1])
        four = statistics.median(r[i]["busbw"] for r in bw[4])
        ideal = even[i]["busbw_median"]
        line = (f"   {label} {size:>4} ({picked}): 1 QP {one:6.1f}, 4 QPs {four:6.1f} GB/s = "
                f"{100 * one / ideal:3.0f} -> {100 * four / ideal:3.0f}% of spray, median gain "
                f"{100 * g:+5.1f}%")
        print(line + (f"  (Meta: {100 * META_GAIN[0]:+.0f}..{100 * META_GAIN[1]:+.0f}%)  "
                      f"{verdict(good)}" if bar else ""))
    return ok


def ecmp_vs_even_split(seeds: range) -> bool:
    print("1b. ECMP with 1 QP against the even split (spray), all-reduce 4 GiB, RoCE 400G, "
          "64 x DGX H100, median busbw over seeds (min)")
    ok = True
    for fabric, base, nic_paced in (
            ("Meta's AI Zone, packed", [*META, "--placement", "packed"], ()),
            ("rail-2tier 1:1, random", [*CLUSTER, "--nic", "roce-400g"], ("nvls_tree",))):
        for alg in ("ring", "tree", "nvls_tree"):
            bw = {r: sim(*base, "--algorithm", alg, "--routing", r, "--seeds",
                         str(len(seeds)), "-b", "4G", "-e", "4G")[0] for r in ("ecmp", "spray")}
            e, s = bw["ecmp"]["busbw_median"], bw["spray"]["busbw_median"]
            line = (f"   {fabric:<23} {alg:<9} ECMP {e:6.1f} ({bw['ecmp']['busbw_min']:6.1f}), "
                    f"spray {s:6.1f} GB/s")
            if alg in nic_paced:  # see the docstring: its NIC, not a cable, is the bottleneck
                print(line + "  (NIC-paced: 32 connections on its busiest NIC; not barred)")
                pair = sim(*base, "--algorithm", alg, "--routing", "ecmp", *SAME_PORT,
                           "--seeds", str(len(seeds)), "-b", "4G", "-e", "4G")[0]
                print(f"   {'':<23} {alg:<9} ECMP {pair['busbw_median']:6.1f} "
                      f"({pair['busbw_min']:6.1f}) hashing the NIC pair only "
                      f"(`{' '.join(SAME_PORT)}`; printed)")
                continue
            ok &= e < s
            print(line + f"  ECMP slower  {verdict(e < s)}")
    return ok


def shares(seeds: range) -> bool:
    print("2a. Ring all-reduce 4 GiB on 64 x DGX H100 (rail-2tier, 32 nodes/leaf, random "
          "placement): share of the never-colliding fabric's busbw")
    ring = ["--algorithm", "ring", "-b", "4G", "-e", "4G"]
    ideal = sim("--collective", "all_reduce", "--system", "dgx-h100", "--nodes", "64",
                "--nic", "roce-400g", "--format", "json", *ring)[0]["busbw"]
    print(f"   ideal (plain rail fabric): {ideal:.1f} GB/s")
    roce, ib = ["--nic", "roce-400g", "--routing"], ["--nic", "ib-ndr", "--routing"]
    ok = _share_rows(seeds, [*CLUSTER, *ring], ideal, (
        ("RoCE, static ECMP, 1 QP", [*roce, "ecmp"], ECMP_SHARE),
        ("RoCE, flowlet adaptive routing", [*roce, "flowlet"], None),
        ("InfiniBand adaptive routing (per packet)", [*ib, "adaptive"], None),
        ("Spectrum-X adaptive routing (per packet)", [*roce, "spectrum-x"], None),
        ("spray (per-packet even split)", [*roce, "spray"], SPRAY_SHARE),
        ("InfiniBand static (subnet manager, D-mod-k)", [*ib, "static"], None)))
    return ok


def pair_shares(patterns: int) -> bool:
    """Geoffray & Hoefler's own benchmark, in-process (the CLI times collectives, whose
    pace is the slowest pair; they report the mean over pairs)."""
    sys.path.insert(0, str(ROOT / "src"))
    import numpy as np
    from gpucomm.simulate.fabric_ar import maxmin_rates
    from gpucomm.simulate.paths import PathTable
    from gpucomm.topology import build_topology
    from gpucomm.topology.fabric import Network

    def share(routing: str, seed: int) -> float:
        nic = "ib-ndr" if routing == "adaptive" else "roce-400g"
        topo = build_topology("dgx-h100", nodes=512, gpus_per_node=1, nics_per_node=1,
                              nic=nic, fabric="rail-2tier", leaf_ports=16,
                              placement="random", network=Network(routing=routing, seed=seed,
                                                                  connections=1))
        paths = PathTable(topo)
        order = np.random.default_rng([seed, 0x6E]).permutation(topo.nranks)
        a, b = order[0::2], order[1::2]
        table = paths.routes(np.concatenate([a, b]), np.concatenate([b, a]), 0)
        x = maxmin_rates(table, paths.capacity, paths.lane_scale) / paths.properties(table)[2]
        return float(np.minimum(x[:len(a)], x[len(a):]).mean())  # a sendrecv: both ways

    print(f"2b. Geoffray & Hoefler's setup: 512 one-NIC nodes, 32-port switches (16 per leaf, "
          f"16 spines), random pairs exchanging, mean pair bandwidth / line rate, "
          f"{patterns} patterns")
    ok = True
    for name, routing, bar in (
            ("static (subnet manager, D-mod-k)", "static", None),
            ("ECMP (a random static route per flow)", "ecmp", ECMP_SHARE),
            ("flowlet (a queue pair keeps its first path)", "flowlet", AR_SHARE),
            ("InfiniBand AR, fabric model (streaming)", "adaptive", None),
            ("Spectrum-X AR, fabric model (streaming)", "spectrum-x", None)):
        v = [share(routing, p) for p in range(patterns)]
        m, se = statistics.mean(v), statistics.stdev(v) / len(v) ** 0.5 if len(v) > 1 else 0.0
        line = f"   {name:<48} {100 * m:5.1f}% (+-{100 * se:.1f} s.e.) of line rate"
        if bar is not None:
            good = bar[0] <= m <= bar[1]
            ok &= good
            line += f"  (published {100 * bar[0]:.0f}-{100 * bar[1]:.0f}%)  {verdict(good)}"
        print(line)
    return _sendrecv_rows() and ok


def _sendrecv_rows() -> bool:
    """Per-packet AR in G&H's own loop, in the cell model: 20 MPI_Sendrecv of 1 MB per pair
    from an empty fabric, each pair's slower direction over a lone pair's in the same loop.
    Unbarred: InfiniBand AR with twice the loop's credits (how much the unpublished buffer
    decides), and flowlets switched by the leaf by its own queues."""
    import dataclasses

    import numpy as np
    from gpucomm.simulate.fabric_ar import ar_switching, sendrecv_share
    from gpucomm.simulate.fabric_cells import Clos
    from gpucomm.simulate.paths import PathTable
    from gpucomm.topology import build_topology
    from gpucomm.topology.fabric import Network

    def rate_latency(nic: str) -> tuple[float, float]:  # a cable's payload rate, hop latency
        topo = build_topology("dgx-h100", nodes=32, gpus_per_node=1, nics_per_node=1, nic=nic,
                              fabric="rail-2tier", leaf_ports=16, network=Network())
        p = PathTable(topo)
        k = int(np.flatnonzero(p.fabric.between)[0])
        return float(p.capacity[k]), float(p.latency[k])

    def switching(routing: str, nic: str):
        return ar_switching(routing, *rate_latency(nic), 4096)

    ib_rate = rate_latency("ib-ndr")[0]

    clos = Clos(leaves=32, hosts=16, spines=16)
    message = 2**20 // 4096
    ib, sx = switching("adaptive", "ib-ndr"), switching("spectrum-x", "roce-400g")
    conga = 2 * ib.credit_rtt  # leaf-to-leaf feedback: a round trip of 4 hops old
    dlb_gap = math.ceil(DLB_GAP_S * ib_rate / 4096)
    print(f"   G&H's loop in the cell model (fabric_cells.py): 20 x 1 MB MPI_Sendrecv per pair "
          f"({message} cells of 4 KiB) from an empty fabric, over a lone pair's loop")
    ok = True
    for name, sw, patterns, bar in (
            ("InfiniBand AR (per packet, NDR, credits)", ib, 2, AR_SHARE),
            ("Spectrum-X AR (per packet, 400GbE, PFC)", sx, 2, AR_SHARE),
            ("InfiniBand AR, twice the loop's credits", dataclasses.replace(
                ib, buffer=2 * ib.credit_rtt), 1, None),
            ("flowlet by the leaf (gap: 2 ingress buffers)", dataclasses.replace(
                ib, choice="flowlet", gap=2 * ib.buffer), 1, None),
            ("flowlet, CONGA path feedback, same gap", dataclasses.replace(
                ib, choice="flowlet", gap=2 * ib.buffer, view="path", reaction=conga), 2, None),
            (f"flowlet, CONGA path feedback, gap {DLB_GAP_S * 1e6:.0f} us", dataclasses.replace(
                ib, choice="flowlet", gap=dlb_gap, view="path", reaction=conga), 1, None)):
        v = sendrecv_share(clos, sw, message=message, cells=20 * message, patterns=patterns)
        line = (f"   {name:<48} {100 * v.mean():5.1f}% (buffer {sw.buffer} cells, credit loop "
                f"{sw.credit_rtt}" + (f", gap {sw.gap}, view {sw.reaction} old)"
                                      if sw.choice == "flowlet" else ")"))
        if bar is not None:
            good = bool(bar[0] <= v.mean() <= bar[1])
            ok &= good
            line += f"  (published {100 * bar[0]:.0f}-{100 * bar[1]:.0f}%)  {verdict(good)}"
        print(line)
    _flowlet_sweeps(clos, dataclasses.replace(ib, choice="flowlet", gap=2 * ib.buffer,
                                              view="path", reaction=conga), message)
    return ok


def _flowlet_sweeps(clos, sw, message: int) -> None:
    """CONGA-fed flowlets in G&H's loop (1 pairing each): the view's age, then the message
    size (a pair re-chooses only between messages, with a view as old as `reaction`)."""
    import dataclasses

    from gpucomm.simulate.fabric_ar import sendrecv_share

    def share(s, m: int) -> str:
        return f"{100 * sendrecv_share(clos, s, message=m, cells=20 * m, patterns=1).mean():.1f}%"

    ages = ", ".join(f"{r} cells {share(dataclasses.replace(sw, reaction=r), message)}"
                     for r in (0, sw.reaction // 2, sw.reaction))
    print(f"   CONGA flowlets by the view's age (1 pairing each, +-2 points): {ages}")
    sizes = ", ".join(f"{m * 4 // 1024} MiB {share(sw, m)}" if m >= 256 else
                      f"{m * 4} KiB {share(sw, m)}" for m in (message // 4, message, 4 * message))
    print(f"   CONGA flowlets by message size (view {sw.reaction} cells old): {sizes}")


def _share_rows(seeds: range, base: list[str], ideal: float,
                rows: tuple[tuple[str, list[str], tuple[float, float] | None], ...]) -> bool:
    ok = True
    for name, flags, bar in rows:
        bw = [sim(*base, *flags, "--seed", str(s))[0]["busbw"] for s in seeds]
        share = statistics.median(bw) / ideal
        line = f"   {name:<44} {statistics.median(bw):6.1f} GB/s = {100 * share:5.1f}% of ideal"
        if bar is not None:
            good = bar[0] <= share <= bar[1]
            ok &= good
            what = "by construction" if bar is SPRAY_SHARE else "published"
            line += f"  ({what} {100 * bar[0]:.0f}-{100 * bar[1]:.0f}%)  {verdict(good)}"
        print(line)
    return ok


def lossy() -> bool:
    print("3. Lossy RoCE (go-back-N), ring all-reduce 4 GiB, spraying (no hash collisions)")
    ring = [*CLUSTER, "--nic", "roce-400g", "--routing", "spray", "--algorithm", "ring",
            "-b", "4G", "-e", "4G"]
    base = sim(*ring)[0]["busbw"]
    ok = True
    for p in ("1e-5", "1e-4", "1e-3", "1e-2"):
        bw = sim(*ring, "--lossy", "--loss-rate", p)[0]["busbw"]
        share = bw / base
        line = f"   loss {p}: {bw:7.2f} GB/s = {100 * share:6.2f}% of lossless ({base:.1f})"
        if p == "1e-2":
            good = share <= LOSSY_MAX_SHARE
            ok &= good
            line += f"  (go-back-N collapse: <= {100 * LOSSY_MAX_SHARE:.0f}%)  {verdict(good)}"
        print(line)
    return ok


def polarization(seeds: range) -> bool:
    print("4. Three-tier fabric (rail-3tier, 8-port switches), ring all-reduce 4 GiB, RoCE")
    base = ["--collective", "all_reduce", "--system", "dgx-h100", "--nodes", "64",
            "--fabric", "rail-3tier", "--leaf-ports", "4", "--placement", "random",
            "--nic", "roce-400g", "--format", "json", "--algorithm", "ring",
            "-b", "4G", "-e", "4G"]
    bw = {}
    for name, flags in (("ECMP, per-switch seeds", ["--routing", "ecmp"]),
                        ("ECMP, polarized", ["--routing", "ecmp", "--hash-polarized"]),
                        ("flowlet adaptive routing", ["--routing", "flowlet"]),
                        ("spray", ["--routing", "spray"])):
        bw[name] = statistics.median(sim(*base, *flags, "--seed", str(s))[0]["busbw"]
                                     for s in seeds)
        print(f"   {name:<44} {bw[name]:6.1f} GB/s")
    good = bw["ECMP, polarized"] < bw["ECMP, per-switch seeds"] <= bw["spray"]
    cost = 1 - bw["ECMP, polarized"] / bw["ECMP, per-switch seeds"]
    print(f"   polarization costs {100 * cost:.0f}% of hashed busbw  {verdict(good)}")
    return good


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--patterns", type=int, default=None, metavar="N",
                    help="random pairings for 2b's fluid rows (default: 4 x --seeds; "
                         "Geoffray & Hoefler ran 5000)")
    ap.add_argument("--checks", default=",".join(CHECKS), metavar="LIST",
                    help=f"the checks to run, comma-separated, of {', '.join(CHECKS)} "
                         "(default: all)")
    args = ap.parse_args(argv)
    chosen = [c.strip() for c in args.checks.split(",") if c.strip()]
    if not chosen or any(c not in CHECKS for c in chosen):
        ap.error(f"--checks {args.checks!r}: a comma-separated list of {', '.join(CHECKS)}")
    seeds = range(args.seeds)
    patterns = 4 * args.seeds if args.patterns is None else args.patterns
    if patterns < 2:
        ap.error(f"--patterns {patterns}: at least 2 (a standard error needs two)")
    print(f"{args.seeds} seeds (hash and placement), analytic model")
    runs = {"1": lambda: qp_gain(seeds), "1b": lambda: ecmp_vs_even_split(seeds),
            "2a": lambda: shares(seeds), "2b": lambda: pair_shares(patterns),
            "3": lossy, "4": lambda: polarization(seeds)}
    results = [runs[c]() for c in CHECKS if c in chosen]
    print(f"{sum(results)}/{len(results)} checks pass")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
