"""Every constant of the protocol model, in one place, with where it comes from.

Nothing here is fitted to a measurement table. The numbers are NCCL's public tuning constants
(`src/graph/tuning.cc`, `src/include/device.h`, `src/graph/topo.h`, NCCL 2.19-2.30; summarised in
shared/reference/nccl.md) and the wire formats of NCCL's protocols. Link bandwidths, latencies and
their achievable fractions come from the hardware catalog through the Topology, not from here.
"""
from __future__ import annotations

US = 1e-6
GB = 1e9

# --- protocols ------------------------------------------------------------------------------
# Wire efficiency: the fraction of each line that carries payload.
#   LL:     8-byte units, 4 B data + 4 B flag                      -> 0.5
#   LL128:  128-byte lines, 120 B data + 8 B flag (NCCL_LL128_LINESIZE) -> 120/128
#   Simple: plain data behind a memory fence per slice            -> 1.0
WIRE_EFFICIENCY = {"ll": 0.5, "ll128": 120 / 128, "simple": 1.0}

# Software latency of one hop (one step of a ring/tree) per path class, seconds.
# tuning.cc hwLatencies[hw][Ring][proto] (NVLINK, PCI, NET rows), v2.23+.
HOP_LATENCY_S = {
    "ll": {"nvlink": 0.6 * US, "pcie": 1.0 * US, "net": 2.7 * US},
    "ll128": {"nvlink": 1.9 * US, "pcie": 2.5 * US, "net": 4.0 * US},
    "simple": {"nvlink": 3.4 * US, "pcie": 5.7 * US, "net": 14.0 * US},
}
# Fixed cost of one collective call per protocol: tuning.cc baseLatencies[Ring][proto]
# (kernel launch, setup of the channels' connections).
BASE_LATENCY_S = {"ll": 6.6 * US, "ll128": 14.0 * US, "simple": 8.4 * US}
# In-switch reduction (NVLS): baseLatency 0, hwLatency[NVLINK][NVLS][Simple] = 25 us; across
# nodes NVLSTree adds 2·log2(nodes) network hops of hwLatency[NET][NVLSTree][Simple] = 20.9 us.
NVLS_LATENCY_S = 25.0 * US
NVLSTREE_NET_LATENCY_S = 20.9 * US
# NCCL's tree (trees.cc: a chain in the node, a double binary tree across nodes), tuning.cc
# v2.23+: baseLatencies[Tree] and hwLatencies[hw][Tree][proto] by path class (nvlink, pcie,
# net); perChMaxTreeBws (Simple) and perChMaxTreeLL128Bws per channel and node-count class;
# trees run on as many channels as rings (16 on NVSwitch systems). Across nodes the LL128 cap
# counts the search's channels, half of those, as tuning.cc does (nccl.tree_graph_channels).
TREE_BASE_LATENCY_S = {"ll": 6.8 * US, "ll128": 14.0 * US, "simple": 8.4 * US}
TREE_HOP_LATENCY_S = {"ll": (0.6 * US, 1.0 * US, 5.0 * US),
                      "ll128": (1.25 * US, 1.9 * US, 8.5 * US),
                      "simple": (4.0 * US, 4.0 * US, 14.0 * US)}
TREE_PER_CHANNEL_BW = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
                       "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0)}
TREE_LL128_PER_CHANNEL_BW = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
                             "hopper": (36.7, 36.7, 29.0), "blackwell": (55.6, 31.67, 20.0)}
