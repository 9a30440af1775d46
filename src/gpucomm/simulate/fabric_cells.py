"""Adaptive routing packet by packet: a two-tier Clos in cell times, with finite buffers.

A fluid model splits a per-packet adaptive flow evenly over its paths, so it cannot say what
per-packet adaptive routing (AR) loses. This model moves packets. Time is counted in cell
times: one MTU packet on one link (every link runs at one rate). Each switch port has an
egress FIFO. A packet counts against the buffer of the port it came in on until it leaves
the switch. A link sends only while the next switch has room for it on that ingress port:
credits on InfiniBand, PFC pause thresholds on lossless Ethernet. A credit comes back a
round trip after the packet has left the next switch.

Only the leaf a packet enters from its host chooses among the spines; the spine's down-port
to the destination leaf is then fixed. The leaf decides in one of four ways:

- `hash`: the flow's hashed spine, fixed (ECMP).
- `spray`: a random spine per packet (oblivious spraying).
- `packet`: the spine whose up-port egress queue is shortest (per-packet AR). The leaf reads
  its queues as they were `reaction` cell times ago. Packets entering one leaf in the same
  cell time take distinct up-ports, shortest queue first.
- `flowlet`: as `packet`, but a flow moves only after it has been idle longer than a gap.
  A saturated sender idles only while it waits for credits. With the `path` view the leaf
  reads each path's congestion to the destination leaf instead, the larger of its up-port
  queue and the spine's down-port queue (Alizadeh et al., CONGA, SIGCOMM 2014: leaf-to-leaf
  feedback, a path's metric the maximum over its links), as it was `reaction` cell times ago
  (CONGA's feedback rides on reverse traffic, so it is at least a round trip old); a leaf
  knows only its own choices of the same cell time.

What per-packet AR loses here is what a fluid model leaves out. Under a permutation every
spine-to-leaf down-link carries, on average, a full link's worth (16 senders each put 1/16
of their packets through each spine). The leaf's choice is blind to those down-links, so
their queues take random bursts at a load of one. A finite buffer fills and stops the
up-link into that spine. Then the packets queued behind on that up-link, bound for other
leaves, wait too: head-of-line blocking by credits or pauses, also called victim flows.
Only then does the source leaf's queue grow and its choice move away. The lost share falls
as the per-port buffer grows, and rises with the reaction time. A deep buffer keeps the
throughput but holds deep queues: pairs that exchange messages in a loop (MPI_Sendrecv,
`message`) wait for each message's last cells, so they pay for the queues at every message.

Wrong: there is one traffic class (no virtual lanes), the crossbar inside a switch never
blocks (a packet reaches its egress FIFO in the cell time it arrives), and a sender is never
short of data (streaming) or of its next message (a loop). Cut-through and store-and-forward
both take one cell time per hop. Congestion control that slows senders before buffers fill
(DCQCN, Spectrum-X's telemetry-based control, InfiniBand's CC) is not modelled; it trades
the victims for lower sender rates.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError

Ints = npt.NDArray[np.int64]
CHOICES = ("hash", "spray", "packet", "flowlet")
VIEWS = ("local", "path")


@dataclass(frozen=True, kw_only=True)
class Clos:
    """A two-tier Clos in cells: `leaves` leaves of `hosts` one-NIC hosts each, `spines`
    spines with one cable to every leaf. All links carry one cell per cell time."""
    leaves: int
    hosts: int
    spines: int

    def __post_init__(self) -> None:
        for name in ("leaves", "hosts", "spines"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"Clos {name} {v!r} not allowed: an integer >= 1")

    @property
    def nhosts(self) -> int:
        return self.leaves * self.hosts


@dataclass(frozen=True, kw_only=True)
class Switching:
    """How the switches move cells: `choice` (CHOICES), `buffer` cells per ingress port,
    `credit_rtt` and `reaction` in cell times, `gap` the flowlet idle gap in cell times,
    `view` what a flowlet's choice reads (VIEWS): the leaf's own up-port queues (`local`),
    or each path's congestion to the destination leaf, the larger of its up-port queue and
    the spine's down-port queue (`path`: CONGA's leaf-to-leaf feedback)."""
    choice: str
    buffer: int
    credit_rtt: int = 1
    reaction: int = 0
    gap: int = 0
    view: str = "local"

    def __post_init__(self) -> None:
        if self.choice not in CHOICES:
            raise ConfigError(f"choice {self.choice!r} not allowed: one of {', '.join(CHOICES)}")
        if self.view not in VIEWS or (self.view == "path" and self.choice != "flowlet"):
            raise ConfigError(f"view {self.view!r} not allowed: one of {', '.join(VIEWS)}; "
                              "'path' only with choice 'flowlet'")
        for name, low in (("buffer", 1), ("credit_rtt", 1), ("reaction", 0), ("gap", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ConfigError(f"switching {name} {v!r} not allowed: an integer >= {low}")


def pair_rates(clos: Clos, dests: Ints, sw: Switching, *, cells: int, warmup: int,
               seed: int, message: int = 0) -> npt.NDArray[np.float64]:
    """Per pattern (a row of `dests`: each host's destination) and host: the cells per cell
    time its flow delivers, counted over `cells` cell times after `warmup`. The patterns run
    at once, each on its own copy of the fabric. `message` 0: every host always sends;
    else hosts exchange in pairs (dests[dests[h]] == h) as MPI_Sendrecv in a loop: a host
    sends `message` cells, then waits until both its message and its partner's have
    arrived."""
    dests = np.atleast_2d(np.asarray(dests, dtype=np.int64))
    n = clos.nhosts
    if dests.ndim != 2 or dests.shape[1] != n or dests.min(initial=0) < 0 or \
            dests.max(initial=0) >= n:
        raise ConfigError(f"each pattern must give each of the {n} hosts a host 0..{n - 1}")
    for name, v in (("cells", cells), ("warmup", warmup)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (name == "cells"):
            raise ConfigError(f"{name} {v!r} not allowed: an integer >= {int(name == 'cells')}")
    if isinstance(message, bool) or not isinstance(message, int) or message < 0 or \
            (message and (np.take_along_axis(dests, dests, 1) != np.arange(n)).any()):
        raise ConfigError(f"message {message!r} not allowed: cells >= 0, and > 0 only for "
                          "hosts in pairs (each host's destination sends back to it)")
    flat = (dests + n * np.arange(len(dests))[:, None]).ravel()
    sim = _Cells(clos, flat, sw, seed, message)
    for t in range(warmup):
        sim.step(t)
    sim.delivered[:] = 0
    for t in range(warmup, warmup + cells):
        sim.step(t)
    out: npt.NDArray[np.float64] = (sim.delivered / float(cells)).reshape(dests.shape)
    return out


class _Cells:
    """The state of one run. Egress queues: up-ports (leaf l, spine s) at l*S + s, down-ports
    (spine s, leaf l) at L*S + s*L + l, host ports at 2*L*S + h. Ingress links carrying
    credits: host h's link at h, then the up- and down-ports' cables at N + queue. A cell is
    its flow (the sending host) and the spine it took (S: none, a leaf-local flow)."""

    def __init__(self, clos: Clos, dest: Ints, sw: Switching, seed: int,
                 message: int = 0) -> None:
        L, H, S = clos.leaves, clos.hosts, clos.spines
        N = len(dest)  # copies of the fabric side by side: hosts of copy c at c*nhosts..
        self.L, self.H, self.S, self.N, self.sw = L, H, S, N, sw
        self.LS = N // H * S
        self.dest = dest
        self.leaf = np.arange(N) // H
        self.dleaf = self.leaf[dest]
        self.local = self.leaf == self.dleaf
        self.rng = np.random.default_rng([seed, 0xCE11])
        nq, nl = 2 * self.LS + N, N + 2 * self.LS
        # queues share one pool of cell slots, linked in FIFO order: a switch holds at most
        # `buffer` cells per ingress link, so the pool never runs out
        pool = nl * sw.buffer
        self.cell = np.zeros(pool, dtype=np.int64)
        self.next = np.full(pool, -1, dtype=np.int64)
        self.free = np.arange(pool, dtype=np.int64)[::-1].copy()
        self.nfree = pool
        self.head = np.full(nq, -1, dtype=np.int64)
        self.tail = np.full(nq, -1, dtype=np.int64)
        self.length = np.zeros(nq, dtype=np.int64)
        self.credits = np.full(nl, sw.buffer, dtype=np.int64)
        self.ret = np.zeros((sw.credit_rtt + 1, nl), dtype=np.int64)
        self.seen = np.zeros((sw.reaction + 1, N // H, S), dtype=np.int64)
        self.seen_down = np.zeros((sw.reaction + 1, N // H, S), dtype=np.int64) \
            if sw.view == "path" else self.seen
        self.hashed = self.rng.integers(0, S, N)
        self.path = self.hashed.copy()
        self.last = np.full(N, -1 << 40, dtype=np.int64)
        self.delivered = np.zeros(N, dtype=np.float64)
        self.message = message
        self.sent = np.zeros(N, dtype=np.int64)  # this message's cells sent, and arrived
        self.got = np.zeros(N, dtype=np.int64)

    def _down(self, s: Ints, leaf: Ints) -> Ints:
        """The queue of spine s's down-port to global leaf `leaf` (spines of its copy)."""
        L, S = self.L, self.S
        return self.LS + (leaf // L) * S * L + s * L + leaf % L

    def step(self, t: int) -> None:
        S, LS, N = self.S, self.LS, self.N
        ring = len(self.ret)
        self.credits += self.ret[t % ring]
        self.ret[t % ring] = 0
        ok = self.length > 0
        ok[: 2 * LS] &= self.credits[N: N + 2 * LS] > 0
        q = np.flatnonzero(ok)
        cell = self._pop(q)
        f, s = cell // (S + 1), cell % (S + 1)
        fwd = q < 2 * LS
        self.credits[N + q[fwd]] -= 1
        back = self.ret[(t + self.sw.credit_rtt) % ring]
        back += np.bincount(self._ingress(q, f, s), minlength=len(back))
        home = ~fwd
        arrived = np.bincount(f[home], minlength=N)
        self.delivered += arrived
        if self.message:  # a pair whose two messages have arrived starts the next
            self.got += arrived
            done = (self.got >= self.message) & (self.got[self.dest] >= self.message)
            self.sent[done], self.got[done] = 0, 0
        up = q < LS
        nxt = np.where(up, self._down(s, self.dleaf[f]), 2 * LS + self.dest[f])[fwd]
        hq, hcell = self._inject(t)
        self._enqueue(np.concatenate([nxt, hq]), np.concatenate([cell[fwd], hcell]))
        self.seen[t % len(self.seen)] = self.length[:LS].reshape(-1, S)
        if self.sw.view == "path":  # per destination leaf and spine: the down-port queue
            down = self.length[LS: 2 * LS].reshape(-1, S, self.L)
            self.seen_down[t % len(self.seen)] = down.transpose(0, 2, 1).reshape(-1, S)

    def _ingress(self, q: Ints, f: Ints, s: Ints) -> Ints:
        """The ingress link each departing cell leaves the buffer of."""
        LS, N = self.LS, self.N
        at_spine = (q >= LS) & (q < 2 * LS)
        at_dest = q >= 2 * LS
        from_spine = N + self._down(s, self.dleaf[f])
        out = np.where(at_spine, N + self.leaf[f] * self.S + s, f)
        return np.where(at_dest & (s < self.S), from_spine, out)

    def _inject(self, t: int) -> tuple[Ints, Ints]:
        """Every host with a credit sends one cell into its leaf; remote ones get a spine."""
        S, LS = self.S, self.LS
        ready = self.credits[: self.N] > 0
        if self.message:
            ready &= self.sent < self.message
        h = np.flatnonzero(ready)
        self.sent[h] += 1
        self.credits[h] -= 1
        s = np.full(len(h), S, dtype=np.int64)
        far = ~self.local[h]
        hf = h[far]
        choice = self.sw.choice
        if choice == "hash":
            s[far] = self.hashed[hf]
        elif choice == "spray":
            s[far] = self.rng.integers(0, S, len(hf))
        else:
            move = np.ones(len(hf), dtype=bool) if choice == "packet" else \
                t - self.last[hf] > self.sw.gap + 1
            if move.any() and self.sw.view == "path":
                self.path[hf[move]] = self._least_congested(hf[move], t)
            elif move.any():
                self.path[hf[move]] = self._least_loaded(self.leaf[hf[move]], t)
            s[far] = self.path[hf]
            self.last[hf] = t
        q = np.where(s < S, self.leaf[h] * S + s, 2 * LS + self.dest[h])
        return q, h * (S + 1) + s

    def _least_loaded(self, leaf: Ints, t: int) -> Ints:
        """Up-ports for cells entering `leaf` now: the leaf's queues as it saw them
        `reaction` cell times ago, shortest first (ties at random); the cells entering one
        leaf in one cell time take distinct ports in that order (a cell time carries one
        cell per port), in a random order of the cells."""
        view = self.seen[(t - self.sw.reaction - 1) % len(self.seen)]
        ports = np.argsort(view + self.rng.random(view.shape) * 0.5, axis=1)
        key = leaf * (self.N + 1) + self.rng.permutation(len(leaf))
        order = np.argsort(key)
        lv = leaf[order]
        rank = np.arange(len(leaf)) - np.searchsorted(lv, lv, side="left")
        out = np.empty(len(leaf), dtype=np.int64)
        out[order] = ports[lv, rank % self.S]
        return out

    def _least_congested(self, h: Ints, t: int) -> Ints:
        """Spines for flowlets of hosts `h` starting now (CONGA): each path's congestion to
        the flow's destination leaf, the larger of the leaf's up-port queue and the spine's
        down-port queue as they were `reaction` cell times ago, least first (ties at
        random); flowlets starting at once at one leaf are placed one at a time in a random
        order, each counted on its path for the next (a leaf knows only its own choices)."""
        k = (t - self.sw.reaction - 1) % len(self.seen)
        up, down = self.seen[k], self.seen_down[k]
        mine: dict[tuple[int, int], npt.NDArray[np.int64]] = {}
        out = np.empty(len(h), dtype=np.int64)
        for i in self.rng.permutation(len(h)).tolist():
            a, b = int(self.leaf[h[i]]), int(self.dleaf[h[i]])
            to_b = mine.setdefault((a, b), np.zeros(self.S, dtype=np.int64))
            on_a = mine.setdefault((a, -1), np.zeros(self.S, dtype=np.int64))
            score = np.maximum(up[a] + on_a, down[b] + to_b) + self.rng.random(self.S) * 0.5
            out[i] = s = int(np.argmin(score))
            to_b[s] += 1
            on_a[s] += 1
        return out

    def _pop(self, q: Ints) -> Ints:
        """Take the head cell of each queue in `q` (each non-empty, listed once)."""
        slot = self.head[q]
        self.head[q] = self.next[slot]
        self.length[q] -= 1
        self.tail[q[self.length[q] == 0]] = -1
        self.free[self.nfree: self.nfree + len(slot)] = slot
        self.nfree += len(slot)
        return self.cell[slot]

    def _enqueue(self, q: Ints, cell: Ints) -> None:
        """Append cells to egress FIFOs; cells reaching one queue at once in random order."""
        n = len(q)
        if not n:
            return
        order = np.argsort(q * (n + 1) + self.rng.permutation(n))
        q, cell = q[order], cell[order]
        slot = self.free[self.nfree - n: self.nfree]
        self.nfree -= n
        self.cell[slot] = cell
        self.next[slot] = -1
        same = q[1:] == q[:-1]  # chain the cells of one queue in order
        self.next[slot[:-1][same]] = slot[1:][same]
        first = np.ones(n, dtype=bool)
        first[1:] = ~same
        last = np.ones(n, dtype=bool)
        last[:-1] = ~same
        fq, lq = q[first], q[last]
        empty = self.length[fq] == 0
        self.head[fq[empty]] = slot[first][empty]
        self.next[self.tail[fq[~empty]]] = slot[first][~empty]
        self.tail[lq] = slot[last]
        self.length += np.bincount(q, minlength=len(self.length))
