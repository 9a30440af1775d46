"""A multi-host cluster emulated on one machine with network namespaces and tc-shaped veths.

    >>> from gpucomm.emulate import ClusterSpec, EmulatedCluster, available
    >>> ok, why = available()  # needs root, `ip` and `tc`  # doctest: +SKIP
    >>> with EmulatedCluster(ClusterSpec(hosts=2, ranks_per_host=2,  # doctest: +SKIP
    ...                                  rate_bps=1e9)) as c:
    ...     c.write_topology("emulated.yaml", c.measure())

See cluster.py for the layout and docs/multihost.md for running on a real cluster.
"""
from .cluster import SUBNET, ClusterSpec, EmulatedCluster, Measured
from .netns import available, sweep
from .topology import emulated_topology, emulated_topology_dict, emulated_topology_yaml

__all__ = ["SUBNET", "ClusterSpec", "EmulatedCluster", "Measured", "available", "sweep",
           "emulated_topology", "emulated_topology_dict", "emulated_topology_yaml"]
