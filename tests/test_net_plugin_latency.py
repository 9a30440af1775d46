"""The net plugin's latency property (catalog plugin_latency_us), which NCCL's tuning adds to
every step across nodes (tuning.cc: `interLat += graphs[a]->latencyInter`, twice for Simple):
aws-ofi-nccl reports 75 us on p4d/p5 EFA, NCCL's own IB transport 0."""
from __future__ import annotations

import dataclasses
import importlib

import pytest

import gpucomm.hardware as hardware
from gpucomm.errors import ConfigError
from gpucomm.hardware import get_nic
from gpucomm.simulate import predict
from gpucomm.simulate.protocol import plugin_latency_s
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
             "source": "x", "plugin_latency_us": 5}
    with pytest.raises(ConfigError, match="plugin_latency_us is a NIC's property"):
        importlib.import_module("gpucomm.hardware.catalog")._link("pcie-x", entry)


def test_simple_pays_it_twice():
    efa = build_topology("dgx-a100", nodes=2, nic="efa-100g", nics_per_node=4)
    assert plugin_latency_s(efa, "ll") == pytest.approx(75e-6)
    assert plugin_latency_s(efa, "ll128") == pytest.approx(75e-6)
    assert plugin_latency_s(efa, "simple") == pytest.approx(150e-6)
    assert plugin_latency_s(build_topology("dgx-a100", nodes=2), "simple") == 0.0


CASES = [  # (collective, bytes, algorithm, protocol, network crossings on the critical path)
    ("all_reduce", 8, "tree", "ll", 2),        # 2 log2(nodes): up and down the tree
    ("all_reduce", 8, "tree", "simple", 2),
    ("all_gather", 1024, "ring", "ll", 2),     # a chunk's way round the ring crosses both edges
    ("all_reduce", 8, "ring", "ll", 4),        # reduce-scatter then all-gather
    ("all_to_all", 1 << 20, "grouped", "simple", 1),
    ("sendrecv", 1024, "direct", "ll", 1),
]


@pytest.mark.parametrize("coll, nbytes, algo, proto, crossings", CASES)
def test_every_algorithm_pays_it_per_crossing(monkeypatch, coll, nbytes, algo, proto,
                                              crossings):
    """The same EFA cluster with the property and without it (the catalog entry patched to 0):
    the difference is the crossings times the property (twice for Simple)."""
    def timed():
        topo = build_topology("dgx-a100", nodes=2, nic="efa-100g", nics_per_node=4)
        return predict(coll, nbytes, topo, algorithm=algo, protocol=proto).time_s

    with_it = timed()
    real = hardware.get_nic
    monkeypatch.setattr(hardware, "get_nic",
                        lambda n: dataclasses.replace(real(n), plugin_latency_s=0.0))
    without = timed()
    per = 75e-6 * (2 if proto == "simple" else 1)
    assert with_it - without == pytest.approx(crossings * per, rel=1e-6)


def test_one_node_never_pays_it():
    one = build_topology("dgx-a100", nic="efa-100g", nics_per_node=4)
    ib = build_topology("dgx-a100")
    assert predict("all_reduce", 8, one).time_s == pytest.approx(predict("all_reduce", 8,
                                                                          ib).time_s)


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
