"""The tables benchmarks/accuracy.py scores: every one maps to a topology and a class, and the
V100 hybrid-cube-mesh nodes (GPUs linked directly, no switch) are scored as the NVLink-mesh
class, whatever words their description uses for the missing switch."""
import json
from pathlib import Path

import pytest

from gpucomm.topology import build_topology

from bench_modules import load


A = load("accuracy")
TABLES = [t for path in A.DATA for t in json.loads(Path(path).read_text())]


@pytest.mark.parametrize("table", TABLES, ids=[t["id"] for t in TABLES])
def test_every_table_maps_to_a_topology_and_a_class(table):
    topo = build_topology(**A.system_of(table))
    assert topo.nranks == int(table["gpus"]) == int(table["nodes"]) * int(table["gpus_per_node"])
    assert A.class_of(table) in A.CLASSES
    assert table["rows"] and all(int(r["bytes"]) >= 0 for r in table["rows"])


def test_single_node_v100_meshes_are_the_mesh_class():
    meshes = [t for t in TABLES if "v100" in t["hardware"].lower() and int(t["nodes"]) == 1]
    assert {t["id"] for t in meshes} >= {"blog2019_v100_1n8g_all_reduce",
                                         "ocijp_v100_1n8g_all_reduce_1GiB"}
    assert {A.class_of(t) for t in meshes} == {"1 node NVLink mesh"}
    said = dict(meshes[0], hardware="8x V100, hybrid cube mesh, no NVSwitch")
    assert A.class_of(said) == "1 node NVLink mesh"
    assert A.class_of(dict(said, hardware="8x V100 with NVSwitch (DGX-2)")) == "1 node NVSwitch"


def test_tables_from_before_nccl_2_5_are_modelled_with_its_oldest_tuning_model():
    by_id = {t["id"]: t for t in TABLES}
    # printed 2.4.8, and unprinted but dated 2019: NCCL 2.5's constants, not the newest's
    assert A.version_of(by_id["awsdlami_v100_2n16g_all_reduce"]) == (2, 5)
    assert A.version_of(by_id["blog2019_v100_1n8g_all_reduce"]) == (2, 5)
    assert A.nccl_protocols(by_id["blog2019_v100_1n8g_all_reduce"]) == ["ll", "simple"]
    assert A.version_of(by_id["ocijp_v100_1n8g_all_reduce_1GiB"]) == (2, 21)
    assert A.version_of(dict(by_id["blog2019_v100_1n8g_all_reduce"],
                             nccl_version="not printed (2025)")) is None


def test_nccls_model_is_compared_on_what_the_tables_nccl_was_allowed_to_run():
    by_id = {t["id"]: t for t in TABLES}
    forced = by_id["awsdlamip4d_a100_2n16g_all_reduce_ring"]  # NCCL_ALGO=ring
    assert A.nccl_choice(forced)["algorithms"] == {"ring"}
    p3dn = by_id["awsdlami_v100_2n16g_all_reduce"]  # NCCL 2.4's NCCL_TREE_THRESHOLD=0
    assert A.choice_of(p3dn) == {"algorithm": "ring"}
    assert A.nccl_choice(p3dn) == {"algorithms": {"ring"}, "protocols": ["ll", "simple"]}
    off = by_id["stas00_h200_8gpu_all_reduce_16GiB_nvls_off"]  # NCCL_NVLS_ENABLE=0
    assert not {"nvls", "nvls_tree"} & A.nccl_choice(off)["algorithms"]
    rows = A.evaluate([forced])
    assert rows and all(r["nccl_choice"].startswith("ring/") for r in rows if "nccl_choice" in r)
