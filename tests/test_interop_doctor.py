"""`gpucomm doctor`: nccl-tests logs in (tables, INFO lines), the machine inferred, a verdict."""
import json
import re
from pathlib import Path

import pytest

import nccl_logs
from gpucomm.cli import main
from gpucomm.collectives import get_collective
from gpucomm.errors import ConfigError
from gpucomm.interop.doctor import DoctorRequest, diagnose
from gpucomm.interop.nccltests import parse_log
from gpucomm.interop.system import gpu_of, infer_system
from gpucomm.topology import build_topology

TABLES = nccl_logs.published()
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "logs" / \
    "2node-dgx-h100-all_reduce.example.log"


@pytest.mark.skipif(not TABLES, reason="published data not present")
@pytest.mark.parametrize("table", TABLES, ids=lambda t: t["id"])
def test_every_published_table_as_a_log_is_read_back(table):
    log = parse_log(nccl_logs.render(table))
    assert log.collective == get_collective(table["collective"]).name
    assert [r["size"] for r in log.rows] == [int(r["bytes"]) for r in table["rows"]
                                             if r.get("time_us") or r.get("busbw_gbs")]
    g = infer_system(log)
    assert g.gpu == nccl_logs.device_of(table)[1]
    assert (g.nodes, g.gpus_per_node, g.nranks) == (table["nodes"], table["gpus_per_node"],
                                                    table["gpus"])
    assert build_topology(**g.build_kwargs()).nranks == table["gpus"]


@pytest.mark.skipif(not TABLES, reason="published data not present")
@pytest.mark.parametrize("table",
                         [t for t in TABLES if t["collective"] in ("alltoall", "sendrecv")],
                         ids=lambda t: t["id"])
def test_point_to_point_tables_are_diagnosed(table):
    """Every row predicted with NCCL's grouped point-to-point (a merge once left all-to-all
    with no candidate: 'no algorithm left for all_to_all')."""
    d = diagnose(DoctorRequest(parse_log(nccl_logs.render(table)), name=table["id"]))
    assert d.rows and all(r["predicted_busbw"] > 0 for r in d.rows)


@pytest.mark.parametrize("value,expect", [("Tree", "tree"), ("NVLSTree", "nvls_tree"),
                                          ("Ring", "ring"), ("CollNetDirect", None)])
def test_the_logs_nccl_algo_is_followed_where_nccl_could_run_it(value, expect):
    """NCCL_ALGO from the log's INFO lines, in NCCL's spelling, forces that algorithm; one
    NCCL could not run here (CollNet without SHARP) leaves NCCL's own choice."""
    line = "dgx-a07:41230:41230 [0] NCCL INFO NCCL version"
    text = EXAMPLE.read_text().replace(
        line, f"dgx-a07:41230:41230 [0] NCCL INFO NCCL_ALGO set by environment to {value}\n"
        + line, 1)
    assert f"to {value}" in text
    d = diagnose(DoctorRequest(parse_log(text), name="forced"))
    chosen = {r["algorithm"] for r in d.rows}
    assert chosen == {expect} if expect else "collnet_direct" not in chosen


@pytest.mark.parametrize("name,gpu", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100"), ("NVIDIA H800", "h100"),
    ("NVIDIA H200", "h200"), ("NVIDIA B200", "b200"), ("NVIDIA A100-SXM4-40GB", "a100"),
    ("Tesla V100-SXM2-32GB", "v100"), ("NVIDIA GeForce RTX 4090", "rtx4090"),
    ("NVIDIA L40S", "l40s"), ("NVIDIA GH200 480GB", "gh200"), ("Quadro RTX 8000", None)])
def test_gpu_names(name, gpu):
    assert gpu_of(name) == gpu


