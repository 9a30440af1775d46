"""Draw a topology with matplotlib (optional dependency: `pip install gpucomm[plot]`).

Layout: one column block per node, rows by device kind (NICs at the top, PCIe switches, GPUs,
NVSwitch, CPUs, host memory); fabric switches above all nodes. Edges are coloured
by link family and drawn with a width that grows with bandwidth.
"""
from __future__ import annotations

import math

from ..errors import ConfigError

ROWS = {"switch": 6.0, "nic": 4.6, "nvswitch": 1.2, "pcie_switch": 3.4, "gpu": 2.2,
        "cpu": 0.4, "memory": -0.6}
COLOURS = {"nvlink": "#2e8b57", "xgmi": "#b22222", "c2c": "#17becf", "pcie": "#1f77b4",
           "cpu": "#7f7f7f", "memory": "#9467bd",
           "ib": "#ff7f0e", "roce": "#ff7f0e", "efa": "#ff7f0e", "ethernet": "#ff7f0e",
           "slingshot": "#ff7f0e", "custom": "#333333"}
MAX_NODES_DRAWN = 8


def drawing_positions(topo, nodes_drawn):
    """GPUs evenly spaced per node; every other device over the mean x of its neighbours
    one level closer to the GPUs (PCIe switch over its GPUs, NIC over its switch, ...)."""
    nbrs: dict[str, set[str]] = {}
    for ln in topo.links:
        nbrs.setdefault(ln.src, set()).add(ln.dst)
    drawn = [d for d in topo.devices if d.node < nodes_drawn]
    gpus: dict[int, list[str]] = {}     # node -> its GPUs
    for d in drawn:
        if d.kind == "gpu":
            gpus.setdefault(d.node, []).append(d.name)
    width = max((len(v) for v in gpus.values()), default=1) + 1
    pos: dict[str, tuple[float, float]] = {}
    for node, names in gpus.items():
        for i, name in enumerate(names):
            pos[name] = (node * width + i, ROWS["gpu"])
    order = ("nvswitch", "pcie_switch", "cpu", "memory", "nic")
    for kind in order:
        group = [d for d in drawn if d.kind == kind and d.node >= 0]
        for d in group:
            xs = [pos[n][0] for n in nbrs.get(d.name, ()) if n in pos]
            x = sum(xs) / len(xs) if xs else d.node * width + (width - 1) / 2
            pos[d.name] = (x, ROWS[kind])
        # spread devices of one kind that landed on the same spot (NIC pairs, ...)
        spots: dict[tuple[int, float], list[str]] = {}
        for d in group:
            spots.setdefault((d.node, round(pos[d.name][0], 3)), []).append(d.name)
        for names in spots.values():
            for i, name in enumerate(names):
                x, y = pos[name]
                pos[name] = (x + (i - (len(names) - 1) / 2) * 0.6, y)
    fabric = [d for d in topo.devices if d.node == -1]
    total = nodes_drawn * width - 1
    for tier, names in (("leaf", [d.name for d in fabric if not d.name.startswith("spine")]),
                        ("spine", [d.name for d in fabric if d.name.startswith("spine")])):
        for i, name in enumerate(names):
            pos[name] = ((i + 0.5) * total / max(len(names), 1),
                         ROWS["switch"] + (1.2 if tier == "spine" else 0.0))
    return pos, width


def plot_topology(topo, path: str) -> str:
    """Write a PNG of the topology (the first 8 nodes and the fabric) to `path`."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib, which is not installed: "
                          "pip install 'gpucomm[plot]' (or pip install matplotlib)") from None
    from .analysis import tech_kind
    nodes_drawn = min(topo.nodes, MAX_NODES_DRAWN)
    pos, width = drawing_positions(topo, nodes_drawn)
    # wide enough for a 72-GPU NVLink domain (GB200 NVL72) to keep its GPUs apart
    fig, ax = plt.subplots(figsize=(min(max(4 + 3 * nodes_drawn, 0.2 * width * nodes_drawn),
                                        40), 7))
    maxbw = max((ln.bandwidth_Bps for ln in topo.links), default=1.0)
    seen, kinds = set(), set()
    gpus = {d.name for d in topo.devices if d.kind == "gpu"}
    for ln in topo.links:
        if ln.src not in pos or ln.dst not in pos or (ln.dst, ln.src) in seen:
            continue
        seen.add((ln.src, ln.dst))
        kind = tech_kind(ln.tech)
        kinds.add(kind)
        (x0, y0), (x1, y1) = pos[ln.src], pos[ln.dst]
        lw = 0.5 + 3.0 * math.log1p(ln.bandwidth_Bps / 1e9) / math.log1p(maxbw / 1e9)
        xs, ys = [x0, x1], [y0, y1]
        if ln.src in gpus and ln.dst in gpus and abs(x1 - x0) > 1.01:   # a mesh: an arc
            t = [i / 16 for i in range(17)]
            h = min(0.12 * abs(x1 - x0), 1.0)
            xs = [x0 + (x1 - x0) * u for u in t]
            ys = [y0 + h * math.sin(math.pi * u) for u in t]
        ax.plot(xs, ys, color=COLOURS.get(kind, "#333333"), lw=lw, alpha=0.7, zorder=1)
    markers = {"gpu": ("s", "#76b900"), "nvswitch": ("D", "#2e8b57"),
               "pcie_switch": ("D", "#1f77b4"), "cpu": ("o", "#7f7f7f"),
               "memory": ("o", "#9467bd"), "nic": ("^", "#ff7f0e"), "switch": ("h", "#d62728")}
    for d in topo.devices:
        if d.name in pos:
            m, c = markers[d.kind]
            x, y = pos[d.name]
            ax.scatter(x, y, marker=m, s=120, c=c, zorder=2, edgecolors="black")
            if topo.nranks <= 64 or d.kind != "gpu":
                ax.annotate(d.name.split(".")[-1], pos[d.name], fontsize=6, ha="center",
                            va="bottom", xytext=(0, 6), textcoords="offset points")
    for k in range(nodes_drawn):
        ax.text(k * width + (width - 2) / 2, -1.3, f"node {k}", ha="center", fontsize=9)
    handles = [plt.Line2D([], [], color=c, lw=2, label=k)
               for k, c in (("NVLink", COLOURS["nvlink"]), ("PCIe", COLOURS["pcie"]),
                            ("inter-socket", COLOURS["cpu"]), ("memory", COLOURS["memory"]),
                            ("network", COLOURS["ib"]))]
    handles += [plt.Line2D([], [], color=COLOURS[k], lw=2, label=label)
                for k, label in (("xgmi", "Infinity Fabric (xGMI)"), ("c2c", "NVLink-C2C"))
                if k in kinds]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    more = f" (first {nodes_drawn} of {topo.nodes} nodes)" if topo.nodes > nodes_drawn else ""
    ax.set_title(f"{topo.name}: {topo.nranks} GPUs{more}")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
