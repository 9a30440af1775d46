"""NVIDIA's example tuner plugin, compiled and driven as NCCL drives it, applies what `sim`
reports (benchmarks/tuner_plugin.py). Needs the plugin's source, which is not shipped here:

    GPUCOMM_TUNER_PLUGIN_SRC=~/nccl/plugins/tuner/example pytest tests/test_interop_tuner_plugin.py

and a C compiler ($CC, default gcc); skipped otherwise."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = os.environ.get("GPUCOMM_TUNER_PLUGIN_SRC")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SRC, reason="GPUCOMM_TUNER_PLUGIN_SRC (NVIDIA/nccl "
                                       "plugins/tuner/example) not set"),
    pytest.mark.skipif(shutil.which(os.environ.get("CC", "gcc")) is None,
                       reason="no C compiler ($CC / gcc)"),
]


def _run(*args: str) -> tuple[int, dict]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tuner_plugin.py"),
                           "--plugin-src", str(SRC), "--json", *args], capture_output=True,
                          text=True, env=env, timeout=1200)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_the_plugin_sets_the_algorithm_protocol_and_channels_sim_reports():
    rc, doc = _run("--presets", "dgx-h100,dgx-a100", "--nodes", "1,2",
                   "--collectives", "all_reduce,all_gather,broadcast", "--max-bytes", "67108864")
    crashed = [c for c in doc["cases"] if c["crash"]]
    if crashed:  # NCCL 2.27.5-2.29.7's example dereferences cost values as pointers
        assert "collCostTable[config->" in (Path(SRC) / "plugin.c").read_text()
        assert crashed[0]["first_mismatches"][0]["verdict"] == "crashed"
        pytest.skip(f"this plugin crashes on its first matching rule: {crashed[0]['crash']}")
    assert doc["probes"] > 500
    mismatches = [m for c in doc["cases"] for m in c["first_mismatches"]]
    assert doc["mismatches"] == 0, mismatches[:5]
    assert rc == 0
