"""The `predicted` column: the simulator's time for this host.

What the shm runtime spends its time on is memory traffic: every byte a rank receives is
copied by that rank's core (a load from the peer's buffer, a store into its own), a reduction
loads two operands and stores one, and ranks copy their own input to their output too.
`hostcal` measures the rates of those on this host with every core busy (`gpucomm bench
--calibrate`, or a quick run the first time) and saves them in ~/.cache/gpucomm/host.yaml.

The host becomes a topology of P ranks around one CPU: rank -> cpu -> rank, where the link
into a rank is that rank's core (the reader does the copy in a pull transport) and the link
out of a rank is not a limit. Its bandwidth is *effective*: the runtime's compiled plan for
this call (`runtime.plan.plan_call`, which the shm transport calls too, with the same
`RuntimeOptions`) says exactly which copies and reductions each rank executes, staging
copies and local copies included; their cost at the calibrated rates, on the busiest rank,
divided into the bytes that rank receives in the schedule, is the link bandwidth. The
simulator then times the schedule (latency per op, dependencies, overlap) on that topology
with the pure alpha-beta protocol. Which rates apply depends on the bytes each rank touches
in the call (its input, output and staging buffer): copies and reductions at the calibrated
curve's rates for that many bytes; what a direct plan moves by cross-memory attach at that
curve (`cma_curve`), and copies out of what a peer staged at theirs (`shared_curve`).
Calibrations from before the curves price by the cached fraction of the working set against
the last-level cache, as they did.

The simulator itself has no notion of a local copy or of a reduction's cost (local ops are
free, every op costs bytes / link bandwidth); the effective bandwidth is how this module
charges them. It is exact when each rank's work is spread evenly over the bytes it receives
(symmetric schedules: all of the `auto` choices on 2 ranks).
"""
from __future__ import annotations

import math
import os
import sys

import yaml

from ..errors import ConfigError
from ..runtime.options import RuntimeOptions, current, env_host_yaml

DEFAULT_PATH = os.path.join(os.path.expanduser("~"), ".cache", "gpucomm", "host.yaml")
FORMAT = 2
UNLIMITED_Bps = 1e15  # the link out of a rank: reading a peer costs the reader, not the owner


def host_path() -> str:
    return env_host_yaml(DEFAULT_PATH)


def host_topology(nranks: int, bandwidth_Bps: float, latency_s: float,
                  out_bandwidth_Bps: float | None = None):
    """P rank processes around one host CPU (a star through memory).

    `bandwidth_Bps` is the link into each rank (its core copying in), `out_bandwidth_Bps`
    the link out (default: the same)."""
    from ..topology import Device, Link, Topology
    cpu = Device("host.cpu", "cpu", 0, "host")
    ranks = [Device(f"host.rank{k}", "gpu", 0, "") for k in range(nranks)]
    out_bw = bandwidth_Bps if out_bandwidth_Bps is None else out_bandwidth_Bps
    links = []
    for d in ranks:
        links.append(Link(d.name, cpu.name, out_bw, latency_s / 2, "host-memory"))
        links.append(Link(cpu.name, d.name, bandwidth_Bps, latency_s / 2, "host-memory"))
    return Topology("host", (cpu, *ranks), tuple(links), tuple(d.name for d in ranks),
                    gpus_per_node=nranks, nodes=1)


def load_host(path=None) -> dict | None:
    """The saved calibration, or None if there is none. Format 1 files (bandwidth_Bps and
    latency_s only) still load: every op then costs its bytes at that bandwidth."""
    path = path or host_path()
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except FileNotFoundError:
        return None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a calibration file (run `gpucomm bench --calibrate`)")
    for key in ("bandwidth_Bps", "latency_s"):
        value = data.get(key)
        try:  # YAML 1.1 reads 1e9 (no dot) as a string
            data[key] = float(value) if isinstance(value, (int, float, str)) else -1.0
        except ValueError:
            data[key] = -1.0
        if not data[key] > 0:
            raise ConfigError(f"{path}: {key} must be a number > 0 (run `gpucomm bench "
                              f"--calibrate` again)")
    try:  # the small-message path's (absent: calibrated before it, or without it)
        ll = (float(data["ll_latency_s"]), float(data["ll_Bps"]))
        data["ll_latency_s"], data["ll_Bps"] = ll if min(ll) > 0 else (None, None)
    except (KeyError, TypeError, ValueError):
        data["ll_latency_s"] = data["ll_Bps"] = None
    if data.get("format") == FORMAT:
        try:
            data["rates"] = {int(p): {k: _curve(v) if k == "curve" else float(v)
                                      for k, v in r.items()}
                             for p, r in data["rates"].items()}
            data["cache_bytes"] = float(data.get("cache_bytes") or 0)
            for key in ("cma_curve", "shared_curve"):
                if data.get(key) is not None:
                    data[key] = _curve(data[key], 2)
        except (AttributeError, KeyError, TypeError, ValueError):
            raise ConfigError(f"{path}: malformed `rates` table, `cma_curve` or "
                              f"`shared_curve` (run `gpucomm bench --calibrate` again)") from None
    return data


