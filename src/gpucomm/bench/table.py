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
