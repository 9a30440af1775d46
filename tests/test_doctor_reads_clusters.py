"""doctor reads what clusters print (issue 23): launcher prefixes, several tests per file,
unnamed tests, NCCL INFO network lines, overrides that change only what they name, rows that
cannot be believed. Built on raw public logs of data/logs, changed only as a launcher would."""
import json
import re
from pathlib import Path

import pytest

from gpucomm.cli import main
from gpucomm.errors import ConfigError
from gpucomm.interop.columns import infer_collective
from gpucomm.interop.doctor import DoctorRequest, diagnose
from gpucomm.interop.nccltests import parse_log, parse_logs, strip_prefix

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
SNELLIUS = (LOGS / "snellius-h100-2n-all_reduce.log").read_text()
XXRJUN = (LOGS / "xxrjun-h100-10n-2g.log").read_text()
POLARIS = (LOGS / "polaris-nccl221-2n-all_reduce.log").read_text()


def _diag(text, **kw):
    return diagnose(DoctorRequest(parse_log(text), name=kw.pop("name", "log"), **kw))


@pytest.mark.parametrize("prefix", ["[1,0]<stdout>:", "0: ", "2024-05-06T10:11:12.345Z ",
                                    "[2024-05-06 10:11:12] ", "[pod/launcher-x/mpi] ",
                                    "2024-05-06T10:11:12Z [1,0]<stdout>:"])
def test_launcher_prefixes_are_read_through(prefix):
    plain = parse_log(POLARIS)
    tagged = parse_log("\n".join(prefix + line for line in POLARIS.splitlines()))
    assert tagged.rows == plain.rows and tagged.devices == plain.devices


def test_a_tag_flushed_mid_line_is_removed():
    assert strip_prefix("[1,0]<stdout>:     8   2   float   sum   -1[1,0]<stdout>:   85.14") \
        == "     8   2   float   sum   -1   85.14"


def test_several_tests_in_a_file_are_one_diagnosis_each():
    logs = parse_logs(XXRJUN)
    assert [g.collective for g in logs] == ["all_reduce", "all_gather", "reduce_scatter",
                                            "all_to_all", "sendrecv"]
    assert all(len(g.devices) == 20 and len({d.host for d in g.devices}) == 10 for g in logs)
    with pytest.raises(ConfigError, match="holds 5 tests"):
        parse_log(XXRJUN)


def test_a_test_without_its_own_device_lines_shares_the_one_before():
    second = "\n".join(x for x in POLARIS.splitlines() if "Rank" not in x)
    logs = parse_logs(POLARIS + "\n" + second)
    assert len(logs) == 2 and logs[1].devices == logs[0].devices
    assert logs[1].inherited == ("devices",)


@pytest.mark.parametrize("name,expect", [
    ("superbench-a100-nccl_allreduce.log", "all_reduce"),
    ("superbench-a100-nccl_broadcast.log", "broadcast"),
    ("superbench-a100-nccl_reduce.log", "reduce"),
    ("superbench-a100-nccl_reducescatter.log", "reduce_scatter"),
    # all_gather and all_to_all agree on every column but the in-place #wrong, which alltoall
    # and sendrecv do not check (nccl-tests src/alltoall.cu, src/sendrecv.cu: N/A)
    ("polaris-nccl221-2n-all_gather.log", "all_gather"),
    ("polaris-nccl221-2n-alltoall.log", "all_to_all"),
    # sendrecv prints the test's redop (sum) and busbw = algbw: on 2 ranks only the in-place
    # #wrong tells it from all_reduce; on 32 ranks busbw/algbw does too
    ("moc-h100-2n-1g-sendrecv-roce.log", "sendrecv"),
    ("moc-h100-2n-1g-all_reduce-roce.log", "all_reduce"),
    ("together-b200-4n-sendrecv.log", "sendrecv"),
    ("superbench-a100-nccl_allgather.log", None),  # validation off: both halves N/A
])
def test_the_columns_say_which_collective_an_unnamed_log_ran(name, expect):
    log = parse_log((LOGS / name).read_text())
    assert log.test is None
    inf = infer_collective(log)
    assert inf.collective == expect
    if expect is None:
        assert {"all_gather", "all_to_all"} <= set(inf.candidates)
        assert infer_collective(log, name).collective == "all_gather"  # the file name decides


