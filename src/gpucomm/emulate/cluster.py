"""An emulated cluster on one machine: hosts are network namespaces, links are shaped veths.

    >>> with EmulatedCluster(ClusterSpec(hosts=2, ranks_per_host=2,  # doctest: +SKIP
    ...                                  rate_bps=1e9)) as c:
    ...     m = c.measure()                       # latency and goodput the harness sees
    ...     c.write_topology("emulated.yaml", m)  # for `gpucomm sim --topology emulated.yaml`
    ...     procs = c.launch([sys.executable, "train.py"])   # RANK/WORLD_SIZE/MASTER_* set
    ...     c.wait(procs, timeout=60)

Layout: namespace `<prefix><pid>-h<i>` per host with `eth0` at 198.18.0.<i+1>/24 (RFC 2544's
benchmarking range, used only inside these namespaces), joined by veth pairs to a bridge in a
namespace of its own (`-sw`), or for two hosts with `bridge=False` directly to each other.
Each direction of a host's link is rate-limited with tbf or htb at its egress (the host's
`eth0`, the switch's port), like a full-duplex Ethernet link; ranks on one host talk over the
namespace's loopback, unshaped. The kernel here has no netem, so no latency is added: the
harness measures the latency it gets and writes that into the topology.

Clean-up runs on exit of the `with` block, at interpreter exit (atexit) and, for namespaces
left by runs that died, by `netns.sweep()` on the next start.
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CommTimeout, ConfigError, TransportError
from ..outputs import write_text
from . import netns

SUBNET = "198.18.0"  # RFC 2544 benchmarking range; only ever assigned inside our namespaces


@dataclass(frozen=True)
class ClusterSpec:
    hosts: int = 2
    ranks_per_host: int = 2
    rate_bps: float = 1e9  # per direction, bits/s as tc counts them (link-layer bytes)
    qdisc: str = "tbf"  # "tbf" or "htb"
    bridge: bool = True
    mtu: int = 1500

    def __post_init__(self):
        if not (isinstance(self.hosts, int) and 2 <= self.hosts <= 200):
            raise ConfigError(f"hosts must be an integer in 2..200, got {self.hosts!r}")
        if not (isinstance(self.ranks_per_host, int) and self.ranks_per_host >= 1):
            raise ConfigError(f"ranks_per_host must be an integer >= 1, got "
                              f"{self.ranks_per_host!r}")
        if not self.rate_bps > 0:
            raise ConfigError(f"rate_bps must be > 0, got {self.rate_bps!r}")
        if self.qdisc not in ("tbf", "htb"):
            raise ConfigError(f"qdisc {self.qdisc!r}: allowed are tbf, htb")
        if not self.bridge and self.hosts != 2:
            raise ConfigError("bridge=False joins exactly two hosts back to back; "
                              f"{self.hosts} hosts need bridge=True")
        if not 576 <= self.mtu <= 65535:
            raise ConfigError(f"mtu {self.mtu} must be in 576..65535")

    @property
    def nranks(self) -> int:
        return self.hosts * self.ranks_per_host


@dataclass(frozen=True)
class Measured:
    """What the harness measured: one-way latency and goodput, between hosts and within one."""
    inter_latency_s: float
    inter_bandwidth_Bps: float
    intra_latency_s: float
    intra_bandwidth_Bps: float
    raw: dict = field(default_factory=dict, compare=False)


class EmulatedCluster:
    def __init__(self, spec: ClusterSpec = ClusterSpec(), prefix: str = netns.PREFIX):
        self.spec, self.prefix = spec, prefix
        tag = f"{prefix}{os.getpid()}"
        self.hosts = [f"{tag}-h{i}" for i in range(spec.hosts)]
        self.switch = f"{tag}-sw" if spec.bridge else None
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(spec.hosts)]
        self.qdiscs: dict = {}
        self._procs: list = []
        self._up = False

    # --- life cycle ---------------------------------------------------------------------
    def __enter__(self) -> "EmulatedCluster":
        self.create()
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def create(self) -> None:
        ok, why = netns.available()
        if not ok:
            raise TransportError(f"cannot build an emulated cluster: {why}")
        netns.sweep(self.prefix)
        atexit.register(self.destroy)
        self._up = True
        s = self.spec
        try:
            for ns in self.hosts + ([self.switch] if self.switch else []):
                netns.add_ns(ns)
            if self.switch:
                ports = []
                for i, ns in enumerate(self.hosts):
                    netns.add_veth(ns, "eth0", self.switch, f"p{i}", s.mtu)
                    ports.append(f"p{i}")
                netns.add_bridge(self.switch, "br0", ports)
                for i in range(s.hosts):
                    self.qdiscs[(self.switch, f"p{i}")] = netns.shape(
                        self.switch, f"p{i}", s.rate_bps, s.qdisc, s.mtu)
            else:
                netns.add_veth(self.hosts[0], "eth0", self.hosts[1], "eth0", s.mtu)
            for ns, addr in zip(self.hosts, self.addresses):
                netns.set_addr(ns, "eth0", f"{addr}/24")
                self.qdiscs[(ns, "eth0")] = netns.shape(ns, "eth0", s.rate_bps, s.qdisc, s.mtu)
        except Exception:
            self.destroy()
            raise

    def destroy(self) -> None:
        """Stop every process started here and delete every namespace (idempotent)."""
        for p in self._procs:
            _kill(p)
        self._procs.clear()
        if self._up:
            for ns in self.hosts + ([self.switch] if self.switch else []):
                netns.del_ns(ns)
            self._up = False
        try:
            atexit.unregister(self.destroy)
        except Exception:  # interpreter shutting down
            pass

    # --- faults ---------------------------------------------------------------------------
    def cut(self, host: int) -> None:
        """Take host `host`'s link down (`ip link set down`), as if its cable were pulled."""
        ns, dev = (self.switch, f"p{host}") if self.switch else (self.hosts[host], "eth0")
        netns.link_state(ns, dev, up=False)

    def restore(self, host: int) -> None:
        ns, dev = (self.switch, f"p{host}") if self.switch else (self.hosts[host], "eth0")
        netns.link_state(ns, dev, up=True)

    # --- processes ------------------------------------------------------------------------
    def popen(self, host: int, argv: list, env: dict | None = None, **kw) -> subprocess.Popen:
        """Start `argv` inside host `host`'s namespace; it is killed by destroy()."""
        full = dict(os.environ)
        full["PYTHONPATH"] = os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), full.get("PYTHONPATH", "")]).rstrip(":")
        full.update(env or {})
        p = subprocess.Popen(["ip", "netns", "exec", self.hosts[host], *argv], env=full,
                             start_new_session=True, **kw)
        self._procs.append(p)
        return p

    def rank_env(self, rank: int, port: int = 29500) -> dict:
        """torchrun-style variables for `rank`, with gloo bound to the host's eth0."""
        rph = self.spec.ranks_per_host
        return {"RANK": str(rank), "WORLD_SIZE": str(self.spec.nranks),
                "LOCAL_RANK": str(rank % rph), "LOCAL_WORLD_SIZE": str(rph),
                "GROUP_RANK": str(rank // rph), "MASTER_ADDR": self.addresses[0],
                "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "eth0",
                "OMP_NUM_THREADS": "1", "TORCH_CPP_LOG_LEVEL": "ERROR"}

    def launch(self, argv: list, port: int = 29500, env: dict | None = None,
               agent_store: bool = True, **kw) -> list:
        """One process per rank (node-major: ranks 0..R-1 on host 0, ...).

        With `agent_store` the job's TCPStore runs in a process of its own on host 0, as
        torchrun's agent hosts it, so it survives the death of any rank (ranks connect to it
        as clients: TORCHELASTIC_USE_AGENT_STORE). It is stopped by destroy()."""
        env = dict(env or {})
        if agent_store:
            self.popen(0, [sys.executable, "-m", "gpucomm.emulate.worker", "store",
                           "--duration", "3600"], self.rank_env(0, port),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
        return [self.popen(r // self.spec.ranks_per_host, argv,
                           {**self.rank_env(r, port), **env}, **kw)
                for r in range(self.spec.nranks)]

    def wait(self, procs: list, timeout: float) -> list:
        """(returncode, stdout, stderr) per process; CommTimeout naming the ranks still running."""
        deadline = time.monotonic() + timeout
        results = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                late = [i for i, q in enumerate(procs) if q.poll() is None]
                for q in procs:
                    _kill(q)
                raise CommTimeout(f"ranks {late} still running after {timeout:.0f} s; "
                                  "killed") from None
            results.append((p.returncode, out, err))
        return results

    # --- measurement ------------------------------------------------------------------------
    def measure(self, nbytes: int = 16 << 20, pings: int = 500, port: int = 5201) -> Measured:
        """Latency (TCP ping-pong) and goodput (bulk TCP) from host 0 to host 1 and within
        host 0 over loopback; the probe runs inside the namespaces."""
        inter = self._probe(0, 1, self.addresses[1], nbytes, pings, port)
        intra = self._probe(0, 0, "127.0.0.1", nbytes * 4, pings, port + 1)
        return Measured(inter["latency_s"], inter["bandwidth_Bps"], intra["latency_s"],
                        intra["bandwidth_Bps"], {"inter": inter, "intra": intra})

    def _probe(self, client: int, server: int, addr: str, nbytes: int, pings: int,
               port: int) -> dict:
        py = [sys.executable, "-m", "gpucomm.emulate.probe"]
        srv = self.popen(server, [*py, "serve", "--port", str(port), "--timeout", "30"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cli = self.popen(client, [*py, "measure", "--host", addr, "--port", str(port),
                                  "--pings", str(pings), "--nbytes", str(nbytes)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        (rc, out, err), _ = self.wait([cli, srv], timeout=60)
        if rc != 0:
            raise TransportError(f"probe host {client} -> {addr} failed: {err.strip()[-300:]}")
        return json.loads(out.strip().splitlines()[-1])

    # --- topology ---------------------------------------------------------------------------
    def topology(self, measured: Measured):
        """The emulated cluster as a gpucomm Topology (see topology.emulated_topology)."""
        from .topology import emulated_topology
        return emulated_topology(self.spec, measured)

    def write_topology(self, path, measured: Measured) -> str:
        from .topology import emulated_topology_yaml
        text = emulated_topology_yaml(self.spec, measured, self.qdiscs)
        write_text(path, text, "topology")
        return text


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGKILL)  # the `ip netns exec` and what it started
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
