"""nccl-tests' output table: out-of-place and in-place halves, plus the prediction."""
from __future__ import annotations


def _num(v, fmt) -> str:
    return "-" if v is None else format(v, fmt)


def _wrong(v) -> str:
    return "n/c" if v is None else str(v)


def total_wrong(rows: list[dict]) -> int:
    """Wrong elements over every row and both halves (unchecked halves count none)."""
    return sum(r.get(k) or 0 for r in rows for k in ("wrong", "ip_wrong"))


def format_table(rows: list[dict], title: str = "") -> str:
    """The rows as nccl-tests prints them; `predicted` is the simulator's time ("-": none)."""
    head = (f"#{'size':>11} {'count':>12} {'type':>8} {'redop':>6} {'root':>5}"
            f" {'time':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6}"
            f" {'time':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6} {'predicted':>10}")
    unit = (f"#{'(B)':>11} {'(elements)':>12} {'':>8} {'':>6} {'':>5}"
            f" {'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6}"
            f" {'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6} {'(us)':>10}")
    lines = []
    if title:
        lines.append(f"# {title}")
    lines.append(f"#{'':>46}{'out-of-place':^33}{'in-place':^33}")
    lines += [head, unit]
    for r in rows:
        lines.append(
            f" {r['size']:>11} {r['count']:>12} {r['type']:>8} {r['redop']:>6} {r['root']:>5}"
            f" {_num(r.get('time_us'), '9.2f')} {_num(r.get('algbw'), '7.2f')}"
            f" {_num(r.get('busbw'), '7.2f')} {_wrong(r.get('wrong')):>6}"
            f" {_num(r.get('ip_time_us'), '9.2f')} {_num(r.get('ip_algbw'), '7.2f')}"
            f" {_num(r.get('ip_busbw'), '7.2f')} {_wrong(r.get('ip_wrong')):>6}"
            f" {_num(r.get('predicted_time_us'), '10.2f')}")
    if rows:
        busbw = [r["busbw"] for r in rows if r.get("busbw") is not None]
        wrong = total_wrong(rows)
        lines.append(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
        lines.append(f"# Avg bus bandwidth    : {sum(busbw) / max(len(busbw), 1):.4f} GB/s")
    return "\n".join(lines)


# ---- the whole nccl-tests log: header, device lines, table, footer ---------------------------
# gpucomm dtype -> the name nccl-tests prints (its test_typenames)
NCCL_TYPE = {"float32": "float", "float16": "half", "float64": "double"}
# the nccl-tests release whose output this follows (its src/common.h NCCL_TESTS_VERSION)
NCCL_TESTS_FORMAT = "2.19.6"
TIME_STRING_FORMAT = "%Y-%m-%d %H:%M:%S"  # nccl-tests src/util.cu, for -S timestamps
BLOCKING = {1: "wait and barrier after each inner iteration (-m)",
            2: "wait after each inner iteration (-m), no barrier",
            3: "wait and barrier after each outer iteration (-n); time excludes barrier"}


def float_cell(value, width: int) -> str:
    """A number in `width` characters as nccl-tests' getFloatStr writes it (src/util.cu): two
    decimals, then one, then none, then an exponent, so wide values never merge columns."""
    if value is None:
        return f"{'N/A':>{width}}"
    for fmt in (".2f", ".1f", ".0f"):
        text = f"{value:>{width}{fmt}}"
        if len(text) <= width:
            return text
    return f"{value:>{width}{'.1e' if width >= 7 else '.0e'}}"[:width]


def _wrong_cell(v) -> str:
    """'  %6g', or '    N/A' when unchecked (one narrower, as nccl-tests prints it)."""
    return "    N/A" if v is None else f"  {float(v):>6g}"


def _row(r: dict, timestamps: bool) -> str:
    line = (f"{r['size']:>12}  {r['count']:>12}  {NCCL_TYPE.get(r['type'], r['type']):>8}  "
            f"{r['redop']:>6}  {r['root']:>6}")
    for pre in ("", "ip_"):
        line += (f"  {float_cell(r.get(pre + 'time_us'), 7)}  {float_cell(r.get(pre + 'algbw'), 6)}"
                 f"  {float_cell(r.get(pre + 'busbw'), 6)}{_wrong_cell(r.get(pre + 'wrong'))}")
    if timestamps:
        line += f"{r.get('timestamp', ''):>21}"
    return line


def _table_header(cputime: bool, timestamps: bool) -> list[str]:
    """nccl-tests' writeResultHeader (src/util.cu), without per-iteration columns."""
    t = "cputime" if cputime else "time"
    ts, tsf = ("timestamp", TIME_STRING_FORMAT) if timestamps else ("", "")
    pad = 19 if timestamps else 0
    blank = f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}"
    return ["#", blank + "           out-of-place                       in-place          ",
            f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {t:>7}  "
            f"{'algbw':>6}  {'busbw':>6}  {'#wrong':>6}  {t:>7}  {'algbw':>6}  {'busbw':>6}  "
            f"{'#wrong':>6} {ts:>{pad}}",
            f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  "
            f"{'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  "
            f"{'':>6} {tsf:>{pad}}"]


def format_log(rows: list[dict], *, test: str, devices: list[tuple], nthread: int = 1,
               ngpus: int = 1, minbytes: int | None = None, maxbytes: int | None = None,
               step: str = "2(factor)", warmup: int = 5, iters: int = 20, agg_iters: int = 1,
               validation: int = 1, graph: int = 0, unalign: int = 0, blocking: int = 0,
               version: str | None = None, cputime: bool = False, timestamps: bool = False,
               comments: tuple = (), title: str | None = None, settings: tuple = ()) -> str:
    """nccl-tests' output, line for line as release 2.19 prints it (src/util.cu
    writeDeviceReport, writeResultHeader, writeBenchmarkLine*, writeResultFooter), so its
    parsers read it.

    `test`: the binary (all_reduce_perf); `devices`: (rank, host, device, bus_id, name, pid)
    per rank; rows as `format_table` takes them (`timestamp` with `timestamps`); `version`:
    what follows nccl-tests' version (where nccl-tests names the NCCL headers and library);
    `comments`: '# ...' lines after the footer (gpucomm's prediction); `settings`: '# ...'
    lines after the parameters line, as nccl-tests prints the environment it runs under.
    """
    sizes = [r["size"] for r in rows]
    lines = [f"# {title}"] if title else []
    lines.append(f"# nccl-tests version {NCCL_TESTS_FORMAT}" + (f" {version}" if version else ""))
    lines.append(f"# Collective test starting: {test}")
    lines.append(f"# nThread {nthread} nGpus {ngpus} minBytes {minbytes or min(sizes, default=0)}"
                 f" maxBytes {maxbytes or max(sizes, default=0)} step: {step} warmup iters: "
                 f"{warmup} iters: {iters} agg iters: {agg_iters} validation: {validation} "
                 f"graph: {graph} unalign: {unalign}")
    if blocking in BLOCKING:
        lines.append(f"# Blocking Enabled: {BLOCKING[blocking]} ")
    lines += [f"# {s}" for s in settings]
    lines += ["#", "# Using devices"]
    for rank, host, dev, bus, name, pid in devices:
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {host:>10} device {dev:2d} "
                     f"[{bus}] {name}")
    lines += _table_header(cputime, timestamps)
    lines += [_row(r, timestamps) for r in rows]
    wrong = total_wrong(rows)
    busbw = [r["busbw"] for r in rows if r.get("busbw") is not None]
    lines.append(f"# {'Out of bounds values':<20} : {wrong} {'FAILED' if wrong else 'OK'}")
    lines.append(f"# {'Avg bus bandwidth':<20} : {sum(busbw) / max(len(busbw), 1):g} ")
    lines += ["#", f"# Collective test concluded: {test}"]
    lines += [f"# {c}" for c in comments]
    lines += ["#", ""]
    return "\n".join(lines)