def test_truly_ambiguous_logs_ask_and_name_the_candidates(tmp_path, capsys):
    path = tmp_path / "run1.log"
    path.write_text((LOGS / "superbench-a100-nccl_alltoall.log").read_text())
    assert main(["doctor", str(path)]) == 2
    err = capsys.readouterr().err
    assert "all_gather or all_to_all or gather or scatter: give --collective" in err
    assert main(["doctor", str(path), "--collective", "all_to_all"]) == 0


def test_nics_come_from_the_log_and_a_lone_management_port_is_not_counted():
    d = _diag(SNELLIUS)  # NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_2:1/IB ... [4]mlx5_5:1/IB
    # 200G from its 8 collective channels (tests/test_doctor_nic_from_channels.py)
    assert (d.system["nic"], d.system["nics_per_node"]) == ("ib-hdr", 4)
    assert any("mlx5_0:1/RoCE not counted" in e for e in d.guess.evidence)
    speeds = re.sub(r"(NCCL INFO NET/IB : Using.*)", r"\1", SNELLIUS).replace(
        "NCCL INFO NCCL version", "NCCL INFO NET/IB: [1] mlx5_2:uverbs2:1/IB provider=Mlx5 "
        "speed=200000 context=0x1\ngcn151:1:1 [0] NCCL INFO NCCL version", 1)
    assert _diag(speeds).system["nic"] == "ib-hdr"  # 200 Gb/s ports, as NCCL printed them


def test_no_nvls_blame_on_4_gpu_nodes_nor_when_the_log_says_it_is_unavailable():
    d = _diag(SNELLIUS)  # 4 H100 per node, 'NVLS multicast support is not available'
    assert not any("NVLS" in c for c in d.causes)
    assert not any(r["algorithm"].startswith("nvls") for r in d.rows)
    assert not any("fewer channels" in c for c in d.causes)


def test_overrides_change_only_what_they_name():
    d = _diag(SNELLIUS, system="dgx-h100")
    assert (d.system["nodes"], d.system["gpus_per_node"], d.system["nic"],
            d.system["nics_per_node"]) == (2, 4, "ib-hdr", 4)
    d = _diag(SNELLIUS, nic="roce-400g")
    assert (d.system["nic"], d.system["nics_per_node"], d.system["gpus_per_node"]) == \
        ("roce-400g", 4, 4)
    assert any("--nic roce-400g contradicts" in w for w in d.warnings)
    d = _diag(POLARIS, gpu="h100")
    assert d.system["system"] == "dgx-h100" and d.system["gpus_per_node"] == 4


