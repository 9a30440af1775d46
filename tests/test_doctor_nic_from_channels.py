"""doctor reads the NIC speed from NCCL's collective channel count where the log prints no
port speed (issue 23): NCCL's search doubles its one channel per NIC only from 25 GB/s
(search.cc ncclTopoDupChannels), so 4 H100 NICs that print 8 channels run below 25 GB/s
(Snellius: 4 x 200G by its own ibstat), and 16 mean 400G. A --nic given, or a speed line in
the log, always wins."""
import re
from pathlib import Path

import pytest

from gpucomm.cli import main
from gpucomm.interop.doctor import DoctorRequest, diagnose
from gpucomm.interop.nccltests import parse_log

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
SNELLIUS = (LOGS / "snellius-h100-2n-all_reduce.log").read_text()
NOTE = ("NICs: 4 × ib-hdr (200G), from NCCL's 8 collective channels "
        "(search.cc ncclTopoDupChannels)")


def _diag(text, **kw):
    return diagnose(DoctorRequest(parse_log(text), name="log", **kw))


def _channels(text, n):
    """The log as NCCL would print it with n collective channels."""
    text = re.sub(r"\b8 coll channels, 8 collnet channels",
                  f"{n} coll channels, {n} collnet channels", text)
    return re.sub(r"(Channel \d\d)/08 :", rf"\1/{n:02d} :", text)


def test_snellius_8_channels_on_4_h100_nics_is_200g_and_doctor_says_why():
    d = _diag(SNELLIUS)
    assert (d.system["nic"], d.system["nics_per_node"]) == ("ib-hdr", 4)
    assert d.notes[0] == NOTE
    assert NOTE in d.guess.evidence
    assert d.ratio is not None and 0.85 < d.ratio < 1.05  # normal on 200G; 49% on 400G


def test_the_command_prints_the_line(capsys):
    assert main(["doctor", str(LOGS / "snellius-h100-2n-all_reduce.log")]) == 0
    out = capsys.readouterr().out
    assert f"  - {NOTE}\n" in out and "over 4 × ib-hdr" in out


def test_16_channels_keep_the_h100_generations_400g_and_say_nothing():
    d = _diag(_channels(SNELLIUS, 16))
    assert d.system["nic"] == "ib-ndr"
    assert not any(n.startswith("NICs:") for n in d.notes)


def test_the_channel_lines_alone_are_read_when_no_coll_channels_line_is_printed():
    text = "\n".join(line for line in SNELLIUS.splitlines() if "coll channels" not in line)
    log = parse_log(text)
    assert log.info.coll_channels is None and log.info.channels_total == 8
    assert _diag(text).system["nic"] == "ib-hdr"
    assert _diag(_channels(text, 16)).system["nic"] == "ib-ndr"


@pytest.mark.parametrize("nic", ["ib-ndr", "ib-xdr", "roce-400g"])
def test_an_explicit_nic_wins_and_the_note_is_not_printed(nic):
    d = _diag(SNELLIUS, nic=nic)
    assert d.system["nic"] == nic
    assert not any(n.startswith("NICs:") for n in d.notes)
    assert any(f"--nic {nic} contradicts the log's network (ib-hdr, from NCCL's channel count)"
               in w for w in d.warnings)


def test_the_logs_own_port_speed_wins_over_the_channel_count():
    speed = SNELLIUS.replace(
        "NCCL INFO NCCL version", "NCCL INFO NET/IB: [1] mlx5_2:uverbs2:1/IB provider=Mlx5 "
        "speed=400000 context=0x1\ngcn151:1:1 [0] NCCL INFO NCCL version", 1)
    d = _diag(speed)
    assert d.system["nic"] == "ib-ndr"
    assert not any(n.startswith("NICs:") for n in d.notes)


@pytest.mark.parametrize("env", ["NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_CTAS"])
def test_a_channel_count_the_environment_set_says_nothing_of_the_nics(env):
    text = SNELLIUS.replace("NCCL INFO NCCL version",
                            f"NCCL INFO {env} set by environment to 8\n"
                            "gcn151:1:1 [0] NCCL INFO NCCL version", 1)
    assert _diag(text).system["nic"] == "ib-ndr"


@pytest.mark.parametrize("n", [4, 12, 32])
def test_a_count_no_catalog_nic_gives_keeps_the_generations_default(n):
    assert _diag(_channels(SNELLIUS, n)).system["nic"] == "ib-ndr"


def test_an_old_nccl_whose_search_is_not_modelled_keeps_the_default():
    text = SNELLIUS.replace("NCCL version 2.22.3", "NCCL version 2.12.12")
    assert _diag(text).system["nic"] == "ib-ndr"


def test_without_gpudirect_rdma_the_count_says_nothing_of_the_nics():
    # the GPU->NIC path then runs through the CPU (paths.cc), which net_graph does not model
    text = SNELLIUS.replace("/GDRDMA", "")
    assert parse_log(text).info.gdr is False
    assert _diag(text).system["nic"] == "ib-ndr"
