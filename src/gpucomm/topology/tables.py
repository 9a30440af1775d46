"""Columnar device and link lists for clusters of identical nodes.

A cluster of N copies of one node holds N x (devices, links) of the node plus the fabric.
`DeviceTable` and `LinkTable` keep them as numpy columns (a node template and index arrays)
and make a `Device`/`Link` value only when one is asked for, so a 100,000-GPU cluster costs
tens of MB and well under a second to build instead of a million Python objects. They are
read-only sequences equal to (and hashing like) the tuples of the same values.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike

from .elements import Device, Link, checked_device, checked_link


_T = TypeVar("_T")


class _Table(Sequence[_T]):
    """A read-only sequence that equals and hashes like the tuple of its items. The first
    full iteration keeps the items (code that walks every link once tends to walk them
    again); lookups by index make one item."""

    _items: tuple | None = None

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self.item(j) for j in range(*i.indices(len(self))))
        i = operator.index(i)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{type(self).__name__} index out of range")
        return self.item(i)

    def __iter__(self):
        if self._items is None:
            self._items = tuple(self._make_all())
        return iter(self._items)

    def _make_all(self):
        item = self.item
        return (item(i) for i in range(len(self)))

    def __eq__(self, other):
        if self is other:
            return True
        same = self._same_columns(other)
        if same is not None:
            return same
        if isinstance(other, (tuple, _Table)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return hash(tuple(self))

    def __getstate__(self):
        state = dict(self.__dict__, _items=None)   # the columns only: made again on use
        if "_names" in state:
            state["_names"], state["_remembered"] = None, []
        return state

    def __repr__(self):
        return f"<{type(self).__name__} of {len(self)}>"

    def item(self, i: int) -> _T:
        raise NotImplementedError

    def _same_columns(self, other):
        """True/False where the columns decide equality at once; None: compare items."""
        return None


class DeviceTable(_Table[Device]):
    """`nodes` copies of `template` (device j of node k is `n{k}.{name}` on node k, at index
    k * len(template) + j), then the `fabric` devices (fabric switches)."""

    def __init__(self, template: Sequence[Device], nodes: int, fabric: Sequence[Device] = ()):
        self.template, self.nodes, self.fabric = tuple(template), int(nodes), tuple(fabric)
        self.per = len(self.template)
        self.base = self.nodes * self.per
        self._pos = {d.name: j for j, d in enumerate(self.template)}
        self._fabric_pos = {d.name: self.base + j for j, d in enumerate(self.fabric)}
        # (names, their positions) of the tuples remember() made (a cluster's ranks, its NICs)
        self._remembered: list[tuple[tuple[str, ...], list[int]]] = []
        self._names: list[str] | None = None
        if len(self._pos) != self.per or len(self._fabric_pos) != len(self.fabric):
            raise ValueError("device names must be unique in the template and in the fabric")
        clash = next((n for n in self._fabric_pos if self._node_position(n) is not None), None)
        if clash is not None:
            raise ValueError(f"fabric device {clash!r} has the name of a node's device")

    def __len__(self) -> int:
        return self.base + len(self.fabric)

    def _same_columns(self, other):
        if isinstance(other, DeviceTable) and (self.template, self.nodes, self.fabric) == \
                (other.template, other.nodes, other.fabric):
            return True
        return None

    def name(self, i: int) -> str:
        if self._names is not None:
            return self._names[i]
        if i >= self.base:
            return self.fabric[i - self.base].name
        k, j = divmod(i, self.per)
        return f"n{k}.{self.template[j].name}"

    def all_names(self) -> list[str]:
        """The name of every device, by index (kept once made)."""
        if self._names is None:
            names = []
            for k in range(self.nodes):
                names += [f"n{k}.{t.name}" for t in self.template]
            self._names = names + [d.name for d in self.fabric]
        return self._names

    def item(self, i: int) -> Device:
        if self._items is not None:
            return self._items[i]
        if i >= self.base:
            return self.fabric[i - self.base]
        k, j = divmod(i, self.per)
        t = self.template[j]
        return checked_device(self.name(i), t.kind, k, t.model)

    def _make_all(self):
        names = self.all_names()
        for k in range(self.nodes):
            off = k * self.per
            yield from (checked_device(names[off + j], t.kind, k, t.model)
                        for j, t in enumerate(self.template))
        yield from self.fabric

    def _node_position(self, name: str):
        head, dot, rest = name.partition(".")
        if not dot or len(head) < 2 or head[0] != "n" or not head[1:].isdigit() \
                or (head[1] == "0" and len(head) > 2):
            return None
        k, j = int(head[1:]), self._pos.get(rest)
        if j is None or k >= self.nodes:
            return None
        return k * self.per + j

    def position(self, name: str):
        """The index of the device named `name`, or None."""
        if not isinstance(name, str):
            return None
        p = self._fabric_pos.get(name)
        return p if p is not None else self._node_position(name)

    def positions(self, names) -> list:
        """position() of each name (None where there is no such device)."""
        for known, at in self._remembered:
            if known is names:   # made by remember(): known positions
                return at
        return [self.position(n) for n in names]

    def remember(self, template_names) -> tuple[str, ...]:
        """The names of `template_names` (template devices) in every node, node-major; their
        positions are kept for positions() of this very tuple (a cluster's ranks, its NICs:
        no name of 100,000 is parsed or hashed to find it)."""
        names: list[str] = []
        for k in range(self.nodes):
            names += [f"n{k}.{t}" for t in template_names]
        pos = np.asarray([self._pos[t] for t in template_names], dtype=np.int64)
        at = ((np.arange(self.nodes, dtype=np.int64) * self.per)[:, None] + pos).ravel()
        out = tuple(names)
        self._remembered.append((out, at.tolist()))
        return out

    def node_array(self) -> np.ndarray:
        return np.concatenate([np.repeat(np.arange(self.nodes, dtype=np.int64), self.per),
                               np.array([d.node for d in self.fabric], dtype=np.int64)])

    def kinds(self) -> list[str]:
        return [d.kind for d in self.template] * self.nodes + [d.kind for d in self.fabric]

    def kind_codes(self, kinds: Sequence[str]) -> np.ndarray:
        """Each device's kind as its index in `kinds` (int8)."""
        code = {k: i for i, k in enumerate(kinds)}
        return np.concatenate([np.tile(np.array([code[d.kind] for d in self.template],
                                                dtype=np.int8), self.nodes),
                               np.array([code[d.kind] for d in self.fabric], dtype=np.int8)])