def test_topology_file_is_replicated_to_the_logs_nodes(tmp_path, capsys):
    from gpucomm.topology import build_topology
    node = tmp_path / "node.yaml"
    build_topology("polaris").save(str(node))
    log = tmp_path / "ar.log"
    log.write_text(POLARIS)
    assert main(["doctor", str(log), "--topology", str(node), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["system"]["nodes"] == 2 and doc["nranks"] == 8


@pytest.mark.parametrize("bad,why", [("nan", "busbw is nan"), ("inf", "busbw is inf"),
                                     ("-3.5", "busbw is negative")])
def test_rows_that_cannot_be_believed_are_flagged_not_judged(bad, why):
    lines = POLARIS.splitlines()
    i = max(k for k, x in enumerate(lines) if x.strip().startswith("1073741824"))
    parts = lines[i].split()
    parts[7] = bad
    lines[i] = "  ".join(parts)
    d = _diag("\n".join(lines))
    flagged = [r for r in d.rows if r.get("flag")]
    assert len(flagged) == 1 and why in flagged[0]["flag"]
    assert d.verdict.startswith("512 MiB")  # judged on the largest believable row
    assert any("not judged" in w for w in d.warnings)


def test_a_row_beyond_the_size_limit_is_flagged():
    text = POLARIS.replace("  1073741824     268435456", "2199023255552 549755813888", 1)
    d = _diag(text)
    assert any("above the 1 TiB limit" in (r.get("flag") or "") for r in d.rows)


def test_sim_compare_with_collective_all_reduce_reads_an_unnamed_log(tmp_path, capsys):
    path = tmp_path / "run.log"  # no test name, no hint in the file name
    path.write_text((LOGS / "polaris-nccl221-2n-all_gather.log").read_text())
    assert main(["sim", "--compare", str(path), "--collective", "all_gather",
                 "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["collective"] == "all_gather"
    path.write_text(POLARIS)
    assert main(["sim", "--compare", str(path), "--collective", "all_reduce",
                 "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["collective"] == "all_reduce"


def test_huge_logs_and_absurd_headers_are_refused_quickly():
    head = POLARIS.split("#       size")[0]
    rows = "\n".join(f"{8 * i} {2 * i} float sum -1 10.0 1.0 1.0 0 10.0 1.0 1.0 0"
                     for i in range(1, 10_002))
    with pytest.raises(ConfigError, match="more than 10000 result rows in one test"):
        parse_logs(head + rows)
    with pytest.raises(ConfigError, match="at most 64 threads and GPUs per process"):
        parse_log(POLARIS.replace("nGpus 1 ", "nGpus 100000000000000000000 "))


def test_inf_in_the_wrong_column_is_a_flagged_row_not_a_traceback():
    lines = POLARIS.splitlines()
    i = max(k for k, x in enumerate(lines) if x.strip().startswith("1073741824"))
    parts = lines[i].split()
    parts[8] = "inf"
    lines[i] = "  ".join(parts)
    d = _diag("\n".join(lines))
    assert "wrong is inf" in next(r["flag"] for r in d.rows if r.get("flag"))


def test_a_socket_fallback_is_a_cause_and_plugins_are_named():
    text = re.sub(r"NCCL INFO NET/IB : Using .*", "NCCL INFO NET/Socket : Using "
                  "[0]eno2np0:172.18.62.151<0>", SNELLIUS)
    text = text.replace("via NET/IB/", "via NET/Socket/")
    d = _diag(text)
    assert d.system["nic"] == "tcp-100g"
    assert any("fell back to TCP sockets" in c for c in d.causes)
    p5 = (LOGS / "aws-p5-2n-nccl2.22.3-tuner-efa.log").read_text()
    d = _diag(p5)
    assert "tuner plugin in use: nccl_ofi_tuner: it chooses algorithms" in "\n".join(d.notes)
    assert "net plugin in use: AWS Libfabric" in d.notes


def test_a_net_plugin_name_with_a_space_keeps_gdr_and_the_nics_it_uses():
    # NERSC Perlmutter: aws-ofi-nccl on cxi prints "via NET/AWS Libfabric/7/GDRDMA"
    d = _diag((LOGS / "perlmutter-a100-2n-all_reduce-shifter.log").read_text())
    assert d.system["nic"] == "slingshot-200g" and d.system["nics_per_node"] == 4
    assert not any("GPUDirect RDMA off" in c for c in d.causes)
    assert any("NET devices [1, 3, 5, 7]" in e for e in d.guess.evidence)
    broken = (LOGS / "perlmutter-a100-2n-all_reduce-shifter.log").read_text().replace(
        "/GDRDMA", "")
    assert any("GPUDirect RDMA off" in c for c in _diag(broken).causes)


def test_nccl_algo_rules_collectives_not_sendrecv():
    # MOC: NCCL_ALGO=RING in the environment of a sendrecv run (NCCL's p2p has no algorithm)
    text = (LOGS / "moc-h100-2n-4g-sendrecv-roce.log").read_text()
    d = _diag(text, name="sendrecv_roce_4gpu.log")
    assert d.collective == "sendrecv" and d.ratio is not None
    assert parse_log(text).info.env["NCCL_IB_DISABLE"] == "0"  # NCCL printed "0."


def test_a_job_scripts_shell_trace_is_the_environment_nccl_ran_in():
    # CSCS Alps: no INFO lines, but `bash -x` printed the exports; FI_CXI_* says Slingshot
    text = (LOGS / "alps-gh200-2n-all_reduce.log").read_text()
    log = parse_log(text)
    assert log.info.env["NCCL_NET"] == "AWS Libfabric"
    assert log.info.env["NCCL_NET_GDR_LEVEL"] == "PHB"
    assert _diag(text).system["nic"] == "slingshot-200g"
    later = text + "\nnid005551:1:1 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to SYS\n"
    assert parse_log(later).info.env["NCCL_NET_GDR_LEVEL"] == "SYS"  # NCCL's own line wins


def test_a_gh200_log_is_the_four_gh200_node_without_nvswitch():
    # "NVIDIA GH200 120GB" on 4 GPUs per host: the 4-GH200 node (NVLink between every pair,
    # no NVSwitch), not a DGX H100 with 4 of its 8 GPUs; so no NVLS at 16-64 MiB on 4+ nodes
    from gpucomm.interop.system import infer_system
    from gpucomm.simulate import predict
    from gpucomm.topology import build_topology
    log = parse_log((LOGS / "alps-gh200-4n-all_reduce.log").read_text())
    guess = infer_system(log)
    assert (guess.gpu, guess.system, guess.gpus_per_node) == ("gh200", "cray-ex254n", 4)
    topo = build_topology(**guess.build_kwargs())
    assert not topo.in_switch_reduction
    assert all(predict("all_reduce", s << 20, topo, nccl_version="2.23").algorithm
               not in ("nvls", "nvls_tree") for s in (16, 32, 64))


def test_slow_mid_sizes_on_slingshot_with_default_cxi_queues_name_the_queue_settings():
    # Alps: 64 KiB-1 MiB at ~1 GB/s; the same job with FI_CXI_DEFAULT_CQ_SIZE=131072 (and TX
    # size, devmem copy threshold) ran 512 KiB-1 MiB 2.6-3.2x faster (the source's A/B)
    text = (LOGS / "alps-gh200-2n-all_reduce.log").read_text()
    assert any("FI_CXI_DEFAULT_CQ_SIZE is not set" in c for c in _diag(text).causes)
    tuned = "+ export FI_CXI_DEFAULT_CQ_SIZE=131072\n" + text
    assert not any("FI_CXI_DEFAULT_CQ_SIZE" in c for c in _diag(tuned).causes)
    one_node = (LOGS / "alps-gh200-1n-all_reduce.log").read_text()
    assert not any("FI_CXI" in c for c in _diag(one_node).causes)


def test_gdr_through_the_cpu_is_named_from_nccls_own_distance_line():
    # n013/n014: A100 PCIe, NCCL_NET_GDR_LEVEL=SYS, "GPU Direct RDMA Enabled ... (distance 6
    # <= 7)": PHB, beyond NCCL's default PXB (graph/paths.cc netGdrLevel = PATH_PXB)
    text = (LOGS / "a100pcie-n013-2n-sendrecv-gdr.log").read_text()
    assert parse_log(text).info.gdr_distance == 6
    assert any("GPUDirect RDMA through the CPU" in c for c in _diag(text).causes)
    near = text.replace("(distance 6 <= 7)", "(distance 4 <= 7)")
    assert not any("through the CPU" in c for c in _diag(near).causes)


def test_processes_whose_ranks_restart_at_zero_are_separate_runs_of_the_test():
    """`srun -N2 all_reduce_perf -g 8` of a binary without MPI: each process runs the whole
    test alone on its node, and the two outputs interleave (Together's H100 `_slurm` files).
    One 8-rank test per process, the k-th row of each size to the k-th run; a test of one
    process with many ranks, or an MPI job's ranks, stays one test."""
    text = (LOGS / "together-h100-2x1n-all_reduce-ring.log").read_text()
    runs = parse_logs(text)
    assert [len(r.devices) for r in runs] == [8, 8] and [r.separate_runs for r in runs] == [2, 2]
    assert [r.hosts for r in runs] == [("gpu-dp-2jvzl-pqq7p",), ("gpu-dp-2jvzl-ddjjs",)]
    sizes = [r["size"] for r in runs[0].rows]
    assert sizes == sorted(set(sizes)) and [r["size"] for r in runs[1].rows] == sizes
    d = diagnose(DoctorRequest(runs[0], name="log"))
    assert (d.guess.nodes, d.guess.gpus_per_node) == (1, 8)
    assert any("restart at 0 in each of 2 processes" in w for w in d.warnings)
    one = parse_logs((LOGS / "together-h100-1n-all_reduce-ring.log").read_text())
    assert len(one) == 1 and one[0].separate_runs == 1
    assert len(parse_logs(SNELLIUS)) == 1 and parse_logs(SNELLIUS)[0].separate_runs == 1


def test_the_nccl_version_comes_from_the_banner_or_the_printed_version_line():
    """nccl-tests 2.14+ print the library's version code in the banner (nccl.h NCCL_VERSION:
    X*10000 + Y*100 + Z from 2.9, X*1000 + Y*100 + Z before); newer ones print `NCCL version
    2.16.5+cuda11.8` too. Without INFO lines doctor took neither and modelled the newest NCCL:
    NVLS on a 2.16 log, which NCCL has only from 2.17."""
    together = (LOGS / "together-h100-1n-all_reduce-ring.log").read_text()
    assert parse_log(together).nccl_version == "2.26.2"
    old = together.replace("nccl-library=22602", "nccl-library=2708")
    assert parse_log(old).nccl_version == "2.7.8"
    n013 = parse_logs((LOGS / "a100pcie-n013-2n-all_reduce-gdr.log").read_text())[0]
    assert n013.info.version is None and n013.nccl_version == "2.16.5+cuda11.8"
    algos = {r.get("algorithm") for r in _diag(together).rows}
    assert "nvls" in algos
    algos_216 = {r.get("algorithm") for r in _diag(together.replace("nccl-library=22602",
                                                                     "nccl-library=21605")).rows}
    assert "nvls" not in algos_216 and algos_216


def test_busbw_that_is_ring_s_where_the_model_ran_nvls_says_nvls_was_likely_off():
    """Together's H100 'ring' runs (NCCL_ALGO=RING, not in the log): 75% of the NVLS the
    model runs, 99% of ring's prediction. doctor names it; not where the user says ring, nor
    where the busbw is NVLS's (their 'nvls' runs)."""
    ring = parse_log((LOGS / "together-h100-1n-all_reduce-ring.log").read_text())
    d = diagnose(DoctorRequest(ring, name="log"))
    assert d.ratio < 0.85 and any("what NCCL's ring gives" in c for c in d.causes)
    told = diagnose(DoctorRequest(ring, name="log", algorithm="ring"))
    assert told.ratio > 0.9 and not any("ring gives" in c for c in told.causes)
    nvls = parse_logs((LOGS / "together-h100-2x1n-all_reduce-nvls.log").read_text())[0]
    assert not any("ring gives" in c for c in diagnose(DoctorRequest(nvls, name="log")).causes)


def test_old_channel_lines_and_a_plugins_nics_are_read():
    """NCCL 2.9.9 prints `Channel 00 : 1[101d0] -> 8[101c0] [send] via NET/AWS Libfabric/1/GDRDMA`
    (no /nChannels) and aws-ofi-nccl lists no NICs: the channels' NET devices say 4 EFA NICs a
    p4d node, as its source states. Its INFO lines are there, so doctor does not ask for them,
    and its 8 collective channels are what NCCL's search gives 4 NICs (2 a NIC), no cause; told
    8 NICs, 8 channels are fewer than the 16 those would get."""
    log = parse_log((LOGS / "aws-p4d-eks-2n-nccl2.9.9-efa.log").read_text())
    assert log.info.transports.get("NET") and log.info.net_devices == {0, 1, 2, 3}
    assert log.info.gdr is True
    d = diagnose(DoctorRequest(log, name="p4d"))
    assert d.system["nics_per_node"] == 4 and d.system["nic"] == "efa-100g"
    assert not any("NCCL_DEBUG=INFO" in x for x in d.notes + d.causes)
    assert not any("fewer channels" in c for c in d.causes)
    told = diagnose(DoctorRequest(log, name="p4d", nics_per_node=8))
    assert any("fewer channels than expected: NCCL ran 8, 8 NIC(s) a node give 16" in c
               for c in told.causes)


def test_a_corrupt_run_is_called_corrupt_before_its_speed():
    """Olivia's 4-node GH200 all_reduce without HPE's settings (data/logs, as the site shows it):
    LL128 over GPUDirect corrupts 2-64 MiB (NVIDIA/nccl#2001) while 128 MiB runs at full speed
    with no wrong value. The verdict on 128 MiB's speed alone would read 'normal'."""
    d = diagnose(DoctorRequest(parse_log((LOGS / "olivia-gh200-4n-all_reduce-no-env.log")
                                         .read_text()), name="olivia"))
    assert d.verdict.startswith("results corrupt: 6 size(s) returned wrong values (#wrong, "
                                "2 MiB to 64 MiB); speed: 128 MiB at")
    assert any("wrong values (#wrong): the results are corrupt" in c for c in d.causes)
    clean = diagnose(DoctorRequest(parse_log((LOGS / "olivia-gh200-2n-all_reduce.log")
                                             .read_text()), name="olivia"))
    assert not clean.verdict.startswith("results corrupt") and clean.ratio > 0.5
