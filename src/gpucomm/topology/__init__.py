"""Cluster topologies: devices, directed links, routing, presets and cluster builders.

    >>> from gpucomm.topology import build_topology
    >>> t = build_topology("dgx-h100", nodes=2)
    >>> t.nranks, t.path_bandwidth(0, 1) / 1e9     # achievable: 450 GB/s x 0.824
    (16, 370.8)
"""
from .model import DEVICE_KINDS, Device, Link, Topology, load_topology

__all__ = ["DEVICE_KINDS", "Device", "Link", "Topology", "load_topology"]

from .analysis import bisection_bandwidth, gpu_bandwidths  # noqa: E402
from .build import FABRICS, PRESETS, build_topology, preset_names  # noqa: E402

__all__ += ["FABRICS", "PRESETS", "build_topology", "preset_names", "bisection_bandwidth",
            "gpu_bandwidths"]