TREE_CHANNELS = 16
# A tree moves each channel's share in chunks that climb the chain and the binary tree and come
# back down, so a message pays, besides its bandwidth time, the pipeline's fill: its depth's
# hops times one chunk each. Chunk sizes are enqueue.cc calcCollChunking's (NCCL 2.19-2.30):
# stepSize = buffSize / NCCL_STEPS (8) with the default buffers (Simple 4 MiB; LL 8 lines x 512
# threads x 8 steps x 16 B; LL128 120 elems x 640 threads x 8 steps x 8 B), one step per chunk
# for trees; LL carries half its step as payload, LL128 120/128 of it. Tree/LL128 halves its
# chunk while nBytes / (nChannels x chunk) < nstepsLL128 x 64 / ppn (down to 128 KiB) and
# < nstepsLL128 x 16 / ppn (down to 32 KiB), nstepsLL128 = 1 + log2(nodes) + 0.1 ppn.
TREE_CHUNK_BYTES = {"simple": 512 * 1024, "ll": 32 * 1024, "ll128": 614400 * 120 // 128}
TREE_LL128_CHUNK_RULES = ((64, 131072), (16, 32768))
# Tree/Simple keeps its full slot today. NCCL 2.5-2.19 halved it for the all-reduce's up-down
# pattern while nBytes / (nChannels x chunk) < depth x 8 (down to 128 KiB), < depth x 4 (to
# 64 KiB) and < depth (to 32 KiB), depth = ranks per node - 1 + log2(nodes) (connect.cc); 2.20
# removed it (versions.py). Rules as (factor, floor).
TREE_SIMPLE_CHUNK_RULES: tuple[tuple[int, int], ...] = ()
# tuning.cc treeCorrectionFactor[proto][log2(bytes / 64)], 64 B .. 512 MiB: NCCL's own measured
# efficiency of its trees by message size ("trees are not perfectly sticking to the model for
# medium sizes"); it multiplies the tree's bandwidth below 512 MiB (logSize < 23; 2.29's 24th
# entry is NVLSTree's), and nothing beyond.
TREE_CORRECTION = {
    "ll": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
           1.0, 1.0, 1.0, 1.0),
    "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
              .9, .9, 1.0, 1.0, 1.0),
    "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
               .8, .9, .9, .9)}
# nvlsEfficiency[gpu generation]: the fraction of NVLink bandwidth multimem loads/stores reach,
# NCCL's figure for its default NVLS chunk (NCCL_NVLS_CHUNKSIZE = 128 KiB). We read it as a
# fixed cost per chunk: chunk / (chunk + overhead), so smaller chunks reach less.
NVLS_EFFICIENCY = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
NVLS_CHUNK_BYTES = 128 * 1024
# NVLS channels (NCCL_NVLS_NCHANNELS default 16); concurrent ops = channels x NVLS heads (one
# head per GPU of the node). enqueue.cc shrinks the chunk for messages below
# 64/8/2 x concurrentOps x chunk to 64/32/16 KiB, so that every channel and head gets work.
NVLS_CHANNELS = 16
NVLS_CHUNK_STEPS = ((64, 64 * 1024), (8, 32 * 1024), (2, 16 * 1024))
# NVLSTree's chunk (enqueue.cc calcCollChunking, NCCL 2.26-2.30): nvlsChunkSize, at most
# 64 KiB on 4 or more nodes (NCCL_NVLSTREE_MAX_CHUNKSIZE default), then cut to 256/128/64/32 KiB
# for messages below 32/16/4/1 x concurrentOps x chunk. Each chunk crosses the switch, climbs
# and descends the binary tree over the network and crosses the switch again: a pipeline.
NVLSTREE_MAX_CHUNK_4NODES = 64 * 1024
# What one NVLS channel of an NVLSTree carries at most, GB/s, by node-count class (N1/N2/N4):
# tuning.cc perChMaxNVLSTreeBws (Blackwell's N4: 43.1 in 2.28.3, 43.8 in 2.29, 80.0 at
# 5067397). NCCL's model caps NVLSTree's per-channel bandwidth with it over the NVLS graph's
# channels, one per head: a GPU next to a NIC, at most NCCL_MAX_NVLS_ARITY (search.cc
# ncclTopoCompute/ncclTopoSearchRec; device.h NCCL_MAX_NVLS_ARITY 32). H100 across nodes with
# a NIC per GPU: 8 x 57.7 = 462 GB/s busbw on 2 nodes, 8 x 45.5 = 364 beyond. gpucomm times
# every NCCL release's NVLSTree with it, not only 2.28's on: that release added it as
# "NVLSTree tuning fixes. Update tuning data for H100, GB200-NV72" (v2.28.3-1 release notes),
# a correction of the prediction, not a change of the algorithm.
NVLSTREE_PER_CHANNEL_BW = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
                           "hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 80.0)}
NVLS_MAX_ARITY = 32
NVLSTREE_CHUNK_STEPS = ((32, 256 * 1024), (16, 128 * 1024), (4, 64 * 1024), (1, 32 * 1024))

