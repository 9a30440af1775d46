"""`gpucomm bench --plot FILE.png`: bus bandwidth against size, measured and predicted."""
from __future__ import annotations

from ..errors import ConfigError


def plot_rows(rows: list, path: str, title: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib (pip install 'gpucomm[plot]')") from None
    sizes = [r["size"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(sizes, [r["busbw"] for r in rows], "o-", label="out-of-place")
    ax.plot(sizes, [r["ip_busbw"] for r in rows], "s--", label="in-place")
    pred = [(r["size"], r["size"] / (r["predicted_time_us"] * 1e-6) / 1e9 *
             (r["busbw"] / r["algbw"] if r["algbw"] else 1.0))
            for r in rows if r.get("predicted_time_us")]
    if pred:
        ax.plot(*zip(*pred), ":", color="gray", label="predicted")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