def _curve(points, width: int = 3) -> list:
    """A saved curve as sorted [bytes, rate, ...] points of `width` numbers, every one > 0."""
    curve = sorted([float(x) for x in p] for p in points)
    if not curve or any(len(p) != width for p in curve) or min(min(p) for p in curve) <= 0:
        raise ValueError("a curve needs points of numbers > 0")
    return curve


def ll_time(host: dict, nbytes: int, nranks: int) -> float:
    """Seconds of an all-reduce on the small-message path: the calibrated 8-byte call, plus
    the bytes of every peer's lines at the calibrated rate."""
    return host["ll_latency_s"] + max(nbytes - 8, 0) * (nranks - 1) / host["ll_Bps"]


def load_warning(host: dict, path: str) -> str | None:
    """One line when the calibration was taken with a 1-minute load average above the cores
    it could use (other jobs then slowed every rate it measured); None otherwise, and for
    calibrations that did not record it."""
    load, cores = host.get("load_1min"), host.get("usable_cores")
    if not isinstance(load, (int, float)) or not isinstance(cores, int) or load <= cores:
        return None
    return (f"gpucomm: warning: the host calibration {path} was taken under load (1-minute "
            f"load average {load:.2f} on {cores} usable cores, {host.get('measured', '?')}): "
            f"predictions may be far off; run `gpucomm bench --calibrate` on a quiet machine")


# --- the model ---------------------------------------------------------------------------
def rank_rates(host: dict, nranks: int, working_set: float) -> tuple[float, float, float]:
    """(copy, reduce, streaming copy) bytes/s of one of `nranks` busy ranks for a call
    touching `working_set` bytes in all. More ranks than cores share them. (A calibration
    without a streaming rate, from before the runtime streamed, uses the copy rate.)"""
    rates = host["rates"]
    cores = max(rates)
    r = rates[min(nranks, cores)]
    share = min(1.0, cores / nranks)  # oversubscribed: a core's time is split
    if r.get("curve"):
        copy, red = _on_curve(r["curve"], working_set / nranks)
        return share * copy, share * red, share * r.get("stream_Bps", r["copy_Bps"])
    llc = host.get("cache_bytes") or 0
    # Streaming through more than the cache evicts what the next pass needs, so the cached
    # fraction falls fast: all of it up to the cache size, nothing from twice the size on.
    hit = min(1.0, max(0.0, 2.0 - working_set / llc)) if llc else 0.0

    def blend(mem, cache):  # time per byte adds: the cached part fast, the rest slow
        return share / (hit / cache + (1 - hit) / mem)
    return (blend(r["copy_Bps"], r["copy_cache_Bps"]),
            blend(r["reduce_Bps"], r["reduce_cache_Bps"]),
            share * r.get("stream_Bps", r["copy_Bps"]))


def _on_curve(curve: list, footprint: float) -> tuple:
    """The rates (bytes/s: copy and reduce, or cross-memory attach's) of a process touching
    `footprint` bytes, from a calibrated curve (points: a process's bytes, then its rates):
    time per byte interpolated in log(bytes) between the neighbouring points, the end
    points' rates beyond them."""
    if footprint <= curve[0][0]:
        return tuple(curve[0][1:])
    for lo, hi in zip(curve, curve[1:]):
        if footprint <= hi[0]:
            w = math.log(footprint / lo[0]) / math.log(hi[0] / lo[0])
            return tuple(1 / ((1 - w) / a + w / b) for a, b in zip(lo[1:], hi[1:]))
    return tuple(curve[-1][1:])


def plan_work(plan, itemsize: int, cma: bool = False, shared: bool = False) -> list[tuple]:
    """(copy-equivalent bytes, reduced bytes, streamed bytes) each rank executes in a
    compiled plan; with `cma`, then the bytes it moves by cross-memory attach, which leave
    the copy-equivalents (a reduction of what it reads so keeps one copy for its own operand
    and the store); with `shared`, then the bytes it copies out of a peer's shared buffer
    (staged: what the peer has just written there), which leave them too.

    Costs follow memory traffic, a copy moving each byte twice (load, store): a reduction
    with both operands in memory is a calibrated reduction; one whose peer operand is first
    read by cross-memory attach into a cache-sized buffer costs half a copy for that read
    (memory to cache) and a copy for the reduction (one operand and the store in memory); a
    write into the peer of what is still in cache (a result just reduced,
    `push.push_results`, or a block just copied, `push.push_copies`) is half a copy. A
    large local copy in a direct plan streams from the plan's `stream_min_bytes` (which
    `plan_call` set from the options). Every other copy is a copy.
    """
    from ..runtime.actions import PEER, PEER_OUT, fused_push, fused_result_push
    stream_min = plan.stream_min_bytes if plan.stream_min_bytes >= 0 else None
    work = []
    for acts in plan.actions:  # out of place: every copy is real (in place some are no-ops)
        copied = reduced = streamed = crossed = staged = 0.0
        prev = None
        for a in acts:
            nb = a.n * itemsize
            if a.share and a.dst == PEER_OUT:
                continue  # a shared transfer is costed as its reader's (the same bytes)
            if a.reduce and a.src.is_private:
                copied, crossed = (copied + nb, crossed + nb) if cma else (copied + 1.5 * nb,
                                                                           crossed)
            elif a.reduce:
                reduced += nb
            elif prev is not None and (fused_push(prev, a) or fused_result_push(prev, a)):
                if cma:
                    crossed += nb
                else:
                    copied += 0.5 * nb  # the write of what is still in cache
            elif plan.direct and not a.src.is_private and a.dst != PEER_OUT \
                    and stream_min is not None and nb >= stream_min:
                streamed += nb
            elif cma and (a.src.is_private or a.dst == PEER_OUT):
                crossed += nb
            elif shared and a.src == PEER:
                staged += nb
            else:
                copied += nb
            prev = a
        work.append((copied, reduced, streamed) + ((crossed,) if cma else ())
                    + ((staged,) if shared else ()))
    return work


def received_bytes(schedule, block_count: int, itemsize: int) -> list[int]:
    """Bytes each rank receives from other ranks in the schedule (what the links carry)."""
    bounds = schedule.chunk_bounds(block_count)
    got = [0] * schedule.nranks
    for st in schedule.steps():
        nb = (bounds[st.src_chunk + st.nchunks] - bounds[st.src_chunk]) * itemsize
        for s, d, b in zip(st.src.tolist(), st.dst.tolist(), nb.tolist()):
            if s != d:
                got[d] += b
    return got


def host_plan(host: dict, schedule, block_count: int, itemsize: int,
              options: RuntimeOptions | None = None):
    """The plan the runtime runs for this call on the calibrated host: `plan.plan_call`,
    the function the shm transport calls, with the same options."""
    from ..runtime.plan import plan_call
    options = current() if options is None else options
    return plan_call(schedule, block_count, itemsize, options, host_cma(host))


def host_cma(host: dict) -> bool:
    """Whether the calibrated host's runtime reads peers by cross-memory attach."""
    return host.get("format") == FORMAT and bool(host.get("cma", True))


def effective_bandwidth(host: dict, schedule, block_count: int, itemsize: int,
                        options: RuntimeOptions | None = None) -> float:
    """The link bandwidth at which the busiest rank's received bytes take as long as its
    copies and reductions in the runtime's plan at the calibrated rates."""
    coll, p = schedule.collective, schedule.nranks
    plan = host_plan(host, schedule, block_count, itemsize, options)
    ws = 0
    for r in range(p):
        for rng in (coll.inputs(r, p, schedule.root), coll.outputs(r, p, schedule.root)):
            ws += rng[1] * block_count * itemsize if rng else 0
    ws += p * plan.shm_elems * itemsize * (not plan.direct)
    copy_Bps, reduce_Bps, stream_Bps = rank_rates(host, p, ws)
    # cross-memory attach, and copies out of what a peer just staged, at their own
    # calibrated rates where the calibration has them
    share = min(1.0, max(host["rates"]) / p)
    cma_Bps, shared_Bps = (_on_curve(host[k], ws / p)[0] * share if host.get(k) and ok
                           else None for k, ok in (("cma_curve", plan.direct),
                                                   ("shared_curve", True)))
    extra = [b for b in (cma_Bps, shared_Bps) if b]
    work = [c / copy_Bps + r / reduce_Bps + st / stream_Bps
            + sum(nb / b for nb, b in zip(x, extra))
            for c, r, st, *x in plan_work(plan, itemsize, cma=cma_Bps is not None,
                                          shared=shared_Bps is not None)]
    got = received_bytes(schedule, block_count, itemsize)
    busiest = max(range(p), key=lambda r: work[r])
    if work[busiest] <= 0:
        return copy_Bps
    moved = got[busiest] or max(got)
    if moved <= 0:  # nothing crosses ranks (one rank): the simulator charges nothing anyway
        return copy_Bps
    return moved / work[busiest]


