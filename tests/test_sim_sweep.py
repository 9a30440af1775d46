"""The library behind `gpucomm sim`'s table, --seeds and --compare, called without the CLI:
simulate.sweep (sizes timed together, one cluster per fabric seed) and interop.compare."""
import pytest

from gpucomm.interop.compare import compare_row
from gpucomm.simulate import predict
from gpucomm.simulate.sweep import predict_sizes, seeded_rows
from gpucomm.topology import build_topology
from gpucomm.topology.fabric import Network

SIZES = [8, 1 << 16, 1 << 24]


def test_predict_sizes_is_predict_at_each_size():
    topo = build_topology("dgx-h100", nodes=2)
    seen = []
    swept = predict_sizes("all_gather", SIZES, topo, protocol="simple", on_size=seen.append)
    assert seen == SIZES
    for size, res in zip(SIZES, swept):
        alone = predict("all_gather", size, topo, protocol="simple")
        assert (res.size, res.algorithm, res.protocol) == (alone.size, alone.algorithm,
                                                           alone.protocol)
        assert res.time_s == pytest.approx(alone.time_s, rel=1e-12)


def _tiny(seed):
    return build_topology("dgx-h100", nodes=4, gpus_per_node=1, nics_per_node=1,
                          nic="roce-400g", fabric="rail-2tier", leaf_ports=2,
                          network=Network(connections=1, seed=seed))


def test_seeded_rows_are_the_median_seed_with_the_spread():
    seeds = range(5)
    rows = seeded_rows("all_to_all", [1 << 28], map(_tiny, seeds))
    per_seed = sorted(predict("all_to_all", 1 << 28, _tiny(s)).to_row()["busbw"] for s in seeds)
    (row,) = rows
    assert row["seeds"] == 5 and row["busbw"] == per_seed[2] == row["busbw_median"]
    assert (row["busbw_min"], row["busbw_max"]) == (per_seed[0], per_seed[-1])
    assert per_seed[0] < per_seed[-1]  # seeds hash flows onto one spine cable or two


def test_seeded_rows_need_a_topology():
    from gpucomm.errors import ConfigError
    with pytest.raises(ConfigError, match="at least one"):
        seeded_rows("all_reduce", [8], [])


def test_compare_row_is_the_error_of_the_prediction():
    row = compare_row({"size": 8, "time_us": 40.0, "busbw": 50.0, "predicted_time_us": 30.0,
                       "predicted_busbw": 60.0})
    assert row["measured_time_us"] == 40.0 and row["measured_busbw"] == 50.0
    assert row["busbw_error"] == 0.2 and row["time_ratio"] == 0.75 and row["size"] == 8
    empty = compare_row({"time_us": 0.0, "busbw": 0.0, "predicted_time_us": 1.0,
                         "predicted_busbw": 1.0})
    assert empty["busbw_error"] is None and empty["time_ratio"] is None