# Per-message software overhead on network paths: NCCL_NET_OVERHEAD = 1 us (Intel), x3 for
# Simple (tuning.cc). A slice cannot go faster than one message per overhead.
NET_MESSAGE_OVERHEAD_S = {"ll": 1.0 * US, "ll128": 1.0 * US, "simple": 3.0 * US}
# Rings across nodes (tuning.cc ncclTopoTuneModel, "inter-node rings still have to launch
# nsteps * net overhead"): every step of such a ring, NVLink ones included, costs at least the
# per-message network overhead above. And ncclTopoGetAlgoTime's "plateau effect of ring": a
# Simple all-reduce ring across nodes whose per-channel, per-rank share is at least 64 B has its
# latency multiplied by 1.4 (compute capability >= 8.0) or 1.9 (older GPUs).
#
# Ours, beyond NCCL's tuner: every step of a ring across nodes costs at least a whole network
# step (hwLatencies[NET][Ring][proto] above, or the NIC stack's floor), not just its overhead.
# Not derived from NCCL's source (its data dependencies alone would add the hops' latencies
# along the ring); it is what the published rings across nodes show, none of them fitted:
# all-reduce rings on 2 x 8 H100 over NDR level off at ~155 us from 1 to 4 MiB (nccl-tests
# #309, NCCL_ALGO=Ring), twice NCCL's own latency and 30 steps x 4 us + 14 us; all-gather and
# reduce-scatter on 10 nodes x 4 and x 8 H100 (xxrjun) exceed the data term by ~2.5 and ~4 us a
# step at 32-64 MiB, as 39 and 79 steps at the network's pace do. A consequence to keep in mind:
# no step of a ring over 2+ nodes is faster than the network's, however fast NVLink is.
#
# Not at the smallest sizes: there NCCL runs the ring on one channel (protocol.ring_channels)
# and a message's critical path crosses the network only at the node boundaries, as NCCL's own
# model has it (tuning.cc: nInterSteps = 2 nNodes at the network latency, the other steps at the
# intra-node one) and AWS's tuner for EFA too (aws-ofi-nccl src/tuner/nccl_ofi_model.cpp,
# NCCL_ALGO_RING: num_internode_steps x net_lat + the rest x the NVLink latency, net_lat 20 us).
# Such a crossing pays the NIC kind's latency (NET_STACK_LATENCY_S), not a NIC's measured step
# floor (catalog stack_latency_us, measured on a tree). Published 2-node EFA rings of 8 B:
# p3dn (NCCL 2.4.8) 137 us and p4d (NCCL 2.7.8, held out) 159 us, 30 steps of which 4 cross:
# ~22-31 us a crossing, where 30 steps at p4d's 70 us step would be ~2 ms.
# Our reading of why more channels change it: one proxy thread per GPU (src/proxy.cc) serves
# every channel's network messages in turn, so with many channels a step's messages queue
# behind each other at the node's exit GPUs; with one there is no queue. A reading, not a
# derivation: the mid-size tables above (several channels) are what shows the pace.
# Simple is paced otherwise (issue 23). Its hwLatencies[NET][Ring][Simple] = 14 us is a step's
# one-shot latency: isend, the receiver's completion, the GDR flush (tuning.cc adds
# graphs[a]->latencyInter again for Simple: "Also add the flush extra latency") and the tail
# handed back to the GPU; transport/net.cc's sendProxyProgress / recvProxyProgress keep up to
# NCCL_STEPS (8, device.h) such slices in flight per connection, so across the slices of a
# ring that latency overlaps. What a step cannot overlap is the proxy's per-message work,
# tuning.cc's getNetOverhead x3 for Simple ("inter-node rings still have to launch nsteps *
# net overhead"), done by the one proxy thread of the exit GPU (proxy.cc) for each channel
# that leaves by its NIC in turn: NCCL's collective channels across nodes over the node's
# NICs (nccl_tuning.coll_channels_per_nic; 2 on every catalog node: connect.cc's
# ncclTopoPostset doubles the search's one channel per NIC). Judged on the held-out logs it
# was not chosen on: sophia-a100 (2 x 8 A100, NCCL 2.22.3) ran 862 / 1422 us at 64 / 128 MiB
# where 30 steps at 14 us gave 1165 / 1707 (its rows fit 3-7 us a step; xxrjun's 10 x 8 H100,
# beyond a 12% bandwidth gap, ~5-6 us). benchmarks/calibration.py --published 9.2% / 18.8% ->
# 9.0% / 18.3% (sophia 12.8 / 8.9% -> 7.2 / 5.5%, NICs fitted at 0.9 instead of 1.0;
# polaris-nccl2.18 1-64 MiB 59.9 -> 29.8%); uncalibrated (benchmarks/accuracy.py) the
# multi-node class at >= 64 MiB 8.6% -> 9.2% (7.7% -> 9.5% with --select nccl; NCCL's model
# 10.6%): xxrjun's bandwidth gap, which the 14 us pace partly hid. At NCCL's overhead alone
# (3 us, no queue) it went to 10.4% / 11.0%, and the calibrated 1-64 MiB bar to 18.3%.
RING_STEP_AT_NET_PACE = True
RING_PACE_PER_MESSAGE = ("simple",)  # paced by the proxy's messages (above)
# NCCL's ring channel tuning (enqueue.cc; comm.h NCCL_{LL,LL128,SIMPLE}_THREAD_THRESHOLD 8 / 8 /
# 64 bytes a thread, devcomm.h NCCL_{LL,LL128,SIMPLE}_MAX_NTHREADS 512 / 640 / 512): (threads,
# threshold) per protocol; tuning.cc multiplies the ring's LL threshold by nRanks.
RING_THREADS = {"ll": (512, 8), "ll128": (640, 8), "simple": (512, 64)}
RING_PLATEAU_FACTOR = {"volta": 1.9}
RING_PLATEAU_FACTOR_DEFAULT = 1.4
RING_PLATEAU_MIN_BYTES = 64
# A ring step moves one chunk per channel (enqueue.cc calcCollChunking and the ring kernels):
# Simple chunks are chunkSteps = NCCL_STEPS/2 = 4 slots of 512 KiB, sent as 2 slices (sliceSteps
# = NCCL_STEPS/4); LL128 and LL one slot (576000 and 32 KiB of payload). A smaller message cuts
# the chunk to nBytes / (nChannels x nRanks). Over the network the proxy sends one message per
# slice (transport/net.cc), each paying the per-message overhead above: (chunk payload, slices).
RING_CHUNK_BYTES = {"simple": (4 * 512 * 1024, 2), "ll128": (614400 * 120 // 128, 1),
                    "ll": (32 * 1024, 1)}
# Broadcast and reduce (NCCL's pipelined chain along the ring, device/broadcast.h and reduce.h)
# move one step-sized chunk at a time: collectives.h BROADCAST_CHUNKSTEPS = BROADCAST_SLICESTEPS
# = REDUCE_CHUNKSTEPS = REDUCE_SLICESTEPS = 1, so enqueue.cc calcCollChunking gives chunkSize =
# stepSize = buffSize / NCCL_STEPS: Simple 4 MiB / 8 = 512 KiB, LL 64 KiB halved to 32 KiB of
# payload, LL128 614400 x 120/128. Each channel carries its own contiguous share of the buffer
# (ncclCollCbdPart) in chunks of that size, pipelined hop by hop: (chunk payload, slices).
CHAIN_CHUNK_BYTES = {"simple": (512 * 1024, 1), "ll128": (614400 * 120 // 128, 1),
                     "ll": (32 * 1024, 1)}
CHAIN_COLLECTIVES = ("broadcast", "reduce")
# What a GPU in the middle of the chain forwards at a time, the chain's pipeline unit. Simple
# waits for a whole slice (one chunk: prims_simple.h waits on the step, then copies it). LL and
# LL128 forward as they read, one trip of the block's threads at a time: prims_ll.h LLGenericOp
# moves eltPerTrip = nthreads x one 8-byte datum (per 16-byte line); prims_ll128.h GenericOp
# moves per warp 32 x NCCL_LL128_SHMEM_ELEMS_PER_THREAD (8) words of which 15/16 are data,
# 1920 B, i.e. 60 B a thread. Payload bytes per thread of one trip:
CHAIN_TRIP_BYTES_PER_THREAD = {"ll": 8, "ll128": 60}

# A network step's latency where NCCL talks to the NIC through a libfabric plugin rather than
# IB verbs, by NIC kind: AWS's own tuner for aws-ofi-nccl on EFA (include/nccl_ofi_tuner.h,
# TUNER_NET_LATENCY = 20 us per inter-node step, plus TUNER_NET_COMP_OVERHEAD = 3 us for Simple:
# "~2 us in the device and ~1 us to write that completion up to the host stack"). It stands in
# for NCCL's hwLatencies[NET] (measured on InfiniBand) where larger. Slingshot's cxi provider
# has no such published figure and keeps NCCL's.
NET_STACK_LATENCY_S = {"efa": 20.0 * US}
NET_STACK_COMPLETION_S = {"efa": 3.0 * US}

# Slice (message) size per protocol and channel. Simple: NCCL_BUFFSIZE 4 MiB split into
# NCCL_STEPS = 8 slots -> 512 KiB per slot. LL: NCCL_LL_LINES_PER_THREAD 8 x 512 threads x 16 B
# = 64 KiB per slot (half of it payload). LL128: NCCL_LL128_ELEMS_PER_THREAD 120 x 640 threads
# x 8 B ~ 600 KiB per slot.
SLICE_BYTES = {"ll": 64 * 1024, "ll128": 600 * 1024, "simple": 512 * 1024}

# What NCCL's tuning adds to an intra-node step of a ring across nodes (tuning.cc, v2.18.1-1
# on): intraLat = max(intraLat, netOverhead), getNetOverhead 1 us on x86 Intel (2 on AMD; the
# tables rarely say), x3 for Simple; and the factor on LL's intra-node latency across nodes,
# which it replaced (versions.py: 1.8 from v2.7.3-1 to v2.17.1-1)
NET_OVERHEAD_US = 1.0
LL_MULTI_NODE_INTRA_FACTOR = 1.0

# The share of the ring graph's bandwidth NCCL's tuning rates ring/LL at (tuning.cc, before
# llMaxBws caps it): (across nodes, or an all-reduce or reduce; else). v2.21.5-1 on: busBw * .5
# for all; versions.py has the older 1/4 and 1/3.
RING_LL_BUSBW_SHARE = (0.5, 0.5)

# Bandwidth caps per GPU generation and node count class (N1: 1 node, N2: 2 nodes, N4: more),
# GB/s. llMaxBws is a cap on the whole LL collective's bus bandwidth; perChMaxRingLL128Bws caps
# one LL128 channel (tuning.cc).
LL_MAX_BW = {"volta": (39.0, 39.0, 20.4), "ampere": (87.7, 22.5, 19.0),
             "hopper": (141.0, 45.0, 35.0), "blackwell": (282.0, 90.0, 70.0)}
# Across nodes NCCL picks the llMaxBws row by the host CPU, not the GPU ("LL: for single node,
# we look at GPU type; for multi-node, we look at CPU type", tuning.cc): row 0 (Intel, and any
# CPU not AMD) or row 1 (AMD). The catalog does not say the CPU vendor, so NCCL's default row.
LL_MAX_BW_MULTI_NODE = LL_MAX_BW["volta"]
# The share of the ring graph's bandwidth NCCL's tuning rates ring/LL128 at, before
# perChMaxRingLL128Bws caps it: (one GPU a node, else). v2.23.4-1 on (tuning.cc: busBw * 0.92);
# versions.py has the 0.7 at ppn < 2 of v2.7.3-1 .. v2.22.3-1.
RING_LL128_BUSBW_SHARE = (0.92, 0.92)
LL128_PER_CHANNEL_BW = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0),
                        "hopper": (36.7, 36.7, 36.7), "blackwell": (40.0, 40.0, 40.0)}

