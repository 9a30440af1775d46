"""Thin wrappers over `ip` and `tc`: namespaces, veth pairs, a bridge, rate limits, clean-up.

Every object lives inside network namespaces named with a prefix, never in the caller's
namespace: veth ends are created directly in their namespaces, so nothing here touches the
host's own interfaces or routes, and traffic between the namespaces cannot leave them.
"""
from __future__ import annotations

import os
import shutil
import subprocess

from ..errors import ConfigError, TransportError
from ..runtime.shm import pid_alive

PREFIX = "gcx"  # every namespace the harness makes starts with this


def sh(*argv: str, check: bool = True, timeout: float = 10.0) -> subprocess.CompletedProcess:
    """Run a command; on failure a TransportError with the command and its stderr."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise TransportError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): "
                             f"{(proc.stderr or proc.stdout).strip()[:300]}")
    return proc


def in_ns(ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return sh("ip", "netns", "exec", ns, *argv, check=check)


def add_ns(ns: str) -> None:
    sh("ip", "netns", "add", ns)
    sh("ip", "-n", ns, "link", "set", "lo", "up")
    # Per-namespace TCP knobs: no slow-start restart between a collective's steps.
    in_ns(ns, "sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=0", check=False)


def del_ns(ns: str) -> None:
    kill_ns_pids(ns)
    sh("ip", "netns", "del", ns, check=False)


def kill_ns_pids(ns: str) -> None:
    """Kill what still runs inside a namespace the harness made (its own children)."""
    proc = sh("ip", "netns", "pids", ns, check=False)
    for pid in proc.stdout.split():
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError, PermissionError):
            pass


def add_veth(ns_a: str, name_a: str, ns_b: str, name_b: str, mtu: int) -> None:
    """A veth pair with one end in each namespace (created there, never in ours)."""
    sh("ip", "link", "add", name_a, "netns", ns_a, "mtu", str(mtu), "type", "veth",
       "peer", "name", name_b, "netns", ns_b, "mtu", str(mtu))


def add_bridge(ns: str, name: str, ports: list[str]) -> None:
    sh("ip", "-n", ns, "link", "add", name, "type", "bridge")
    for p in ports:
        sh("ip", "-n", ns, "link", "set", p, "master", name)
        sh("ip", "-n", ns, "link", "set", p, "up")
    sh("ip", "-n", ns, "link", "set", name, "up")


def set_addr(ns: str, dev: str, cidr: str) -> None:
    sh("ip", "-n", ns, "addr", "add", cidr, "dev", dev)
    sh("ip", "-n", ns, "link", "set", dev, "up")


def link_state(ns: str, dev: str, up: bool) -> None:
    sh("ip", "-n", ns, "link", "set", dev, "up" if up else "down")


def shape(ns: str, dev: str, rate_bps: float, qdisc: str, mtu: int) -> str:
    """Limit `dev`'s egress to `rate_bps` bits/s with tbf or htb; returns the qdisc text.

    The bucket holds a millisecond at the rate (at least two full frames), so the shaper
    needs no timer finer than the kernel's, and the queue ~5 ms, so TCP fills the pipe.
    """
    rate = f"{int(rate_bps)}bit"
    burst = max(int(rate_bps / 8 * 1e-3), 2 * (mtu + 14), 16 * 1024)
    if qdisc == "tbf":
        sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
           "burst", str(burst), "latency", "5ms")
    elif qdisc == "htb":
        sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb",
           "default", "10")
        sh("tc", "-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10",
           "htb", "rate", rate, "ceil", rate, "burst", str(burst), "cburst", str(burst))
    else:
        raise ConfigError(f"unknown qdisc {qdisc!r}: allowed are tbf, htb")
    return sh("tc", "-n", ns, "qdisc", "show", "dev", dev).stdout.strip()


def list_ns(prefix: str = PREFIX) -> list[str]:
    proc = sh("ip", "netns", "list", check=False)
    names = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    return [n for n in names if n.startswith(prefix)]


def sweep(prefix: str = PREFIX, keep_pids: tuple = ()) -> list[str]:
    """Delete namespaces left by harness runs whose process is gone; returns their names.

    Names are `<prefix><owner pid>-<role>`, so a live run's namespaces are kept.
    """
    removed = []
    for ns in list_ns(prefix):
        owner = ns[len(prefix):].split("-", 1)[0]
        if owner.isdigit() and (int(owner) in keep_pids or pid_alive(int(owner))):
            continue
        del_ns(ns)
        removed.append(ns)
    return removed


def available() -> tuple[bool, str]:
    """(True, "") if this process can make namespaces and shape links, else (False, why)."""
    if os.name != "posix" or not os.path.exists("/proc/self/ns/net"):
        return False, "network namespaces need Linux"
    if os.geteuid() != 0:
        return False, "network namespaces need root (run as root or with CAP_NET_ADMIN)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"`{tool}` is not installed (apt-get install iproute2)"
    ns = f"{PREFIX}{os.getpid()}-probe"
    try:
        add_ns(ns)
        try:
            add_veth(ns, "a0", ns, "b0", 1500)
            shape(ns, "a0", 1e9, "tbf", 1500)
        finally:
            del_ns(ns)
    except (TransportError, OSError, subprocess.SubprocessError) as e:
        return False, f"cannot create a network namespace with a shaped veth here: {e}"
    return True, ""
