"""Lossy RoCE: go-back-N goodput, and its retransmission timeouts.

Without PFC a RoCE NIC (ConnectX before selective repeat) answers a lost packet by resending
everything after it: W packets, the window in flight (bandwidth x round trip / MTU). The
receiver reports the gap with one NAK (sequence error) and then drops every packet until the
one it expects arrives; it does not NAK again (InfiniBand Architecture Specification vol. 1,
chapter 9, the RC responder's sequence-error handling; RoCEv2 keeps IB's transport). So if
that NAK is lost, or the resent packet it asked for is lost, nothing more arrives at the
sender and it waits for the QP's local ACK timeout: RTO = 4.096 us x 2^timeout, with the
timeout NCCL gives its QPs, NCCL_IB_TIMEOUT (NCCL src/transport/net_ib.cc
`NCCL_PARAM(IbTimeout, "IB_TIMEOUT", 20)`, 18 in older releases: ~4.3 s and ~1.07 s), set as
the QP's `timeout` attribute (IB spec, chapter 9: the requester's transport timer is 4.096 us
x 2^value). With independent losses of probability p per packet (data and NAKs alike) a loss
costs W packets, and with probability 2p also an RTO of R = RTO x packet rate packet times, so
the fraction of the wire that is goodput is (1 - p) / (1 + (W - 1) p + 2 p^2 R) (Bertsekas &
Gallager, Data Networks, go-back-N efficiency, plus the timeout term; the collapse of RoCE
without PFC at percent-level loss: Mittal et al., "Revisiting Network Support for RDMA",
SIGCOMM 2018). At 400 Gb/s and 4 KiB packets R is ~5e7: one timeout per 10^4 losses already
halves the wire, so RoCE without PFC collapses once p^2 R nears 1 (p ~ 1e-4 with NCCL's
default timeout), whatever the window. FabricPolicy.capacity scales every network link by it,
so the analytic and flow models carry the same collapse. Wrong when losses come in bursts (one
rollback covers a burst), with selective repeat or hardware-adapted timeouts (ConnectX-6 Dx+
lossy-RoCE offloads, IRN: close to 1 - p), and optimistic for a pipeline (a timeout on one QP
stalls every ring step behind it, counted here once per link) and for tail losses (the last
packet of a burst has no later packet to reveal its loss: another timeout, not counted).
"""
from __future__ import annotations

from ..errors import ConfigError

# NCCL_IB_TIMEOUT's default (NCCL src/transport/net_ib.cc, NCCL_PARAM(IbTimeout, ...)): the
# QP's local ACK timeout exponent; the timer is 4.096 us x 2^value (IB spec vol. 1, ch. 9)
NCCL_IB_TIMEOUT = 20
RTO_S = 4.096e-6 * 2.0 ** NCCL_IB_TIMEOUT


def goodput(loss_rate: float, window_packets: float, rto_packets: float = 0.0) -> float:
    """Go-back-N goodput fraction: (1 - p) / (1 + (W - 1) p + 2 p^2 R), R the retransmission
    timeout in packet times (0: NAKs and resent packets never lost).

        >>> round(goodput(1e-3, 61), 4)
        0.9425
        >>> goodput(1e-2, 61, rto_packets=5e7) < 1e-3
        True
    """
    p, w = float(loss_rate), max(float(window_packets), 1.0)
    r = float(rto_packets)
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"loss_rate {p!r} must be in [0, 1)")
    if not r >= 0.0:
        raise ConfigError(f"rto_packets {r!r} must be >= 0")
    return (1.0 - p) / (1.0 + (w - 1.0) * p + 2.0 * p * p * r)