# LL128 is enabled by default only where NCCL trusts the ordering of 128-byte stores: NVLink
# (and on Hopper/Blackwell up to PXN paths). Over PCIe-through-host and on pre-Volta it is off.
LL128_GENERATIONS = ("volta", "ampere", "hopper", "blackwell")
# Across nodes LL128 also needs the GPU near its NIC (tuning.cc: typeInter <= PATH_PXB, or
# <= PATH_PXN on Hopper and newer). From v2.27.3-1 NCCL_LL128_C2C (default 1) admits PATH_P2C
# too, a GPU reaching its NIC over its C2C link to a Grace (GH200, GB200); before, such a path
# was PHB and LL128 stayed off there (versions.py).
LL128_C2C = True

# Channels NCCL runs for a collective: enough that the per-channel caps do not bind, at least
# one per NIC rail (search.cc: rings are searched per NIC; nccl's defaults reach 16-32 channels on
# NVSwitch systems). MAXCHANNELS = 32.
MAX_CHANNELS = 32

# SM architecture -> generation for the tables above.
GENERATION_OF_SM = {"sm70": "volta", "sm75": "volta", "sm80": "ampere", "sm86": "ampere",
                    "sm89": "ampere", "sm90": "hopper", "sm100": "blackwell",
                    # AMD MI300X (CDNA 3, gfx942), run by RCCL: no entry in the tables above,
                    # so its caps fall back to DEFAULT_GENERATION's; it is not in
                    # LL128_GENERATIONS (RCCL enables LL128 only where a topology model or
                    # RCCL_LL128_FORCE_ENABLE says so: init.cc ll128Enabled = false) and has
                    # no NVLS (no switch, NVLS_EFFICIENCY 0)
                    "gfx942": "cdna3"}