def add_predictions(rows: list, collective, nranks: int, algorithm: str = "auto",
                    options: RuntimeOptions | None = None) -> str:
    """Fill `predicted_time_us` in place; returns a note for the table's footer. With no
    saved calibration, a quick one runs first (about a second) and is saved. `options`: the
    runtime's (default: those in force, as the ranks read them)."""
    for r in rows:
        r["predicted_time_us"] = None
    path = host_path()
    host = load_host(path)
    fresh = ""
    if host is None:
        from .hostcal import calibrate
        try:
            path, _ = calibrate(quick=True)
            host, fresh = load_host(path), " just now, quick: `gpucomm bench --calibrate` " \
                                            "measures more carefully"
        except Exception as e:  # a prediction must never break the measurement
            return (f"no calibration and a quick one failed ({e}); run `gpucomm bench "
                    f"--calibrate` ({host_path()})")
        if host is None:
            return (f"a quick calibration saved nothing at {path}; run `gpucomm bench "
                    f"--calibrate`")
    warning = load_warning(host, path)
    if warning:
        print(warning, file=sys.stderr)
    try:
        from ..simulate import simulate
        from ..simulate.protocol import ideal_protocol
    except ImportError as e:
        return f"simulator unavailable ({e})"
    from ..algorithms import REGISTRY, build
    from ..collectives import get_collective, layout
    from ..dtypes import get_dtype
    from ..runtime.communicator import choose_algorithm
    from ..runtime.shm_ll import LL_DTYPES, LLRunner
    coll = get_collective(collective).name
    modern = host.get("format") == FORMAT
    options = current() if options is None else options
    reach = options.ll_max_bytes if LLRunner is not None else 0  # the small-message path's
    for r in rows:
        lay = layout(coll, r["size"], r["type"], nranks)
        isz = get_dtype(r["type"]).itemsize
        name = r["algorithm"] if (coll, r["algorithm"]) in REGISTRY else choose_algorithm(
            coll, r["size"], nranks, direct=host_cma(host), small_message_bytes=reach)
        sched = build(coll, name, nranks, root=max(r.get("root", 0), 0))
        if coll == "all_reduce" and name == "one_shot" and LLRunner is not None and \
                r["size"] <= options.ll_max_bytes and host["ll_latency_s"] and \
                r["type"] in LL_DTYPES:  # the runtime takes its small-message path
            r["predicted_time_us"] = ll_time(host, r["size"], nranks) * 1e6
            r["predicted_algorithm"] = name
            continue
        if modern:
            bw = effective_bandwidth(host, sched.materialize(), lay.block_count, isz, options)
            topo = host_topology(nranks, bw, host["latency_s"], UNLIMITED_Bps)
        else:
            topo = host_topology(nranks, host["bandwidth_Bps"], host["latency_s"])
        res = simulate(sched, topo, r["size"], dtype=r["type"], protocol=ideal_protocol())
        r["predicted_time_us"] = res.time_s * 1e6
        r["predicted_algorithm"] = name
    if not modern:
        return (f"simulated on this host: {host['bandwidth_Bps'] / 1e9:.2f} GB/s, "
                f"{host['latency_s'] * 1e6:.1f} us per op (calibrated "
                f"{host.get('measured', '?')}; an old calibration: every op costed as a copy, "
                f"run `gpucomm bench --calibrate`)")
    rr = host["rates"][min(nranks, max(host["rates"]))]
    return (f"simulated on this host: per rank with {min(nranks, max(host['rates']))} busy, "
            f"copy {rr['copy_Bps'] / 1e9:.1f} GB/s, reduce {rr['reduce_Bps'] / 1e9:.1f} GB/s "
            f"from memory ({rr['copy_cache_Bps'] / 1e9:.1f}/{rr['reduce_cache_Bps'] / 1e9:.1f} "
            f"in cache), streaming copy {rr.get('stream_Bps', rr['copy_Bps']) / 1e9:.1f} GB/s, "
            f"{host['latency_s'] * 1e6:.1f} us per op (calibrated "
            f"{host.get('measured', '?')}{fresh})")