class NameIndex:
    """name -> device index of a DeviceTable, as a read-only mapping (KeyError if absent)."""

    def __init__(self, table: DeviceTable):
        self.table = table

    def __getitem__(self, name):
        p = self.table.position(name)
        if p is None:
            raise KeyError(name)
        return p

    def get(self, name, default=None):
        p = self.table.position(name)
        return default if p is None else p

    def __contains__(self, name) -> bool:
        return self.table.position(name) is not None

    def __len__(self) -> int:
        return len(self.table)


class LinkTable(_Table[Link]):
    """Links as columns: src/dst device indices into `devices`, bandwidth, latency,
    efficiency, and a technology code into `techs`."""

    def __init__(self, devices: DeviceTable, src, dst, bandwidth_Bps, latency_s, efficiency,
                 tech_code, techs: Sequence[str]):
        self.devices = devices
        self.src = np.ascontiguousarray(src, dtype=np.int64)
        self.dst = np.ascontiguousarray(dst, dtype=np.int64)
        self.bw = np.ascontiguousarray(bandwidth_Bps, dtype=np.float64)
        self.lat = np.ascontiguousarray(latency_s, dtype=np.float64)
        self.eff = np.ascontiguousarray(efficiency, dtype=np.float64)
        self.tech = np.ascontiguousarray(tech_code, dtype=np.int32)
        self.techs = tuple(techs)
        for a in (self.src, self.dst, self.bw, self.lat, self.eff, self.tech):
            a.flags.writeable = False

    def __len__(self) -> int:
        return len(self.src)

    def _same_columns(self, other):
        if isinstance(other, LinkTable) and self.devices == other.devices \
                and self.techs == other.techs \
                and all(np.array_equal(a, b) for a, b in zip(self._columns(), other._columns())):
            return True
        return None

    def _columns(self):
        return (self.src, self.dst, self.bw, self.lat, self.eff, self.tech)

    def item(self, i: int) -> Link:
        if self._items is not None:
            return self._items[i]
        name = self.devices.name
        return checked_link(name(int(self.src[i])), name(int(self.dst[i])), float(self.bw[i]),
                            float(self.lat[i]), self.techs[int(self.tech[i])],
                            float(self.eff[i]))

    def _make_all(self):
        name, techs = self.devices.all_names().__getitem__, self.techs
        cols = zip(self.src.tolist(), self.dst.tolist(), self.bw.tolist(), self.lat.tolist(),
                   self.tech.tolist(), self.eff.tolist())
        return (checked_link(name(s), name(d), b, la, techs[t], e)
                for s, d, b, la, t, e in cols)


# A fabric's links as columns: (src, dst, bandwidth_Bps, latency_s, efficiency, tech), the ends
# device indices; tech is (the technology names, a code per link into them)
FabricColumns = tuple[ArrayLike, ArrayLike, ArrayLike, ArrayLike, ArrayLike,
                      tuple[Sequence[str], ArrayLike]]


def replicate_links(devices: DeviceTable, node_links: Sequence[Link],
                    fabric_cols: FabricColumns) -> LinkTable:
    """The LinkTable of `devices`: the template's links (Link values between template devices)
    copied into every node, in node order, then the fabric's links as columns
    (src, dst, bandwidth, latency, efficiency, tech), device indices into `devices`; tech is
    (names, a code per link into names)."""
    pos = {d.name: j for j, d in enumerate(devices.template)}
    techs: dict[str, int] = {}
    code = [techs.setdefault(ln.tech, len(techs)) for ln in node_links]
    tsrc = np.array([pos[ln.src] for ln in node_links], dtype=np.int64)
    tdst = np.array([pos[ln.dst] for ln in node_links], dtype=np.int64)
    shift = (np.arange(devices.nodes, dtype=np.int64) * devices.per)[:, None]
    fsrc, fdst, fbw, flat, feff, (fnames, fcodes) = fabric_cols
    remap = np.array([techs.setdefault(t, len(techs)) for t in fnames] or [0], dtype=np.int32)
    fcode = remap[np.asarray(fcodes, dtype=np.int64)]

    def tile(values):
        return np.tile(np.asarray(values, dtype=np.float64), devices.nodes)
    return LinkTable(
        devices,
        np.concatenate([(tsrc[None, :] + shift).ravel(), np.asarray(fsrc, dtype=np.int64)]),
        np.concatenate([(tdst[None, :] + shift).ravel(), np.asarray(fdst, dtype=np.int64)]),
        np.concatenate([tile([ln.bandwidth_Bps for ln in node_links]), fbw]),
        np.concatenate([tile([ln.latency_s for ln in node_links]), flat]),
        np.concatenate([tile([ln.efficiency for ln in node_links]), feff]),
        np.concatenate([np.tile(np.asarray(code, dtype=np.int32), devices.nodes),
                        np.asarray(fcode, dtype=np.int32)]),
        list(techs))