DEFAULT_GENERATION = "hopper"

# --- the host: issuing one collective -------------------------------------------------------
# nccl-tests times `iters` collectives launched back to back by the host and divides the host
# clock around the loop (closed by one stream synchronisation) by `iters` (the loop of
# src/common.cu, quoted in NVIDIA/nccl-tests issue #72), so a collective cannot appear faster
# than the host issues it. A process driving G GPUs from one thread (`-g G`) issues, inside
# ncclGroupStart/End, one NCCL launch per GPU in turn (NCCL user guide, "Group Calls:
# management of multiple GPUs from one thread"): G launches per collective. One launch costs
# the host a cudaLaunchKernel and NCCL's enqueue; Meta's Holistic Trace Analysis documentation
# ("CUDA kernel launch stats") gives 5-20 us for a launch's CPU-side runtime event: the low end
# is taken, as NCCL's launch path is a tuned one. With CUDA graphs (`-G`) the loop is replayed
# from a graph and the per-launch host cost is gone. With one GPU per process the host cost is
# below the device time of any collective (NCCL's own base latency alone is 6.6-14 us), so it
# only shows with several GPUs per thread: ~40 us for 8 GPUs, what nccl-tests -g 8 tables on
# DGX V100/A100/H100 show at small sizes where -g 1 runs on the same systems show 17-25 us.
HOST_LAUNCH_S = 5.0 * US

