import os
import time

# A developer's tuned runtime options (`gpucomm bench --tune`) must not change what the suite
# runs: the tests (and the ranks they start, which inherit this) use the defaults; the tests
# of tuning set their own file.
os.environ["GPUCOMM_RUNTIME_YAML"] = "off"

import numpy as np
import pytest

from gpucomm import dtypes as dt
from gpucomm.collectives import get_collective


def make_inputs(coll, nranks: int, block_count: int, dtype, op: str = "sum", root: int = 0,
                seed: int = 0) -> list:
    """Random per-rank inputs for a collective (None where a rank passes no input)."""
    coll, dtype = get_collective(coll), dt.get_dtype(dtype)
    rng = np.random.default_rng(seed)
    out = []
    for r in range(nranks):
        blocks = coll.inputs(r, nranks, root)
        out.append(None if blocks is None else dt.random_array(rng, blocks[1] * block_count,
                                                               dtype, op))
    return out


@pytest.fixture
def inputs_for():
    return make_inputs


# scripts that ranks run (they read sys.argv when imported): not modules to collect doctests from
collect_ignore = ["fault_worker.py", "hardening_worker.py"]

# The multi-process tier (CONTRIBUTING.md): these files spawn ranks, launchers, MPI or the CLI
# as child processes (or drive a browser). `pytest -m "not slow"` leaves them out, so the pure
# and in-process tiers run alone in seconds; `make test` runs everything.
SLOW_FILES = frozenset({
    "test_bench.py", "test_cli_properties.py", "test_emulate.py", "test_fault_matrix.py",
    "test_interop_msccl.py", "test_report_browser.py", "test_runtime.py",
    "test_runtime_hardening.py", "test_transports.py", "test_transports_backend.py",
})

# ... and single tests that start processes (a local Dask cluster) or take many seconds of CPU
# (proving every algorithm for 1..33 ranks)
SLOW_TESTS = frozenset({
    "test_cli_verifies_every_algorithm_up_to_33_ranks", "test_verify_all_max_ranks_33",
    "test_an_unreachable_cluster_is_one_error",
    "test_points_run_on_a_local_dask_cluster_of_two_workers",
    "test_tuner_file_parses_back_contiguous_with_nccl_names",
    "test_bench_tune_saves_what_later_runs_use",
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_FILES or getattr(item, "originalname", None) in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


# Nothing the suite starts may leave shared memory behind (runtime segments, MPICH's, torch's):
# the run (the controller, under xdist) notes /dev/shm before and, once every worker has gone,
# fails if a new entry remains that no live process maps.
def _shm_entries() -> set:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:  # no /dev/shm (macOS)
        return set()


_SHM_BEFORE = pytest.StashKey[set]()


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):
        session.config.stash[_SHM_BEFORE] = _shm_entries()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    before = session.config.stash.get(_SHM_BEFORE, None)
    if before is None:
        return
    from gpucomm.bench.backends import mapped_shm
    for _ in range(25):  # a process that is exiting gets a moment to unmap and unlink
        left = _shm_entries() - before - mapped_shm(prefix="")
        if not left:
            return
        time.sleep(0.2)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(f"FAILED: the run left in /dev/shm: {sorted(left)}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED

