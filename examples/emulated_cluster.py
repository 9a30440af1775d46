"""Two emulated hosts x two ranks on this machine: namespaces, a 1 Gbit/s shaped link, a run.

    sudo PYTHONPATH=src python3 examples/emulated_cluster.py

Builds the cluster, measures the link, writes the topology YAML (for `gpucomm sim --topology`),
runs every all-reduce algorithm across the emulated hosts (torch transport over gloo) and
checks it; everything is removed on exit, even on an error.
"""
import subprocess
import sys

from gpucomm.emulate import ClusterSpec, EmulatedCluster, available

ok, why = available()
if not ok:
    sys.exit(f"cannot emulate a cluster here: {why}")
with EmulatedCluster(ClusterSpec(hosts=2, ranks_per_host=2, rate_bps=1e9)) as cluster:
    m = cluster.measure()
    print(f"link: {m.inter_bandwidth_Bps / 1e6:.1f} MB/s, {m.inter_latency_s * 1e6:.0f} us one-way")
    cluster.write_topology("emulated.yaml", m)
    procs = cluster.launch([sys.executable, "-m", "gpucomm.emulate.worker", "check"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for rank, (rc, out, err) in enumerate(cluster.wait(procs, timeout=120)):
        print(f"rank {rank}: " + (out.strip().splitlines() or [err.strip()[-300:]])[-1])
print("topology written to emulated.yaml: gpucomm sim all_reduce_perf --topology emulated.yaml")