# --- point-to-point (send/recv, all-to-all): NCCL's p2p channel rules -------------------------
# How many channels one send or receive to a peer runs on, and what one such channel carries.
# graph/paths.cc ncclTopoGetNchannels: a network peer gets max(local NICs, ceil(NIC GB/s /
# NCCL_P2P_PER_CHANNEL_NET_BW)) channels, an NVLink peer 2·max(1, path bw / ncclTopoNVLinkBw),
# a PCIe peer 2; the minimum over all peers is rounded up to a power of two
# (ncclTopoComputeP2pChannelsPerPeer/ncclTopoComputeP2pChannels), and across nodes halved while
# perPeer x ceil(nRanks / NCCL_MAX_DEV_WORK_P2P_PER_BATCH) exceeds the p2p channel count.
P2P_NET_CHANNEL_GBPS = 14.0  # paths.cc NCCL_P2P_PER_CHANNEL_NET_BW default (GB/s per channel)
P2P_PER_BATCH = 8  # device.h NCCL_MAX_DEV_WORK_P2P_PER_BATCH
# topo.h SMxx_NVLINK_BW: NCCL's bandwidth of one NVLink channel by SM (ncclTopoNVLinkBw), GB/s;
# a p2p channel over NVLink carries that much (one CUDA block copying).
P2P_NVLINK_CHANNEL_GBPS = {"sm60": 18.0, "sm70": 20.0, "sm75": 20.0, "sm80": 20.0, "sm86": 12.0,
                           "sm89": 20.0, "sm90": 20.6, "sm100": 40.1}
