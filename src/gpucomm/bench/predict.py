"""The `predicted` column: the simulator's time for this host.

`gpucomm bench --calibrate` measures two numbers and saves them (~/.cache/gpucomm/host.yaml):
the memory bandwidth one rank gets copying from a peer's shared buffer into its own memory,
and the latency of one shared-memory op (a 1-op broadcast of 8 bytes between 2 ranks, so it
includes the runtime's per-call synchronisation). The host becomes a topology of P ranks
around one CPU: rank -> cpu -> rank, each direction a link of that bandwidth and half that
latency; the schedule the runtime ran is then timed on it by `gpucomm.simulate` with the pure
alpha-beta protocol (no GPU protocol overheads). Reductions are costed as copies.
"""
from __future__ import annotations

import os
import time

import yaml

from ..errors import ConfigError

DEFAULT_PATH = os.path.join(os.path.expanduser("~"), ".cache", "gpucomm", "host.yaml")


def host_path() -> str:
    return os.environ.get("GPUCOMM_HOST_YAML", DEFAULT_PATH)


def host_topology(nranks: int, bandwidth_Bps: float, latency_s: float):
    """P rank processes around one host CPU (a star through memory)."""
    from ..topology import Device, Link, Topology
    cpu = Device("host.cpu", "cpu", 0, "host")
    ranks = [Device(f"host.rank{k}", "gpu", 0, "") for k in range(nranks)]
    links = []
    for d in ranks:
        links.append(Link(d.name, cpu.name, bandwidth_Bps, latency_s / 2, "host-memory"))
        links.append(Link(cpu.name, d.name, bandwidth_Bps, latency_s / 2, "host-memory"))
    return Topology("host", (cpu, *ranks), tuple(links), tuple(d.name for d in ranks),
                    gpus_per_node=nranks, nodes=1)


def load_host(path=None) -> dict | None:
    path = path or host_path()
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except FileNotFoundError:
        return None
    for key in ("bandwidth_Bps", "latency_s"):
        try:  # YAML 1.1 reads 1e9 (no dot) as a string
            data[key] = float(data.get(key))
        except (TypeError, ValueError):
            data[key] = -1.0
        if not data[key] > 0:
            raise ConfigError(f"{path}: {key} must be a number > 0 (run `gpucomm bench "
                              f"--calibrate` again)")
    return data


def measure_bandwidth(nbytes: int = 64 << 20, repeats: int = 5) -> float:
    """Bytes/s one core copies from a shared-memory segment into private memory."""
    import numpy as np
    from ..runtime.segment import Segment
    seg = Segment.create(nbytes)
    try:
        seg.unlink()
        src = np.frombuffer(seg.mm, np.uint8, nbytes)
        src[:] = 1
        dst = np.empty(nbytes, np.uint8)
        dst[:] = 0
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            best = min(best, time.perf_counter() - t0)
        del src
    finally:
        seg.close()
    return nbytes / best


def calibrate(path=None) -> tuple[str, dict]:
    from . import run_bench
    bw = measure_bandwidth()
    rows = run_bench("shm", 2, "broadcast", [8], algorithm="ring", iters=2000, warmup=200,
                     check=0)
    lat = min(rows[0]["time_us"], rows[0]["ip_time_us"]) * 1e-6
    host = {"bandwidth_Bps": float(bw), "latency_s": float(lat), "cores": os.cpu_count(),
            "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "method": "bandwidth: np.copyto of 64 MiB from a shm segment, best of 5; latency: "
                      "8-byte 1-op broadcast between 2 shm ranks, 2000 iterations"}
    path = path or host_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        yaml.safe_dump(host, f, sort_keys=False)
    return path, host


def add_predictions(rows: list, collective, nranks: int, algorithm: str = "auto") -> str:
    """Fill `predicted_time_us` in place; returns a note for the table's footer."""
    for r in rows:
        r["predicted_time_us"] = None
    host = load_host()
    if host is None:
        return f"run `gpucomm bench --calibrate` once to measure this host ({host_path()})"
    try:
        from ..simulate import simulate
        from ..simulate.protocol import ideal_protocol
    except ImportError as e:
        return f"simulator unavailable ({e})"
    from ..algorithms import REGISTRY, build
    from ..collectives import get_collective
    from ..runtime.communicator import choose_algorithm
    coll = get_collective(collective).name
    topo = host_topology(nranks, host["bandwidth_Bps"], host["latency_s"])
    for r in rows:
        name = r["algorithm"] if (coll, r["algorithm"]) in REGISTRY else \
            choose_algorithm(coll, r["size"], nranks)
        sched = build(coll, name, nranks, root=max(r.get("root", 0), 0))
        res = simulate(sched, topo, r["size"], dtype=r["type"], protocol=ideal_protocol())
        r["predicted_time_us"] = res.time_s * 1e6
        r["predicted_algorithm"] = name
    return (f"simulated on this host: {host['bandwidth_Bps'] / 1e9:.2f} GB/s, "
            f"{host['latency_s'] * 1e6:.1f} us per op (calibrated {host.get('measured', '?')})")
