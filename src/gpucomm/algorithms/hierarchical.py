"""Hierarchical all-reduce: reduce-scatter inside each group, all-reduce across groups, all-gather.

Groups are G consecutive ranks, as the GPUs of one node are (rank = node·G + local). Each rank
of a group owns one shard (1/G of the buffer): a ring reduce-scatter inside the group leaves
local rank l with shard l reduced over the group; the P/G ranks holding shard l (one per group,
the same local rank, as on a rail-optimised fabric) all-reduce it with a ring; a ring
all-gather inside the group hands the shards back. This is the 2D/hierarchical all-reduce of
Ying et al. 2018 ("Image classification at supercomputer scale", 2D torus all-reduce) and
Jia et al. 2018 ("Highly scalable deep learning training system with mixed-precision", Tencent);
NCCL's CollNet splits the work the same way, with SHARP switches doing the inter-node part.
Every rank sends 2(G-1)/G·M inside its group and 2(N-1)/(N·G)·M across groups (N = P/G
groups): 2(P-1)/P·M in all, the ring's amount, with only 1/G of it leaving the group.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..errors import ConfigError
from ..schedule import Schedule, Step, step
from . import algorithm

GPUS_PER_NODE = 8  # the default group: the largest divisor of P up to a DGX/HGX node's 8 GPUs


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _group_size(nranks: int, group_size: object) -> int:
    if group_size is None:
        return max(d for d in divisors(nranks) if d <= GPUS_PER_NODE)
    if not isinstance(group_size, (int, np.integer)) or isinstance(group_size, bool) \
            or group_size < 1 or nranks % group_size:
        raise ConfigError(f"group_size {group_size!r} must divide the {nranks} ranks: valid are "
                          f"{', '.join(map(str, divisors(nranks)))}")
    return int(group_size)


@algorithm("all_reduce", "hierarchical")
def hierarchical_all_reduce(nranks: int, root: int = 0,
                            group_size: int | None = None) -> Schedule:
    """Intra-group reduce-scatter, inter-group all-reduce per shard, intra-group all-gather."""
    p = nranks
    g = _group_size(p, group_size)
    n = p // g
    r = np.arange(p)
    node, local = r // g, r % g
    right_in_group = node * g + (local + 1) % g
    right_in_rail = ((node + 1) % n) * g + local
    # Chunk l·N + i is piece i of shard l: shard l is owned by local rank l of every group and
    # cut into N pieces for the ring across the N groups.
    def steps() -> Iterator[Step]:
        for s in range(g - 1):  # ring reduce-scatter in the group: shard l ends on local rank l
            yield step(r, right_in_group, ((local - s - 1) % g) * n, nchunks=n, reduce=True)
        for s in range(n - 1):  # ring all-reduce of shard `local` across the groups
            yield step(r, right_in_rail, local * n + (node - s) % n, reduce=True)
        for s in range(n - 1):
            yield step(r, right_in_rail, local * n + (node + 1 - s) % n)
        for s in range(g - 1):  # ring all-gather in the group
            yield step(r, right_in_group, ((local - s) % g) * n, nchunks=n)
    return Schedule("all_reduce", p, "hierarchical", p, steps, params=(("group_size", g),))
