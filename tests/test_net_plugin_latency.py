"""What the net plugin and the NIC generation cost a step across nodes: the latency property
the plugin reports (catalog plugin_latency_us: NCCL's tuning adds it when choosing; gpucomm's
time does not), EFA v1's measured step latency (stack_latency_us), a calibrated cluster's
per-step synchronisation (Topology.net_sync_s, every algorithm), and LL128 where NCCL keeps it
off (a NIC behind the host)."""
from __future__ import annotations

import dataclasses
import importlib

import pytest

from gpucomm.errors import ConfigError
from gpucomm.hardware import get_nic
from gpucomm.simulate import predict
from gpucomm.topology import build_topology


def test_catalog_latency_property_by_nic():
    assert get_nic("efa-100g").plugin_latency_s == pytest.approx(75e-6)
    assert get_nic("efa-400g").plugin_latency_s == pytest.approx(75e-6)
    assert get_nic("efa-100g*4").plugin_latency_s == pytest.approx(75e-6)  # fused ports
    assert "platform-aws.cpp" in get_nic("efa-400g").source
    for name in ("ib-ndr", "roce-400g", "slingshot-200g", "tcp-100g"):
        assert get_nic(name).plugin_latency_s == 0.0


def test_catalog_refuses_plugin_latency_on_a_non_nic():
    entry = {"kind": "pcie", "bandwidth_GBps": 32, "efficiency": 0.8, "latency_us": 1,
             "source": "x", "stack_latency_us": 5}
    with pytest.raises(ConfigError, match="stack_latency_us is a NIC's property"):
        importlib.import_module("gpucomm.hardware.catalog")._link("pcie-x", entry)


def test_the_plugin_property_is_no_time_a_step_takes():
    """aws-ofi-nccl reports 75 us on p5, and its p5 log (NCCL 2.20.3) runs a 2-node 1 KiB
    all-reduce in 65 us in all: two crossings of 75 us cannot be in it."""
    p5 = build_topology("dgx-h100", nodes=2, nic="efa-400g", nics_per_node=8)
    assert predict("all_reduce", 1024, p5).time_s < 100e-6


def test_efa_v1_steps_take_their_measured_latency():
    """p4d (EFA v1): 168 us (published table) and 179 us (held-out log) for an 8-byte 2-node
    all-reduce; the model's tree with two network steps of 70 us. (The fastest pair there is
    now a one-channel ring, whose crossings pay the kind's 20 us: test_nccl_midsize.)"""
    assert get_nic("efa-100g").stack_latency_s == pytest.approx(70e-6)
    assert get_nic("efa-400g").stack_latency_s == 0.0
    p4d = build_topology("dgx-a100", nodes=2, nic="efa-100g", nics_per_node=4)
    assert 150e-6 < predict("all_reduce", 8, p4d, algorithm="tree").time_s < 190e-6


CASES = [  # (collective, bytes, algorithm, protocol, network crossings on the critical path)
    ("all_reduce", 8, "tree", "ll", 2),        # 2 log2(nodes): up and down the tree
    ("all_reduce", 8, "tree", "simple", 2),
    ("all_gather", 1024, "ring", "ll", 2),     # a chunk's way round the ring crosses both edges
    ("all_reduce", 8, "ring", "ll", 4),        # reduce-scatter then all-gather
    ("all_to_all", 1 << 20, "grouped", "simple", 1),
    ("sendrecv", 1024, "direct", "ll", 1),
]


@pytest.mark.parametrize("coll, nbytes, algo, proto, crossings", CASES)
def test_every_algorithm_pays_the_sync_per_crossing(coll, nbytes, algo, proto, crossings):
    """The same cluster with a calibrated per-step synchronisation of 100 us and without: the
    difference is the crossings times 100 us, whatever the algorithm or protocol."""
    base = build_topology("dgx-a100", nodes=2)
    synced = dataclasses.replace(base, net_sync_s=100e-6)
    with_it = predict(coll, nbytes, synced, algorithm=algo, protocol=proto).time_s
    without = predict(coll, nbytes, base, algorithm=algo, protocol=proto).time_s
    assert with_it - without == pytest.approx(crossings * 100e-6, rel=0.02)


def test_one_node_never_pays_it():
    one = dataclasses.replace(build_topology("dgx-a100"), net_sync_s=100e-6)
    assert predict("all_reduce", 8, one).time_s == pytest.approx(
        predict("all_reduce", 8, build_topology("dgx-a100")).time_s)


def test_ll128_off_across_nodes_when_the_nic_sits_behind_the_host():
    """tuning.cc enables LL128 only for typeInter <= PATH_PXB (PXN on Hopper+): Polaris's
    Slingshot NICs hang off the CPU's root ports (PHB), so NCCL keeps LL128 off across its
    nodes; one node (NVLink only) and DGX nodes (NIC under the GPU's PCIe switch) keep it."""
    polaris2 = build_topology("polaris", nodes=2)
    chosen = {predict("all_reduce", 1 << k, polaris2).protocol for k in range(10, 27)}
    assert "ll128" not in chosen
    for allowed in (build_topology("polaris"), build_topology("dgx-a100", nodes=2)):
        assert "ll128" in {predict("all_reduce", 1 << k, allowed).protocol
                           for k in range(10, 27)}
