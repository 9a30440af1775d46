"""Read nccl-tests output as printed: header, per-rank device lines, the table, the footer,
and the `NCCL_DEBUG=INFO` lines interleaved with them.

    >>> log = parse_log(open("all_gather.log").read())        # doctest: +SKIP
    >>> log.collective, log.nranks, log.hosts                  # doctest: +SKIP
    ('all_gather', 16, ('node01', 'node02'))

Formats (nccl-tests `src/common.cu`, facts only): the table has out-of-place and in-place
halves of `time algbw busbw #wrong` after `size count type redop root`; releases before
2.10 had no `root` column and printed a float `error` where `#wrong` is now.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field

from ..collectives import get_collective
from ..errors import ConfigError
from ..limits import MAX_SIZE_BYTES

_TEST = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoall|"
                   r"sendrecv|gather|scatter|hypercube)_perf(?:_mpi)?\b")
# What launchers and log collectors put before each line: mpirun --tag-output "[1,0]<stdout>:",
# srun -l "0: ", kubectl --prefix "[pod/x/c] ", timestamps (ISO 8601, syslog-like, bracketed).
_TAG = re.compile(r"\[\d+,\d+\]<(?:stdout|stderr)>:")  # anywhere: printf flushed mid-line
_PREFIXES = (re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?"),
             re.compile(r"^\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
                        r"(?:Z|[+-]\d{2}:?\d{2})?\]?\s?"),
             re.compile(r"^\[\d{2}:\d{2}:\d{2}(?:\.\d+)?\]\s?"),
             re.compile(r"^\[pod/[^\]]*\]\s?"),
             re.compile(r"^\s{0,4}\d{1,6}:\s"))
_RANK = re.compile(r"#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+"
                   r"(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$")  # rccl-tests may print no name
_HEADER = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)"
                     r".*?warmup iters:\s*(\d+)\s+iters:\s*(\d+)(?:\s+agg iters:\s*(\d+))?"
                     r"(?:\s+validation:\s*(\d+))?(?:\s+graph:\s*(\d+))?")
_NCCL_VERSION = re.compile(r"^R?CCL version\s*:?\s*(\S+)")
# A job script's shell trace (bash -x) of the environment it exports to NCCL and libfabric:
# "+ export NCCL_CROSS_NIC=0", "+ export 'NCCL_NET=AWS Libfabric'", "+ FI_CXI_RX_MATCH_MODE=..."
_XTRACE_ENV = re.compile(r"^\++ (?:export )?'?((?:NCCL|FI)_[A-Z0-9_]+)=(.*?)'?$")
_INFO = re.compile(r"^(\S+?):(\d+):(\d+)\s+\[(\d+)\]\s+NCCL\s+(INFO|WARN)\s+(.*)$")
# A net plugin's name may hold spaces: "via NET/AWS Libfabric/7/GDRDMA" (aws-ofi-nccl on cxi).
_VIA = re.compile(r"Channel\s+\d+(?:/\d+)?\s*:\s*(\d+)\[[^\]]*\]\s*->\s*(\d+)\[[^\]]*\].*?"
                  r"via\s+(NET/[^/]+/\S+|\S+)")

TEST_COLLECTIVE = {"alltoall": "all_to_all"}
MAX_TEST_ROWS = 10_000  # 1000 sizes (limits.MAX_SWEEP_POINTS) x 10 cycles of nccl-tests -N
MAX_HEADER_GPUS = 64  # nThread x nGpus of one process (limits.MAX_LOCAL_RANKS)


@dataclass(frozen=True)
class Device:
    rank: int
    host: str
    device: int
    bus_id: str
    name: str
    pid: int = 0
    group: int = 0


@dataclass
class NcclInfo:
    """What the `NCCL INFO` lines say (empty when the log has none)."""
    version: str | None = None
    nranks: int | None = None
    nnodes: int | None = None
    local_ranks: int | None = None
    coll_channels: int | None = None
    nvls_channels: int | None = None
    ring_channels: int = 0  # distinct "Channel NN/MM :" ring lines
    channels_total: int | None = None  # their MM: comm->nChannels (init.cc prints it)
    trees: int = 0
    nvls: bool | None = None  # multicast support available / NVLS comm set up
    transports: dict = field(default_factory=dict)  # "P2P"/"SHM"/"NET" -> connections
    net: str | None = None  # "IB", "Socket", "OFI", ...
    nics: tuple = ()  # NIC device names NCCL says it uses (NET/IB : Using ...)
    roce: bool = False
    net_devices: set = field(default_factory=set)  # NET/IB/<n> indices channels use
    gdr: bool | None = None  # GPUDirect RDMA on the network connections
    gdr_distance: int | None = None  # NCCL's GPU-NIC path type where it enabled GDR (topo.h)
    env: dict = field(default_factory=dict)  # NCCL_X set by environment to Y
    provider: str | None = None  # libfabric provider (efa, cxi)
    nic_speeds: dict = field(default_factory=dict)  # NIC name -> Mb/s, where NCCL prints it
    collnet: bool | None = None  # CollNet (SHARP) plugin loaded / channels set up
    collnet_channels: int | None = None
    pxn: bool | None = None  # a proxy rank relays NIC traffic (via NET/IB/0(5))
    net_plugin: str | None = None  # "internal" or the plugin's name
    tuner_plugin: str | None = None
    warnings: list = field(default_factory=list)

    @property
    def present(self) -> bool:
        """Whether any INFO line was read (a field differs from an empty NcclInfo)."""
        return self != NcclInfo()


@dataclass
class NcclTestsLog:
    test: str | None  # e.g. "all_gather_perf"
    collective: str | None  # gpucomm's name
    rows: list  # dicts: size count type redop root time_us algbw busbw wrong ip_*
    devices: tuple = ()
    nthread: int | None = None
    ngpus: int | None = None
    warmup: int | None = None
    iters: int | None = None
    agg_iters: int | None = None
    validation: int | None = None
    graph: int | None = None
    wrong_total: int | None = None  # footer's out-of-bounds count
    avg_busbw: float | None = None
    info: NcclInfo = field(default_factory=NcclInfo)
    version_line: str | None = None
    command: str | None = None  # the command line that ran the test, when the log echoes it
    root_column: bool = False  # nccl-tests 2.10 and later print one
    inherited: tuple = ()  # what this test shares with the one before it in the file
    rccl: bool = False  # rccl-tests / RCCL (AMD GPUs)
    separate_runs: int = 1  # processes that each ran this test alone, their output interleaved
    printed_version: str | None = None  # nccl-tests' `NCCL version 2.16.5+cuda11.8` line

    @property
    def good_rows(self) -> list:
        """The rows to judge: none with nan, inf, negative values or beyond the size limit."""
        return [r for r in self.rows if not r.get("flag")]

    @property
    def hosts(self) -> tuple:
        return tuple(dict.fromkeys(d.host for d in self.devices))

    @property
    def nranks(self) -> int:
        return len(self.devices) or (self.info.nranks or 0)

    @property
    def gpu_names(self) -> tuple:
        return tuple(dict.fromkeys(d.name for d in self.devices))

    @property
    def nccl_version(self) -> str | None:
        """The NCCL (RCCL) the test ran: its INFO or `NCCL version` lines, else the library code
        nccl-tests 2.14 and later print in their banner (`nccl-library=22602`: 2.26.2; codes
        below 2.9 are X*1000 + Y*100 + Z, nccl.h's NCCL_VERSION)."""
        if self.info.version or self.printed_version:
            return self.info.version or self.printed_version
        m = re.search(r"[nr]ccl-library=(\d+)", self.version_line or "")
        if not m or not 1000 <= int(m.group(1)) < 1_000_000:
            return None
        code = int(m.group(1))
        major, rest = divmod(code, 10000 if code >= 20900 else 1000)
        return f"{major}.{rest // 100}.{rest % 100}"

    @property
    def launch(self) -> dict:
        """How the test issued collectives: GPUs per host thread (-g), CUDA graphs (-G)."""
        return {"gpus_per_thread": self.ngpus or 1, "cuda_graph": bool(self.graph)}


def collective_of_test(test: str) -> str:
    name = re.sub(r"_perf(_mpi)?$", "", test)
    return get_collective(TEST_COLLECTIVE.get(name, name)).name


def strip_prefix(line: str) -> str:
    """A line as nccl-tests printed it, without what launchers and collectors put before it."""
    if "]<std" in line:
        line = _TAG.sub("", line)
    for _ in range(3):  # a timestamp before a rank tag, a tag before a timestamp
        before = line
        for pattern in _PREFIXES:
            line = pattern.sub("", line, count=1)
        if line == before:
            break
    return line


def parse_log(text: str) -> NcclTestsLog:
    """The one test of an nccl-tests log; ConfigError when it has no row or several tests."""
    logs = parse_logs(text)
    if len(logs) > 1:
        raise ConfigError(f"the log holds {len(logs)} tests ("
                          + ", ".join(g.test or "unnamed" for g in logs)
                          + "): give one test, or diagnose each (gpucomm doctor splits them)")
    return logs[0]


def parse_logs(text: str) -> list[NcclTestsLog]:
    """Every test of an nccl-tests output file (any release since 2019), in order. A file
    holding several tests back to back, as cluster scripts write them, gives one log each; a
    test without its own device or INFO lines shares those of the test before it. ConfigError
    when no table row is found."""
    chunks: list[list[str]] = [[]]
    rows = 0
    for raw in text.splitlines():
        line = strip_prefix(raw.rstrip())
        if rows and _starts_test(line):
            chunks.append([])
            rows = 0
        chunks[-1].append(line)
        if line[:1] != "#" and line.lstrip()[:1].isdigit() and _row(line) is not None:
            rows += 1
            if rows > MAX_TEST_ROWS:
                raise ConfigError(f"more than {MAX_TEST_ROWS} result rows in one test: not an "
                                  "nccl-tests sweep (at most 1000 sizes, a few cycles of -N)")
    logs: list[NcclTestsLog] = []
    pending: list[str] = []
    for chunk in chunks:
        log = _parse_chunk(pending + chunk)
        if not log.rows:  # a preamble (or trailer): part of the test next to it
            pending = pending + chunk
            continue
        pending = []
        for run in _separate_runs(log):
            if logs:
                _inherit(run, logs[-1])
            logs.append(run)
    if not logs:
        raise ConfigError("no nccl-tests result rows found in the log (expected lines like "
                          "'  1048576  262144  float  sum  -1  12.3  85.2  149.1  0 ...')")
    return logs


def _separate_runs(log: NcclTestsLog) -> list[NcclTestsLog]:
    """The independent runs a test's lines hold: where the ranks restart at 0 in another
    process (`srun -N2 all_reduce_perf -g 8` of a binary without MPI, `mpirun -np 2` of one),
    each process ran the whole test alone and their outputs interleave. One log per process,
    its own devices, and the k-th row of each size (the runs print the same sizes in order)."""
    pids: dict = {}
    for d in log.devices:
        pids.setdefault((d.host, d.pid), []).append(d)
    groups = list(pids.values())
    ranks = [sorted(d.rank for d in g) for g in groups]
    if len(groups) < 2 or any(r != ranks[0] for r in ranks) or ranks[0][0] != 0:
        return [log]
    seen: dict = {}
    rows: list[list] = [[] for _ in groups]
    for row in log.rows:
        k = seen.get(row["size"], 0)
        seen[row["size"]] = k + 1
        rows[min(k, len(groups) - 1)].append(row)
    return [dataclasses.replace(log, devices=tuple(g), rows=r, separate_runs=len(groups))
            for g, r in zip(groups, rows) if r]


def _starts_test(line: str) -> bool:
    """Whether a line opens a new test: its banner, its header, or the command that runs it."""
    s = line.strip()
    if "Collective test starting" in s or (s.startswith("#") and _HEADER.search(s)):
        return True
    if s.startswith("#") or _INFO.match(s) or "NCCL INFO" in s or "NCCL WARN" in s:
        return False
    return bool(_TEST.search(s))


def _inherit(log: NcclTestsLog, before: NcclTestsLog) -> None:
    """A test without device lines or NCCL INFO lines ran in the job of the test before it."""
    log.rccl = log.rccl or before.rccl
    if not log.devices and before.devices:
        log.devices = before.devices
        log.inherited = log.inherited + ("devices",)
    if not log.info.present and before.info.present:
        log.info = before.info
        log.inherited = log.inherited + ("NCCL INFO",)
    if log.ngpus is None:
        log.nthread, log.ngpus, log.graph = before.nthread, before.ngpus, before.graph


def _parse_chunk(lines: list[str]) -> NcclTestsLog:
    log = NcclTestsLog(None, None, [])
    devices: list = []
    info = NcclInfo()
    for line in lines:
        m = _INFO.match(line.strip())
        if m:
            _info_line(info, m.group(6), m.group(1), m.group(5))
            continue
        if "NCCL INFO" in line or "NCCL WARN" in line:
            continue  # an INFO line broken by another rank's output
        if log.test is None:
            t = _TEST.search(line)
            if t:
                log.test = t.group(0).replace("_mpi", "")
        if "rccl-tests" in line or line.startswith("RCCL version"):
            log.rccl = True
        if log.command is None and _TEST.search(line) and not line.lstrip().startswith("#"):
            log.command = line.strip()
        if line.lstrip().startswith("#"):
            _comment(log, devices, line)
            continue
        m = _NCCL_VERSION.match(line.strip())
        if m:
            info.version = info.version or m.group(1)
            continue
        m = re.match(r"NCCL version\s+(\S+)$", line.strip())  # nccl-tests' own, not an INFO line
        if m:
            log.printed_version = m.group(1)
            continue
        m = _XTRACE_ENV.match(line.strip())
        if m:  # what NCCL's own INFO lines print later overrides it
            info.env.setdefault(m.group(1), m.group(2).strip("'\""))
            continue
        row = _row(line)
        if row is not None:
            log.rows.append(row)
            log.root_column = log.root_column or row.pop("_root_column")
            row.pop("_root_column", None)
    log.devices = tuple(devices)
    log.info = info
    if log.test:
        log.collective = collective_of_test(log.test)
    return log


def _comment(log, devices, line):
    m = _RANK.search(line)
    if m:
        devices.append(Device(int(m.group(1)), m.group(4), int(m.group(5)), m.group(6),
                              m.group(7), int(m.group(3)), int(m.group(2) or 0)))
        return
    m = _HEADER.search(line)
    if m:
        vals = [None if v is None else int(v[:20]) for v in m.groups()]
        if max(int(m.group(1)[:20]), int(m.group(2)[:20])) > MAX_HEADER_GPUS:
            raise ConfigError(f"header 'nThread {m.group(1)} nGpus {m.group(2)}': at most "
                              f"{MAX_HEADER_GPUS} threads and GPUs per process")
        (log.nthread, log.ngpus, _, _, log.warmup, log.iters, log.agg_iters, log.validation,
         log.graph) = vals
        return
    m = re.search(r"Out of bounds values\s*:\s*(\d+)", line)
    if m:
        log.wrong_total = int(m.group(1))
        return
    m = re.search(r"Avg bus bandwidth\s*:\s*([\d.eE+-]+)", line)
    if m:
        try:
            log.avg_busbw = float(m.group(1))
        except ValueError:
            pass
        return
    if "nccl-tests version" in line:
        log.version_line = line.lstrip("# ").strip()


def _num(tok):
    return None if tok in ("N/A", "n/c", "-") else float(tok)


def _wrong(tok):
    if tok in ("N/A", "n/c", "-"):
        return None
    v = float(tok)
    if not math.isfinite(v):
        return v
    return int(v) if v == int(v) else v


def _row(line: str):
    parts = line.split()
    if len(parts) < 7 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    if len(parts[0]) > 20 or len(parts[1]) > 20:
        return None
    size, count, typ, redop = int(parts[0]), int(parts[1]), parts[2], parts[3]
    rest = parts[4:]
    if re.fullmatch(r"[\d.]+", redop):  # the first releases printed no redop where none applies
        redop, rest = "none", parts[3:]
    root, root_column = -1, False
    # releases since 2.10 print a root column (-1 when the collective has none): 1 + 4 + 4
    if len(rest) % 2 == 1 and re.fullmatch(r"-?\d+", rest[0]):
        root, rest, root_column = int(rest[0]), rest[1:], True
    try:
        row = {"size": size, "count": count, "type": typ, "redop": redop, "root": root,
               "time_us": _num(rest[0]), "algbw": _num(rest[1]), "busbw": _num(rest[2]),
               "wrong": _wrong(rest[3]) if len(rest) > 3 else None}
        if len(rest) >= 8:
            row.update(ip_time_us=_num(rest[4]), ip_algbw=_num(rest[5]),
                       ip_busbw=_num(rest[6]), ip_wrong=_wrong(rest[7]))
    except (ValueError, IndexError):
        return None
    if row["time_us"] is None or row["busbw"] is None:
        return None
    flag = row_problem(row)
    if flag:
        row["flag"] = flag
    row["_root_column"] = root_column
    return row


def row_problem(row: dict) -> str | None:
    """Why a row cannot be believed (nan, inf, negative, beyond the size limit), else None."""
    if row["size"] > MAX_SIZE_BYTES:
        return f"size {row['size']} is above the {MAX_SIZE_BYTES >> 40} TiB limit"
    for key in ("time_us", "algbw", "busbw", "wrong", "ip_time_us", "ip_algbw", "ip_busbw",
                "ip_wrong"):
        v = row.get(key)
        if isinstance(v, float) and not math.isfinite(v):
            return f"{key} is {v}"
        if isinstance(v, (int, float)) and v < 0:
            return f"{key} is negative ({v})"
    if row["time_us"] == 0 and row["size"] > 0:
        return "time is 0 for a non-empty size"
    return None


def _info_line(info: NcclInfo, msg: str, host: str, level: str) -> None:
    if level == "WARN":
        info.warnings.append(msg.strip())
        return
    if _info_topology(info, msg) or _info_network(info, msg):
        return
    if "NVLS multicast support is available" in msg or re.search(r"NVLS comm\b", msg):
        info.nvls = True
    elif "NVLS multicast support is not available" in msg:
        info.nvls = False
    if re.search(r"GPU Direct RDMA Disabled", msg):
        info.gdr = False
    elif re.search(r"GPU Direct RDMA Enabled", msg) and info.gdr is None:
        info.gdr = True
    _info_plugins(info, msg)


def _info_plugins(info: NcclInfo, msg: str) -> None:
    """Net, tuner and CollNet plugins, NIC speeds."""
    m = re.search(r"NET/Plugin\s*:?\s*(?:Loaded net plugin|Using)\s+(.+?)(?:\s*\(v\d+\))?$",
                  msg)
    if m:
        info.net_plugin = m.group(1).strip()
    elif re.search(r"NET/Plugin\s*:?.*(?:No plugin found|Could not find|using internal)", msg,
                   re.I):
        info.net_plugin = info.net_plugin or "internal"
    m = re.search(r"(?:TUNER/Plugin\s*:?\s*(?:Using|Loaded)\s+(?:tuner plugin\s+)?|"
                  r"Using tuner plugin:?\s*)'?([^']+)'?$", msg)
    if m and "internal" not in m.group(1).lower():
        info.tuner_plugin = m.group(1).strip()
    elif "TUNER/Plugin" in msg:
        info.tuner_plugin = info.tuner_plugin or "internal"
    if re.search(r"Loaded collnet plugin|collNetSupport 1", msg, re.I):
        info.collnet = True
    elif re.search(r"collNetSupport 0", msg):
        info.collnet = info.collnet or False
    m = re.search(r"NET/IB\s*:?\s*\[\d+\]\s*([\w.-]+)(?::[\w.-]+)?:\d+/\w+.*?speed=(\d+)", msg)
    if m:
        info.nic_speeds[m.group(1)] = int(m.group(2))


def _info_topology(info: NcclInfo, msg: str) -> bool:
    """Version, ranks and nodes, channels, rings and trees; whether the line was one."""
    m = re.match(r"NCCL version\s+(\S+)", msg)
    if m:
        info.version = m.group(1)
        return True
    m = re.search(r"nRanks\s+(\d+)\s+nNodes\s+(\d+)\s+localRanks\s+(\d+)", msg)
    if m:
        info.nranks, info.nnodes, info.local_ranks = (int(x) for x in m.groups())
        return True
    m = re.search(r"(\d+)\s+coll channels,.*?(?:(\d+)\s+nvls channels)?", msg)
    if m and "coll channels" in msg:
        # one line per rank: the fewest is what limits the collective
        info.coll_channels = min(int(m.group(1)), info.coll_channels or 1 << 30)
        c = re.search(r"(\d+)\s+collnet channels", msg)
        if c:
            info.collnet_channels = min(int(c.group(1)), 1 << 30 if info.collnet_channels
                                        is None else info.collnet_channels)
        n = re.search(r"(\d+)\s+nvls channels", msg)
        if n:
            info.nvls_channels = min(int(n.group(1)), 1 << 30 if info.nvls_channels is None
                                     else info.nvls_channels)
        return True
    m = re.match(r"Channel\s+(\d+)/(\d+)\s*:\s*[\d\s]+$", msg)
    if m:
        info.ring_channels = max(info.ring_channels, int(m.group(1)) + 1)
        info.channels_total = max(info.channels_total or 0, int(m.group(2)))
        return True
    if msg.startswith("Trees"):
        info.trees = max(info.trees, msg.count("["))
        return True
    return False


def _info_network(info: NcclInfo, msg: str) -> bool:
    """Transports per peer, NICs, network plugin, environment settings; whether the line was one."""
    m = _VIA.search(msg)
    if m:
        via = m.group(3)
        kind = via.split("/")[0]
        info.transports[kind] = info.transports.get(kind, 0) + 1
        if kind == "NET":
            bits = via.split("/")
            dev = re.match(r"\d+", bits[2]) if len(bits) > 2 else None
            if dev:
                info.net_devices.add(int(dev.group(0)))
            if re.match(r"NET/\w+/\d+\(\d+\)", via):
                info.pxn = True
            gdr = "GDRDMA" in via
            info.gdr = gdr if info.gdr is None else (info.gdr and gdr)
        return True
    m = re.search(r"(\w+) set by environment to (\S+)", msg)
    if m:
        info.env[m.group(1)] = m.group(2).rstrip(".")  # NCCL ends some of these with "."
        return True
    m = re.match(r"NET/(\w+)\s*:\s*Using\s+(.*)", msg)
    if m and "[" in m.group(2):
        info.net = {"OFI": "OFI"}.get(m.group(1), m.group(1))
        devs = re.findall(r"\[\d+\]([^\s;]+)", m.group(2).split(";")[0])
        info.nics = tuple(devs)
        info.roce = any(d.endswith("/RoCE") for d in devs)
        return True
    m = re.search(r"Using network (.+)$", msg)
    if m:
        info.net = info.net or m.group(1).strip()
        if info.net_plugin in (None, "internal") and m.group(1).strip() not in ("IB", "Socket"):
            info.net_plugin = m.group(1).strip()
        return True
    m = re.search(r"GPU Direct RDMA Enabled for GPU \S+ / HCA \S+ \(distance (\d+) <=", msg)
    if m:
        info.gdr_distance = max(info.gdr_distance or 0, int(m.group(1)))
        return True
    m = re.search(r"[Ss]elected [Pp]rovider is (\w+)", msg)
    if m:
        info.provider = m.group(1).lower()
        return True
    return False
