"""Start-up of a command: only its own module is imported, packaged data files are read from a
JSON cache (never a stale or broken one), and no YAML parser is imported for a `sim`."""
import importlib
import json
import os
import pathlib
import subprocess
import sys

cat = importlib.import_module("gpucomm.hardware.catalog")

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"


def _run(code, tmp_path):
    env = {"PYTHONPATH": str(SRC), "GPUCOMM_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONDONTWRITEBYTECODE": "1", "PATH": os.environ.get("PATH", "")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_cli_imports_only_the_command_run(tmp_path):
    code = ("import sys; from gpucomm.cli import main; main(['hw', 'list', '--format', "
            "'json']); print(sorted(m for m in sys.modules if m.startswith('gpucomm.cli.')))")
    loaded = _run(code, tmp_path)
    assert "gpucomm.cli.hw" in loaded and "gpucomm.cli.sim" not in loaded \
        and "gpucomm.cli.plan" not in loaded


def test_sim_starts_without_a_yaml_parser_once_cached(tmp_path):
    code = ("import sys; from gpucomm.cli import main; main(['sim', '--nodes', '2', '-b', '1M', "
            "'-e', '1M']); print('yaml' in sys.modules)")
    assert _run(code, tmp_path) == "True"    # first run: parses, fills the cache
    assert _run(code, tmp_path) == "False"   # then JSON only
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == \
        ["data__hardware.yaml.json", "data__presets__dgx-h100.yaml.json"]


def test_packaged_yaml_cache_is_exact_and_never_stale(tmp_path, monkeypatch):
    monkeypatch.setenv(cat.CACHE_ENV, str(tmp_path))
    parsed = cat._parse_yaml((SRC / "gpucomm/data/hardware.yaml").read_text())
    assert cat.load_packaged_yaml("data/hardware.yaml") == parsed     # parsed, then stored
    cached = tmp_path / "data__hardware.yaml.json"
    entry = json.loads(cached.read_text())
    assert entry["data"] == parsed
    entry["data"]["links"]["pcie5"]["bandwidth_GBps"] = 1.0   # a cache hit returns the cache
    cached.write_text(json.dumps(entry))
    assert cat.load_packaged_yaml("data/hardware.yaml")["links"]["pcie5"]["bandwidth_GBps"] == 1
    entry["key"] = "0" * 64                                        # the file changed since
    cached.write_text(json.dumps(entry))
    assert cat.load_packaged_yaml("data/hardware.yaml") == parsed
    cached.write_text("{not json")                                 # broken: parsed again
    assert cat.load_packaged_yaml("data/hardware.yaml") == parsed
    assert json.loads(cached.read_text())["data"] == parsed


def test_cache_can_be_turned_off_or_unwritable(tmp_path, monkeypatch):
    monkeypatch.setenv(cat.CACHE_ENV, "off")
    assert cat.load_packaged_yaml("data/presets/pcie.yaml")["devices"]
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(cat.CACHE_ENV, str(blocker / "sub"))      # a folder that cannot exist
    assert cat.load_packaged_yaml("data/presets/pcie.yaml")["devices"]
