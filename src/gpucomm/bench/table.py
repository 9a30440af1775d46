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
# gpucomm dtype -> the name nccl-tests prints (its ncclDataType names)
NCCL_TYPE = {"float32": "float", "float16": "half", "float64": "double"}

def _cell(v, width, fmt) -> str:
    return f"{'N/A':>{width}}" if v is None else f"{format(v, fmt):>{width}}"


def _wrong_cell(v) -> str:
    return f"{'N/A':>6}" if v is None else f"{v:>6}"


def format_log(rows: list[dict], *, test: str, devices: list[tuple], nthread: int = 1,
               ngpus: int = 1, minbytes: int | None = None, maxbytes: int | None = None,
               step: str = "2(factor)", warmup: int = 5, iters: int = 20, agg_iters: int = 1,
               validation: int = 1, graph: int = 0, version: str | None = None,
               comments: tuple = (), title: str | None = None,
               settings: tuple = ()) -> str:
    """nccl-tests' output, line for line as its `common.cu` prints it, so its parsers read it.

    `test`: the binary (all_reduce_perf); `devices`: (rank, host, device, bus_id, name, pid)
    per rank; rows as `format_table` takes them; `comments`: extra '# ...' lines after the
    footer (gpucomm's prediction); `settings`: '# ...' lines after the parameters line, as
    nccl-tests prints the environment it runs under (gpucomm's runtime options).
    """
    sizes = [r["size"] for r in rows]
    lines = [f"# {title}"] if title else []
    if version:
        lines.append(f"# nccl-tests version {version}")
    lines.append(f"# Collective test starting: {test}")
    lines.append(f"# nThread {nthread} nGpus {ngpus} minBytes {minbytes or min(sizes, default=0)}"
                 f" maxBytes {maxbytes or max(sizes, default=0)} step: {step} warmup iters: "
                 f"{warmup} iters: {iters} agg iters: {agg_iters} validation: {validation} "
                 f"graph: {graph}")
    lines += [f"# {s}" for s in settings]
    lines += ["#", "# Using devices"]
    for rank, host, dev, bus, name, pid in devices:
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {host:>10} device {dev:2d} "
                     f"[{bus}] {name}")
    lines += ["#",
              f"#{'':>60}out-of-place{'':>23}in-place",
              f"#{'size':>11}{'count':>14}{'type':>10}{'redop':>8}{'root':>8}{'time':>9}"
              f"{'algbw':>8}{'busbw':>8}{'#wrong':>7}{'time':>9}{'algbw':>8}{'busbw':>8}"
              f"{'#wrong':>7}",
              f"#{'(B)':>11}{'(elements)':>14}{'':>34}{'(us)':>9}{'(GB/s)':>8}{'(GB/s)':>8}"
              f"{'':>7}{'(us)':>9}{'(GB/s)':>8}{'(GB/s)':>8}"]
    for r in rows:
        lines.append(
            f"{r['size']:>12}{r['count']:>14}{NCCL_TYPE.get(r['type'], r['type']):>10}"
            f"{r['redop']:>8}{r['root']:>8}"
            f"{_cell(r.get('time_us'), 9, '.2f')}{_cell(r.get('algbw'), 8, '.2f')}"
            f"{_cell(r.get('busbw'), 8, '.2f')} {_wrong_cell(r.get('wrong'))}"
            f"{_cell(r.get('ip_time_us'), 9, '.2f')}{_cell(r.get('ip_algbw'), 8, '.2f')}"
            f"{_cell(r.get('ip_busbw'), 8, '.2f')} {_wrong_cell(r.get('ip_wrong'))}")
    wrong = total_wrong(rows)
    busbw = [r["busbw"] for r in rows if r.get("busbw") is not None]
    lines.append(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    lines.append(f"# Avg bus bandwidth    : {sum(busbw) / max(len(busbw), 1):g} ")
    lines.append("#")
    lines += [f"# {c}" for c in comments]
    lines.append(f"# Collective test concluded: {test}")
    return "\n".join(lines)