def test_example_log_gives_a_verdict_and_its_cause(capsys):
    assert main(["doctor", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "verdict: 8 GiB at" in out and "2 × DGX H100" in out and "8 × ib-ndr" in out
    assert "GPUDirect RDMA off" in out
    assert "P2P off" not in out and "NVLS off" not in out


def test_nccl_info_lines_are_read():
    log = parse_log(EXAMPLE.read_text())
    i = log.info
    assert i.version == "2.21.5+cuda12.4" and (i.nranks, i.nnodes, i.local_ranks) == (16, 2, 8)
    assert i.coll_channels == 32 and i.nvls_channels == 16 and i.nvls is True
    assert i.gdr is False and len(i.nics) == 8 and i.net == "IB"
    assert i.net_devices == set(range(8)) and set(i.transports) == {"P2P", "NET"}
    assert log.hosts == ("dgx-a07", "dgx-b12") and log.iters == 20 and log.graph == 0


def _with(text, *extra):
    """The example with extra INFO lines and only its largest sizes (prediction takes time)."""
    lines = [ln for ln in text.splitlines()
             if not (ln[:1] == " " and ln.split() and int(ln.split()[0]) < 1 << 32)]
    at = next(i for i, ln in enumerate(lines) if "Connected all rings" in ln)
    return "\n".join(lines[:at] + list(extra) + lines[at:])


@pytest.mark.parametrize("extra,cause", [
    (["dgx-a07:41230:41347 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via SHM/direct/direct"],
     "P2P off"),
    (["dgx-a07:41230:41347 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0"], "NVLS off"),
    (["dgx-a07:41230:41347 [0] NCCL INFO 4 coll channels, 4 collnet channels, 0 nvls channels, "
      "4 p2p channels, 4 p2p channels per peer"], "fewer channels than expected"),
])
def test_causes_seen_in_info_lines(extra, cause):
    d = diagnose(DoctorRequest(parse_log(_with(EXAMPLE.read_text(), *extra))))
    assert any(c.startswith(cause) for c in d.causes), d.causes


def test_one_nic_in_use():
    text = _with(EXAMPLE.read_text())
    for k in range(1, 8):
        text = text.replace(f"via NET/IB/{k}", "via NET/IB/0")
    d = diagnose(DoctorRequest(parse_log(text)))
    assert any(c.startswith("one NIC in use of the 8") for c in d.causes), d.causes


def test_overrides_that_contradict_the_log_warn(capsys):
    assert main(["doctor", str(EXAMPLE), "--system", "dgx-a100", "--nodes", "4"]) == 0
    out = capsys.readouterr().out
    assert "warning: --system dgx-a100 contradicts the log: its GPUs are NVIDIA H100" in out
    assert "warning: --nodes 4 contradicts the log (2)" in out


def test_json_shape_matches_sim_and_bench(capsys):
    assert main(["doctor", str(EXAMPLE), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"collective", "nranks", "rows", "verdict", "causes", "system"} <= set(doc)
    r = doc["rows"][-1]
    assert {"size", "count", "type", "redop", "root", "time_us", "algbw", "busbw", "wrong",
            "predicted_time_us", "predicted_busbw", "ratio", "algorithm", "protocol"} <= set(r)
    assert doc["system"] == {"system": "dgx-h100", "nodes": 2, "gpus_per_node": 8,
                             "nic": "ib-ndr", "nics_per_node": 8}


@pytest.mark.skipif(not TABLES, reason="published data not present")
def test_sim_compare_takes_the_collective_from_the_log_not_the_file_name(tmp_path, capsys):
    table = next(t for t in TABLES if t["collective"] == "all_gather" and t["nodes"] == 1)
    log = tmp_path / "ar.log"  # named like an all-reduce log
    log.write_text(nccl_logs.render(table))
    assert main(["sim", "--compare", str(log), "--format", "json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["collective"] == "all_gather"
    assert main(["sim", "--compare", str(log), "--system", "dgx-a100"]) == 0
    assert "--system dgx-a100 contradicts the log" in capsys.readouterr().err


def test_several_logs_and_bad_ones(tmp_path, capsys):
    assert main(["doctor", str(EXAMPLE), str(EXAMPLE), "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["logs"]) == 2
    empty = tmp_path / "empty.log"
    empty.write_text("# nothing\n")
    assert main(["doctor", str(empty)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no nccl-tests result rows" in err
    assert main(["doctor", str(tmp_path / "missing.log")]) == 2
    assert "cannot read nccl-tests log" in capsys.readouterr().err
    rows_only = tmp_path / "rows.log"
    rows_only.write_text("  1048576  262144  float  sum  -1  20.5  51.1  51.1  0  "
                         "20.1  52.1  52.1  0\n")
    with pytest.raises(ConfigError, match="names no ranks"):  # all_reduce from its columns
        diagnose(DoctorRequest(parse_log(rows_only.read_text())))
    assert main(["doctor", str(rows_only), "--collective", "all_reduce"]) == 2
    assert "names no ranks" in capsys.readouterr().err
    assert main(["doctor", str(rows_only), "--collective", "all_reduce", "--system", "dgx-h100",
                 "--gpus-per-node", "2"]) == 0


def test_the_logs_nccl_version_is_modelled():
    """The NCCL version the INFO lines print is the one predicted: NCCL 2.17 had NVLS but not
    NVLSTree (2.18), so on two H100 nodes it cannot be what that version chose."""
    text = EXAMPLE.read_text()
    now = {r["algorithm"] for r in diagnose(DoctorRequest(parse_log(text))).rows}
    old = diagnose(DoctorRequest(parse_log(_replace_version(text, "2.17.1+cuda12.1"))))
    assert "nvls_tree" in now and "nvls_tree" not in {r["algorithm"] for r in old.rows}


def _replace_version(text, version):
    return re.sub(r"NCCL version \S+", f"NCCL version {version}", text)


def test_nccl_version_flag_models_the_release_the_log_ran(capsys):
    """Polaris's NCCL 2.18 log prints no version; --nccl-version 2.18 models that release, whose
    Tree/Simple halves its chunk by the tree's depth (enqueue.cc, removed in 2.20): smaller
    chunks fill the 4 MiB tree's pipeline sooner, so 2.18's tree is faster there; by a few
    percent, since the tree runs on Polaris's 4 collective channels (2 NICs a node;
    nccl.tree_run_channels), where the newest release's 512 KiB chunks already pipeline two
    to a channel. The tree is asked for: NCCL's model ranks
    the ring first on these A100 nodes (its tree held to 23.6 GB/s per search channel,
    tuning.cc perChMaxTreeBws)."""
    log = Path(__file__).resolve().parents[1] / "data/logs/polaris-nccl218-2n-all_reduce.log"
    rows = {}
    for version in (None, "2.18"):
        req = DoctorRequest(parse_log(log.read_text()), algorithm="tree", protocol="simple",
                            nccl_version=version)
        got = {r["size"]: r for r in diagnose(req).rows}
        row = got[4 << 20]
        assert (row["algorithm"], row["protocol"]) == ("tree", "simple")
        rows[version] = row["predicted_busbw"], got[512 << 10]["predicted_busbw"]
    assert rows["2.18"][0] > 1.02 * rows[None][0]
    # and at 512 KiB 2.18's tree is the slower one: 28 us a Simple tree hop until v2.23.4-1
    # (versions.py TREE_HOP_LATENCY_S), 4 us since
    assert rows["2.18"][1] < rows[None][1] / 1.5
    with pytest.raises(SystemExit):
        main(["doctor", str(log), "--nccl-version", "3.1"])
    assert "nccl version '3.1' not understood" in capsys.readouterr().err


def test_a_malformed_nccl_version_is_refused_not_replaced_by_the_logs(capsys):
    """The library refuses a version it cannot read (it used to fall back to the log's), and
    doctor and sim word a bad --nccl-version alike: argparse's one line naming the option."""
    log = parse_log(EXAMPLE.read_text())
    for bad in ("latest", "2", "3.1"):
        with pytest.raises(ConfigError, match=f"nccl version '{bad}' not understood"):
            DoctorRequest(log, nccl_version=bad)
    assert DoctorRequest(log, nccl_version="2.18.5-1").nccl_version == "2.18.5-1"
    errs = []
    for argv in (["doctor", str(EXAMPLE)], ["sim", "-b", "1M", "-e", "1M"]):
        with pytest.raises(SystemExit):
            main([*argv, "--nccl-version", "bad"])
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        errs.append(err.split(": error: ", 1)[1].rsplit(" (see ", 1)[0])
    assert errs[0] == errs[1] and errs[0].startswith("argument --nccl-version: nccl version 'bad'")


def test_a_gzipped_log_is_read_and_a_broken_or_huge_one_refused(tmp_path, capsys):
    # a saved all_reduce_perf.log.gz was "not UTF-8 text (byte 1: b'\x8b'; a binary file?)"
    import gzip
    text = (Path(__file__).resolve().parents[1] / "data" / "logs"
            / "abci-a100-2n-all_reduce.log").read_bytes()
    log = tmp_path / "run.log.gz"
    log.write_bytes(gzip.compress(text))
    assert main(["doctor", str(log), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["collective"] == "all_reduce"
    log.write_bytes(gzip.compress(text)[:300])
    assert main(["doctor", str(log)]) == 2
    assert "is gzip-compressed but cannot be unpacked" in capsys.readouterr().err
    log.write_bytes(gzip.compress(b"0" * ((64 << 20) + 1)))
    assert main(["doctor", str(log)]) == 2
    assert "unpacks to more than the limit of 64 MiB" in capsys.readouterr().err


@pytest.mark.parametrize("bom, codec, newline", [
    (b"\xff\xfe", "utf-16-le", "\r\n"),   # PowerShell's `> run.log` / Out-File on Windows
    (b"\xfe\xff", "utf-16-be", "\n"),
])
def test_a_utf16_log_gets_the_verdict_of_its_utf8_original(tmp_path, capsys, bom, codec,
                                                            newline):
    # was "not UTF-8 text (byte 0: b'\xff'; a binary file?)"
    import gzip
    original = Path(__file__).resolve().parents[1] / "data" / "logs" / \
        "abci-a100-2n-all_reduce.log"
    assert main(["doctor", str(original), "--format", "json"]) == 0
    want = json.loads(capsys.readouterr().out)
    wide = bom + original.read_text().replace("\n", newline).encode(codec)
    for name, data in (("run.log", wide), ("run.log.gz", gzip.compress(wide))):
        log = tmp_path / name
        log.write_bytes(data)
        assert main(["doctor", str(log), "--format", "json"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert got == {**want, "log": str(log)}
    log.write_bytes(wide + b"x")   # an odd byte count: the last character is cut in half
    assert main(["doctor", str(log)]) == 2
    err = capsys.readouterr().err
    assert "starts with UTF-16's byte-order mark" in err and "not UTF-16 text" in err


def test_the_text_limit_counts_characters_so_utf16_may_take_twice_the_bytes(tmp_path):
    from gpucomm.inputs import read_text
    f = tmp_path / "t.yaml"
    f.write_bytes(b"\xff\xfe" + ("a: 1\n" * 30).encode("utf-16-le"))   # 302 B, 150 characters
    assert read_text(f, "model config", limit=200) == "a: 1\n" * 30
    with pytest.raises(ConfigError, match=r"302 B, larger than the limit of 150 B "
                                          r"\(300 B in UTF-16\)"):
        read_text(f, "model config", limit=150)
    f.write_bytes(("a: 1\n" * 50).encode())   # UTF-8 of 250 B: not allowed the UTF-16 room
    with pytest.raises(ConfigError, match=r"250 B, larger than the limit of 200 B for"):
        read_text(f, "model config", limit=200)
