"""`calibrate`: fit a cluster's physical parameters from its own nccl-tests logs.

    >>> prof = calibrate(CalibrateRequest(tuple(requests)))          # doctest: +SKIP
    >>> prof.parameters                                              # doctest: +SKIP
    {'nic_efficiency': 0.68, 'network_latency_us': 6.1, 'intra_efficiency': 0.79}

Each test of each log is read as `doctor` reads it (the machine inferred, flags override).
Each parameter is fitted on the rows it governs, by re-predicting those rows on a Topology
built with the candidate value (topology.profile.apply_profile):
- intra_efficiency on single-node tests' rows of 64 MiB and more (NVLink / xGMI bound);
- call_sync_us, a cost each collective call pays on the GPUs beyond NCCL's baseLat, on
  single-node rows between 64 KiB and 64 MiB, wherever those rows are slower than the model,
  as network_sync_us below but once per call (whatever the collective's bytes or steps: on
  superbench's DGX A100 all five collectives take 72-77 us at 1 MiB); intra_efficiency is
  then fitted again with it in place. Only beside a fitted intra_efficiency;
- nic_efficiency on multi-node tests' rows of 64 MiB and more (network bound) that ran the
  algorithm the first of them ran: from a busbw rise larger than the rise before it on, NCCL
  switched algorithm (on 2 nodes, ring to tree: search.cc raises only a tree's bwIntra there
  and tuning.cc rates algorithms by bwIntra), which the model may not run; on every row of
  64 MiB and more where the model switches at the same size (Snellius: tree/LL128, at its
  SMs' per-channel cap, then tree/Simple, NIC-bound);
- network_latency_us on multi-node tests' rows of 64 KiB and less (latency bound), by
  bisection on the median predicted/measured time;
- network_sync_us, the per-step synchronisation cost across nodes, on multi-node rows between
  64 KiB and 64 MiB, wherever those rows are slower than the model: from the per-rank share
  where measured over predicted time rises most between two sizes of a test
  (network_sync_from_bytes: where the net plugin starts to synchronise each step; 0, every
  step, where no row rises against the one before it), by bisection on their median
  predicted/measured time; nic_efficiency is then fitted again with it in place (large
  messages pay it too). Only beside a fitted nic_efficiency. A step cost, not a per-call
  one: a run with more network steps (more ranks in a ring, more nodes in a tree) pays it
  more often.
A value outside what physics allows (a NIC above its line rate) is an error, not a profile.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from ..errors import ConfigError
from ..topology import Topology, build_topology
from ..topology.profile import Profile, apply_profile, catalog_values
from .doctor import DoctorRequest, diagnose

BIG = 64 << 20
SMALL = 64 << 10
MIN_ROWS = 2
MEANING = {
    "nic_efficiency": "fraction of the NICs' line rate the network delivers to NCCL",
    "network_latency_us": "one-way latency of a network hop per message, NIC + proxy + plugin",
    "intra_efficiency": "fraction of NVLink/xGMI nominal bandwidth GPUs reach inside a node",
    "network_sync_us": "synchronisation cost of one network step of a larger message "
                       "(rendezvous in the net plugin/provider), beyond the catalog's latency",
    "network_sync_from_bytes": "per-rank share of a collective from which each network step "
                               "pays network_sync_us",
    "call_sync_us": "synchronisation cost of one collective call on the GPUs beyond NCCL's "
                    "base latency (tuning.cc baseLat), paid once per call",
    "call_sync_from_bytes": "per-rank share of a collective from which each call pays "
                            "call_sync_us",
}
MAX_SYNC_US = 10000.0
# busbw rising this much between two sizes >= 64 MiB, and more than the doubling before, is an
# algorithm switch (Snellius's 2-node log: ring to tree at 512 MiB, busbw x1.08 then x1.27)
ALGO_SWITCH = 1.2
# busbw rising by less than this over a doubling of the size: the fixed cost is under ~15% of
# the larger row's time (t = a + s/B gives a rise of 2(a + s/B)/(a + 2s/B)), so the row is
# bandwidth-bound enough to fit a NIC rate on (ABCI's 2-node logs: x1.04-1.12 from 8 to 32 MiB,
# x1.29-1.37 at 4 MiB)
PLATEAU = 1.15


@dataclass(frozen=True)
class CalibrateRequest:
    requests: tuple  # DoctorRequest per test (machine flags already in them)


@dataclass
class _Test:
    req: DoctorRequest
    kw: dict  # build_topology arguments doctor inferred
    topo: Topology
    multi: bool
    collective: str  # what doctor read the log as (a log need not name its test)


def calibrate(creq: CalibrateRequest) -> Profile:
    tests = [_test(r) for r in creq.requests]
    machine = _one_machine(tests)
    single = [t for t in tests if not t.multi]
    multi = [t for t in tests if t.multi]
    params: dict[str, float] = {}
    details: dict[str, dict] = {}
    catalog = catalog_values(tests[0].topo)
    big_single = _rows(single, lambda r: r["size"] >= BIG)
    if len(big_single) >= MIN_ROWS and "intra_efficiency" in catalog:
        params["intra_efficiency"] = _fit_scale(single, params, "intra_efficiency",
                                                catalog["intra_efficiency"], _big)
    # the same beside a fitted NVLink/xGMI rate, once per call
    call = _fit_sync(single, params, "call_sync") if "intra_efficiency" in params else None
    if call is not None:
        params.update(call)
        params["intra_efficiency"] = _fit_scale(single, params, "intra_efficiency",
                                                params["intra_efficiency"], _big)
    big_multi = _rows(multi, lambda r: r["size"] >= BIG)
    nic_rows, switches = _before_switch(multi)
    both = bool(switches) and _model_switches(multi, params)
    if both:
        nic_rows = _big
    plateau = None
    if len(big_multi) < MIN_ROWS:
        nic_rows, plateau = _plateau(multi)
    if (len(big_multi) >= MIN_ROWS or plateau) and "nic_efficiency" in catalog:
        try:
            params["nic_efficiency"] = _fit_scale(multi, params, "nic_efficiency",
                                                  catalog["nic_efficiency"], nic_rows)
        except ConfigError:
            if not plateau:
                raise
            # the model's plateau there is not the NIC's (a tree's per-channel cap, say): the
            # rows hold no NIC rate, and the catalog's stays
            plateau = None
    small_multi = _rows(multi, lambda r: r["size"] <= SMALL)
    if len(small_multi) >= MIN_ROWS and "network_latency_us" in catalog:
        params["network_latency_us"] = _fit_latency(multi, params)
    # the sync only beside a fitted NIC rate: without large rows a step cost and a slow NIC
    # cannot be told apart
    sync = _fit_sync(multi, params) if "nic_efficiency" in params else None
    if sync is not None:
        params.update(sync)
        params["nic_efficiency"] = _fit_scale(multi, params, "nic_efficiency",
                                              params["nic_efficiency"], nic_rows)
    if not params:
        raise ConfigError(
            f"too few rows to fit: {len(big_single)} single-node and {len(big_multi)} multi-node "
            f"rows of >= 64 MiB, {len(small_multi)} multi-node rows of <= 64 KiB; need "
            f"{MIN_ROWS} of one kind (run nccl-tests with -e 1G or more, or -b 8 for latency)")
    params = {k: float(v) for k, v in params.items()}
    for name, value in params.items():
        details[name] = _detail(name, value, catalog.get(name))
    if both and "nic_efficiency" in details:
        details["nic_efficiency"]["note"] += "; NCCL switched algorithm (" + \
            ", ".join(switches) + ") where the model does too: fitted on every row of 64 MiB " \
            "and more"
    elif switches and "nic_efficiency" in details:
        details["nic_efficiency"]["note"] += "; fitted on the rows before NCCL switched " \
            "algorithm: " + ", ".join(switches)
    if plateau and "nic_efficiency" in details:
        details["nic_efficiency"]["note"] += "; the logs stop below 64 MiB: fitted on their " \
            "bandwidth-bound rows (busbw rising under x" + f"{PLATEAU:g} a doubling): " + plateau
    fit = {"before": _errors(tests, {}), "after": _errors(tests, params)}
    sources = tuple({"log": t.req.name, "test": t.req.log.test or "unnamed",
                     "collective": t.collective,
                     "rows": len(t.req.log.good_rows),
                     **({"gdr": t.req.log.info.gdr} if t.multi and t.req.log.info.gdr is not None
                        else {})} for t in tests)
    return Profile(machine=machine, parameters=params, details=details, sources=sources,
                   fit=fit)


def _test(req: DoctorRequest) -> _Test:
    d = diagnose(req)
    kw = dict(d.system)
    topo = req.topology if req.topology is not None else build_topology(**kw)
    return _Test(req, kw, topo, kw.get("nodes", 1) > 1, d.collective)


def _one_machine(tests: list[_Test]) -> dict:
    """The machine all tests share (node count and GPUs per node may differ); ConfigError
    naming two that differ otherwise."""
    keys = ("system", "gpu", "nic", "nics_per_node")
    first = tests[0]
    for t in tests[1:]:
        for k in keys:
            a, b = first.kw.get(k), t.kw.get(k)
            if a != b and not (k in ("nic", "nics_per_node") and (not first.multi or not t.multi)):
                raise ConfigError(f"the logs ran on two different machines: {first.req.name} "
                                  f"has {k}={a}, {t.req.name} has {k}={b}; calibrate one "
                                  "cluster at a time")
    best = max(tests, key=lambda t: (t.multi, t.kw.get("nodes", 1)))
    return {k: v for k, v in best.kw.items() if k in ("system", "nodes", "gpus_per_node", "nic",
                                                        "nics_per_node", "gpu")}


def _rows(tests, keep) -> list:
    return [r for t in tests for r in t.req.log.good_rows if keep(r)]


def _big(row) -> bool:
    return row["size"] >= BIG


def _model_switches(tests, params) -> bool:
    """Whether the model, with `params`, switches algorithm or protocol where each test's log
    does (_switch_at): then the rows past the switch are timed as NCCL ran them and hold the
    NICs' rate as well as those before (Snellius's 2-node log, NCCL 2.22: tree/LL128 to 256 MiB,
    which across nodes runs at its SMs' per-channel cap, nccl.tree, and tree/Simple, NIC-bound,
    from 512 MiB, as NCCL's own model picks them)."""
    for t in tests:
        at = _switch_at(t)
        if at is None:
            continue
        rows = _diagnose_on(t, params, lambda r, at=at: r["size"] in (at // 2, at))
        picks = {(r.get("algorithm"), r.get("protocol")) for r in rows}
        if len(rows) != 2 or len(picks) != 2:
            return False
    return True


def _switch_at(t):
    """The size from which test t's log switched algorithm (_switch), or None."""
    found = _switch(t)
    return None if found is None else found[0][found[1]]["size"]


def _switch(t):
    """(t's rows of 64 MiB and more by size, the index of the first that NCCL ran with another
    algorithm, its busbw rise, the rise before it) by _before_switch's rule, or None."""
    bw = sorted((r for r in t.req.log.good_rows if _big(r) and r.get("busbw")),
                key=lambda r: r["size"])
    for i in range(MIN_ROWS, len(bw)):
        rise, before = (bw[i]["busbw"] / bw[i - 1]["busbw"],
                        bw[i - 1]["busbw"] / bw[i - 2]["busbw"])
        if rise >= ALGO_SWITCH and rise > before:
            return bw, i, rise, before
    return None


def _before_switch(tests):
    """(`keep` for the rows of 64 MiB and more that ran the algorithm the first of them ran,
    one line per switch found). One algorithm's busbw ramps up by less at each doubling of the
    size; a rise of ALGO_SWITCH-fold or more that is also larger than the rise before it (past
    MIN_ROWS such rows) is NCCL switching algorithm there (tuning.cc picks per size), and the
    rows from that size on are left out of the NIC rate's fit."""
    past: set[int] = set()
    switches = []
    for t in tests:
        found = _switch(t)
        if found is None:
            continue
        bw, i, rise, before = found
        past.update(id(r) for r in bw[i:])
        switches.append(f"{t.req.name} ({t.req.log.test or 'unnamed'}) from "
                        f"{bw[i]['size'] >> 20} MiB, busbw x{rise:.2f} after x{before:.2f}")
    return (lambda r: _big(r) and id(r) not in past), switches


def _plateau(tests):
    """(`keep` for the multi-node rows on their test's bandwidth plateau, a line naming them)
    or (never, None) with fewer than MIN_ROWS such rows. A row is on the plateau when its
    busbw rose by less than PLATEAU over the size before and so did every larger row's; a test
    counts with MIN_ROWS such rows or more (one flat step can be noise)."""
    keep: set[int] = set()
    where = []
    for t in tests:
        bw = sorted((r for r in t.req.log.good_rows if r["size"] > SMALL and r.get("busbw")),
                    key=lambda r: r["size"])
        top = len(bw)
        while top > 1 and bw[top - 1]["busbw"] < PLATEAU * bw[top - 2]["busbw"]:
            top -= 1
        if len(bw) - top >= MIN_ROWS:
            keep.update(id(r) for r in bw[top:])
            where.append(f"{t.req.name} {_mib(bw[top]['size'])}-{_mib(bw[-1]['size'])} MiB")
    if len(keep) < MIN_ROWS:
        return (lambda r: False), None
    return (lambda r: id(r) in keep), ", ".join(where)


def _mib(nbytes) -> str:
    return f"{nbytes / (1 << 20):g}"


def _diagnose_on(t: _Test, params: dict, keep):
    """doctor's rows of test t (only those `keep` selects) predicted with `params` applied."""
    log = dataclasses.replace(t.req.log, rows=[r for r in t.req.log.good_rows if keep(r)])
    topo = apply_profile(t.topo, params) if params else t.topo
    # the collective read from the whole log: a log without a test name is read from its
    # columns, and a few of its rows (or none) may not tell it (a log named out.log)
    return diagnose(dataclasses.replace(t.req, log=log, topology=topo,
                                        collective=t.collective)).rows


def _ratios(tests, params, keep) -> list:
    return [r["ratio"] for t in tests for r in _diagnose_on(t, params, keep)
            if r.get("ratio")]


def _fit_scale(tests, params, name, start, keep) -> float:
    """A bandwidth fraction: value × median(measured/predicted busbw), three times over (the
    bottleneck can move as the value changes)."""
    value = start
    for _ in range(3):
        ratios = _ratios(tests, {**params, name: value}, keep)
        if not ratios:
            break
        value *= statistics.median(ratios)
        if value > 1.0:
            what = "NICs" if name == "nic_efficiency" else "NVLink/xGMI links"
            raise ConfigError(
                f"unphysical fit: the logs need {what} at {100 * value:.0f}% of line rate; the "
                "modelled machine is slower than the one that ran them (check --nic, "
                "--nics-per-node, --system or --gpu)")
    return max(value, 0.01)


def _fit_latency(tests, params) -> float:
    """network_latency_us where the median predicted/measured time of small rows is 1."""
    def median_ratio(lat):
        rows = [r for t in tests for r in _diagnose_on(
            t, {**params, "network_latency_us": lat}, lambda r: r["size"] <= SMALL)]
        return statistics.median(r["predicted_time_us"] / r["time_us"] for r in rows
                                 if r["time_us"] > 0)
    lo, hi = 0.0, 1000.0
    if median_ratio(lo) >= 1.0:
        return lo
    if median_ratio(hi) <= 1.0:
        raise ConfigError("unphysical fit: small messages take longer than a 1 ms network hop "
                          "would explain; the log's machine is not the one modelled")
    for _ in range(14):
        mid = (lo + hi) / 2
        if median_ratio(mid) < 1.0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _mid(row) -> bool:
    return SMALL < row["size"] < BIG


def _fit_sync(tests, params, key="network_sync") -> dict | None:
    """`key`_us and `key`_from_bytes (network_sync: per network step; call_sync: once per
    call), or None where the mid-size rows are not slower than the model (nothing left to
    explain). The sync starts at the per-rank share where measured over predicted time rises
    most from one size of a test to the next, else at 0."""
    start = _rise_start(tests, params)

    def median_ratio(us):
        trial = {**params, f"{key}_us": us, f"{key}_from_bytes": start}
        ratios = [r["predicted_time_us"] / r["time_us"] for t in tests
                  for r in _diagnose_on(t, trial, _mid) if r["time_us"] > 0]
        return statistics.median(ratios) if ratios else 1.0
    if median_ratio(0.0) >= 1.0:
        return None
    if median_ratio(MAX_SYNC_US) < 1.0:
        what = "network step" if key == "network_sync" else "call"
        raise ConfigError(f"unphysical fit: mid-size messages take longer than a "
                          f"{MAX_SYNC_US / 1000:.0f} ms synchronisation per {what} would "
                          "explain; the log's machine is not the one modelled")
    lo, hi = 0.0, MAX_SYNC_US
    for _ in range(16):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if median_ratio(mid) < 1.0 else (lo, mid)
    return {f"{key}_us": (lo + hi) / 2, f"{key}_from_bytes": float(start)}


def _rise_start(tests, params) -> float:
    """The per-rank share where measured over predicted time rises most from one size of a
    test to the next (below 64 MiB), else 0."""
    best, start = 1.0, 0.0
    for t in tests:
        ranks = max(int(t.kw.get("nodes", 1)) * int(t.kw.get("gpus_per_node", 1)), 1)
        rows = sorted((r for r in _diagnose_on(t, params, lambda r: r["size"] < BIG)
                       if r.get("predicted_time_us") and r["time_us"] > 0),
                      key=lambda r: r["size"])
        for a, b in zip(rows, rows[1:]):
            jump = (b["time_us"] / b["predicted_time_us"]) / (a["time_us"] / a["predicted_time_us"])
            if jump > best:
                best, start = jump, b["size"] / ranks
    return start


def _detail(name, value, catalog) -> dict:
    out = {"meaning": MEANING[name], "catalog": None if catalog is None else
           float(f"{float(catalog):.4g}")}
    if name == "nic_efficiency":
        out["note"] = f"NICs deliver {100 * value:.0f}% of line rate" + (
            ": check GPUDirect RDMA, PCIe placement of GPU and NIC, and the NIC's link "
            "speed (ibstat)" if catalog and value < 0.85 * catalog else "")
    elif name == "intra_efficiency":
        out["note"] = f"GPUs reach {100 * value:.0f}% of NVLink/xGMI nominal inside a node" + (
            ": check nvidia-smi nvlink -s, clocks, and NCCL_P2P settings"
            if catalog and value < 0.85 * catalog else "")
    elif name == "network_sync_us":
        out["note"] = (f"{value:.0f} us more per network step of larger messages: the net "
                       "plugin synchronises each step (rendezvous); check the provider's "
                       "rendezvous/eager settings (e.g. FI_CXI_RDZV_*, FI_EFA_*) and its version")
    elif name == "call_sync_us":
        out["note"] = (f"{value:.0f} us more per call of larger messages, whatever the "
                       "collective: check how the host drives the GPUs (nccl-tests -g, one "
                       "thread per GPU or one for all) and NCCL_LAUNCH_MODE")
    elif name in ("network_sync_from_bytes", "call_sync_from_bytes"):
        out["note"] = f"from {value / 1024:.0f} KiB per rank"
    else:
        out["note"] = f"{value:.2f} us per network hop per message" + (
            f" against the catalog's {catalog:.2f}: proxy threads, the net plugin and the "
            "switch fabric add to each message" if catalog is not None and value > 2 * catalog
            else "")
    return out


def _errors(tests, params) -> dict:
    """Median |busbw error| of the tests' rows by size class with `params` applied."""
    classes = {">=64MiB": lambda r: r["size"] >= BIG,
               "1-64MiB": lambda r: (1 << 20) <= r["size"] < BIG,
               "<=64KiB": lambda r: r["size"] <= SMALL}
    out = {}
    for name, keep in classes.items():
        errs = [abs(1 / r["ratio"] - 1) for t in tests for r in _diagnose_on(t, params, keep)
                if r.get("ratio")]
        if errs:
            out[name] = round(float(statistics.median(errs)), 4)
    return out
