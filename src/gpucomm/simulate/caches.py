"""What the simulator remembers, and on which object: one record class per owner, one named
slot per thing remembered (a misspelt slot is an AttributeError, never a silent miss).

- `TopologyMemo`, on a Topology (`topology_memo(t)`, kept in `t.cache`): link properties,
  NIC positions and models, the GPU generation, node-shift symmetry, and per rank placement
  the path table, node groups, ring orders and what auto's candidates are.
- `PathMemo`, on a PathTable (`paths.cache`): what one placement's routes give, whatever the
  size and protocol (p2p and SHM plans, NCCL's tree shape, step geometry, ring busy bytes,
  the protocols' step costers).
- `ScheduleMemo`, on a Schedule (`schedule_memo(s)`): whether it is a ring or a chain by
  its steps.

Each lives as long as its owner and is dropped with it; `clear()` on the owner's cache (a
Topology's `cache.clear()`, a PathTable's `cache.clear()`) forgets it. Nothing is keyed by
`id()` and nothing lives at module level.
"""
from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ..schedule import Schedule
    from ..topology import Topology
    from .paths import Home, PathTable, Rails
    from .shm import ShmPlan
    from .steps import Geometry, StepCoster
    from .symmetry import NodeShift

T = TypeVar("T")
Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
PLACEMENTS_KEPT = 64  # per topology and per kind: a search over placements cannot grow it


class Unset(Enum):
    """A slot not filled yet, where None is an answer (no SHM plan, no node-shift symmetry)."""
    UNSET = 0


UNSET: Final = Unset.UNSET


class TopologyMemo:
    """The simulator's record on a Topology (see the module docstring)."""
    __slots__ = ("link_props", "nic_index", "nic_model", "node_nics", "generation",
                 "node_shift", "rails", "paths", "nodes", "groups", "ll128", "candidates",
                 "orders")

    def __init__(self) -> None:
        # (payload capacity, latency, path class) per link
        self.link_props: tuple[Floats, Floats, npt.NDArray[np.int8]] | None = None
        self.nic_index: Ints | None = None  # device index of each rank's NIC (-1: none)
        self.nic_model: str | None = None
        self.node_nics: list[float] | None = None  # NCCL's GB/s of node 0's NICs (nccl_tuning)
        self.generation: str | None = None
        self.node_shift: NodeShift | None | Literal[Unset.UNSET] = UNSET
        # per placement (its bytes; rails: its distinct GPUs' bytes)
        self.rails: dict[bytes, tuple[Rails, Home]] = {}
        self.paths: dict[bytes, PathTable] = {}
        self.nodes: dict[bytes, int] = {}
        self.groups: dict[bytes, dict[int, list[int]]] = {}
        self.ll128: dict[bool, dict[bytes, bool]] = {}  # by versions.py LL128_C2C
        self.candidates: dict[tuple[str, bytes], list[str]] = {}  # (collective, placement)
        self.orders: dict[bytes, Ints | None] = {}


class PathMemo:
    """The simulator's record on a PathTable (see the module docstring)."""
    __slots__ = ("rails_per_node", "p2p_plan", "p2p_rounds", "shm_plan", "nccl_shape",
                 "geometry", "ring_busy", "costers")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.rails_per_node: int | None = None
        self.p2p_plan: Any = None  # (NCCL version, p2p.P2PPlan)
        self.p2p_rounds: dict[int, tuple[Ints, list[list[list[int]]]]] = {}  # by ops per peer
        self.shm_plan: ShmPlan | None | Literal[Unset.UNSET] = UNSET
        self.nccl_shape: Any = None  # nccl._Shape
        # (src, dst, channel bytes) -> what a step's routes give, whatever the protocol
        self.geometry: dict[tuple[bytes, bytes, bytes], Geometry] = {}
        # (collective, ranks, channels) -> a ring's busy seconds per link per chunk byte
        self.ring_busy: dict[tuple[str, int, int], Floats] = {}
        self.costers: dict[tuple[Any, float, int], StepCoster] = {}  # (protocol, lanes, ch)


class ScheduleMemo:
    """The simulator's record on a Schedule."""
    __slots__ = ("is_ring", "chain")

    def __init__(self) -> None:
        self.is_ring: bool | None = None
        # (ranks in hop order, pieces, channels) of a chain (chain.chain_shape), None: not one
        self.chain: tuple[Ints, int, int] | None | Literal[Unset.UNSET] = UNSET


def topology_memo(topology: Topology) -> TopologyMemo:
    return topology.cache.of(TopologyMemo)


def schedule_memo(schedule: Schedule) -> ScheduleMemo:
    return schedule.cache.of(ScheduleMemo)


def per_placement(memo: dict[bytes, T], topology: Topology, placement: Ints,
                  build: Callable[[Topology, Ints], T]) -> T:
    """`build(topology, placement)`, remembered in `memo` (a slot of the topology's
    TopologyMemo) by the placement's bytes."""
    key = placement.tobytes()
    if key in memo:
        return memo[key]
    if len(memo) >= PLACEMENTS_KEPT:
        memo.clear()
    out = memo[key] = build(topology, placement)
    return out