# init.cc p2pChunkSize: NCCL_P2P_NET_CHUNKSIZE (several nodes), NCCL_P2P_NVL_CHUNKSIZE (one
# all-NVLink node), NCCL_P2P_PCI_CHUNKSIZE (otherwise).
P2P_NET_CHUNK = 128 * 1024
P2P_NVL_CHUNK = 512 * 1024
P2P_PCI_CHUNK = 128 * 1024
# The channels NCCL's ring search leaves a communicator (p2pnChannels = pow2Up(nChannels)):
# one node over NVLink reaches MAXCHANNELS (32, as NCCL_DEBUG shows on DGX/HGX nodes); across
# nodes the search finds one ring per NIC rail, search.cc duplicates it (x2) and connect.cc
# doubles it again (x2), up to the 16 channels the model runs NVSwitch nodes at; a PCIe node
# without NVLink gets the same 4 per search ring (one ring).
P2P_CHANNELS_ONE_NODE_NVLINK = 32
P2P_CHANNELS_PER_RAIL = 4
P2P_CHANNELS_MULTI_NODE_MAX = 16
# enqueue.cc addP2pToPlan: p2p runs LL or Simple only (no LL128), LL while an operation is at
# most nChannels x NCCL_P2P_LL_THRESHOLD bytes.
P2P_LL_THRESHOLD = 16384
# enqueue.cc addP2pToPlan, over the network with Simple: the chunk is p2pChunkSize, a quarter of
# it for an operation smaller than one chunk, half of it for one smaller than 8 chunks.
P2P_NET_SMALL_CHUNK_DIV = ((1, 4), (8, 2))
# init.cc ncclP2pSchedule: across nodes the p2p rounds come in groups of
# NCCL_P2P_SCHEDULE_GROUP_SIZE (default NCCL_MAX_DEV_WORK_P2P_PER_BATCH = 8) ranks, cut to the
# gcd with the GPUs of each node; inside one node a group is the node's ranks. channel.h
# ncclP2pChannelBaseForRound gives every group (across nodes) or round (one node) one base
# channel, bit-reversed over the p2p channels.
P2P_SCHEDULE_GROUP_SIZE = 8
# The pipeline fill of a batch (ours, assembled from NCCL's structure, not a fitted number):
# a p2p chunk passes through the connection's staging FIFO, so besides the link stage that the
# bandwidth term counts, the first chunk's copy into the FIFO (over the network: the sender's
# copy into its send buffer, prims directSend) and the last chunk's copy out of it (the
# receiver's, directRecv) are not overlapped with anything; over NVLink or PCIe the sender's
# write is the link stage and only the receiver's copy is extra. A channel (one CUDA block)
# runs its batches one after another (device/common.h ncclKernelMain, a __syncthreads between
# batches) and splits its warps evenly over the k operations of a batch (sendrecv.h
# nWarpPerWork = nWarps / nWorks), so a batch's fill is k chunks through each extra stage at
# the channel's rate (P2P_NET_CHANNEL_GBPS, P2P_NVLINK_CHANNEL_GBPS) plus one hop latency of
# the path (HOP_LATENCY_S simple); the busiest channel pays the fill of each of its batches.
P2P_FILL_STAGES = {"net": 2, "nvlink": 1, "pcie": 1}
# The proxy's cost of one network p2p operation. Every send or receive to a peer across nodes
# is a proxy operation, even one of 0 bytes (enqueue.cc v2.22.3 taskAppend keeps empty p2p
# tasks; addP2pToPlan, enqueue.cc:948, gives a 0-byte part nsteps = 1), one per channel part,
# and one proxy thread per GPU (proxy.cc:632 progressOps) takes them in turn: ProxyAppend
# (proxy.cc:404) groups a batch's operations as the subs of one args and net.cc
# sendProxyProgress/recvProxyProgress (net.cc:1043, 1197) post one ncclNet isend/irecv per sub,
# each to its own peer's comm, so none is grouped with another. On the GPU the operations of a
# batch run side by side (sendrecv.h splits the block's warps over them), so with one batch of
# network peers per channel (2 nodes) the device does not serialise them; the proxy does.
# Chosen on ALCF Sophia's all-to-all at 0 B (2 x 8 A100, NCCL 2.22.3: 50 us over 16 network
# operations a GPU, ~2.7 us each after the first operation's own base + hop of 9.3 us); equal to
# tuning.cc hwLat[NET][Ring][LL] = 2.7 us (2.18 through 2.28), NCCL's cost of one LL network step.
P2P_PROXY_OP_S = 2.7 * US
