"""Sweep plots (busbw and time against size); matplotlib is imported only when plotting."""
from __future__ import annotations

from ..errors import ConfigError


def plot_sweep(rows, path, title: str = "") -> None:
    """rows: dicts with size, time_us, busbw (SimResult.to_row()) -> a PNG at `path`."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'gpucomm[plot]'") from None
    sizes = [r["size"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(sizes, [r["busbw"] for r in rows], marker="o")
    a.set_xscale("log", base=2)
    a.set_xlabel("size (B)")
    a.set_ylabel("busbw (GB/s)")
    b.plot(sizes, [r["time_us"] for r in rows], marker="o")
    b.set_xscale("log", base=2)
    b.set_yscale("log")
    b.set_xlabel("size (B)")
    b.set_ylabel("time (us)")
    for ax in (a, b):
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
