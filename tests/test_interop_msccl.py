"""MSCCL XML out and in: round trips for every registered algorithm, hand-written files, errors."""
from pathlib import Path

import numpy as np
import pytest

from gpucomm import dtypes as dt
from gpucomm.algorithms import algorithms
from gpucomm.cli import main
from gpucomm.collectives import check_outputs, get_collective, layout
from gpucomm.errors import ScheduleError
from gpucomm.execute import execute
from gpucomm.interop.msccl import MscclError, from_msccl_xml, to_msccl_xml
from gpucomm.simulate import simulate
from gpucomm.topology import build_topology
from gpucomm.verify import verify

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "msccl"
# MSCCL's executor has no sendrecv: it is a pair of `send` and `recv` files (tested below)
ALGOS = [a for a in algorithms() if a.collective not in ("barrier", "sendrecv")]
RANKS = (1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 16)  # small, odd, prime, powers of two, up to 16


def _inputs(sched, seed=0, size=4096 * 3 + 40):
    p, coll = sched.nranks, sched.collective
    lay = layout(coll, size - size % (4 * coll.size_blocks(p)) or 4 * coll.size_blocks(p),
                 "float32", p)
    rng = np.random.default_rng(seed)
    ins = []
    for r in range(p):
        blocks = coll.inputs(r, p, sched.root)
        ins.append(None if blocks is None else
                   dt.random_array(rng, blocks[1] * lay.block_count, lay.dtype, "sum"))
    return ins, lay


@pytest.mark.parametrize("alg", ALGOS, ids=lambda a: f"{a.collective}-{a.name}")
def test_round_trip_verifies_and_executes_the_same(alg):
    coll = get_collective(alg.collective)
    for p in RANKS:
        for root in ((0, p - 1) if coll.rooted else (0,)):
            try:
                sched = alg.build(p, root=root)
            except ScheduleError:
                continue
            back = from_msccl_xml(to_msccl_xml(sched))
            assert (back.collective, back.nranks, back.root) == (sched.collective, p, root)
            verify(back)
            ins, lay = _inputs(sched, seed=p)
            want = execute(sched, ins, "sum", lay.dtype)
            got = execute(back, ins, "sum", lay.dtype)
            for a, b in zip(want, got):
                assert (a is None and b is None) or np.array_equal(a, b), (p, root)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.xml")), ids=lambda p: p.stem)
def test_hand_written_files_import_verify_simulate_and_run(path):
    sched = from_msccl_xml(path.read_text())
    assert sched.collective.name == "all_reduce" and sched.nranks == 4
    verify(sched)
    topo = build_topology("dgx-h100", nodes=2, gpus_per_node=2)
    res = simulate(sched, topo, 1 << 24)
    assert res.time_s > 0 and res.busbw_GBps > 0
    ins, lay = _inputs(sched)
    outs = execute(sched, ins, "sum", lay.dtype)
    check_outputs(sched.collective, outs, ins, "sum", lay.dtype)


def test_hierarchical_file_crosses_the_network_once_per_half():
    sched = from_msccl_xml((EXAMPLES / "allreduce_hierarchical_2x2.xml").read_text())
    cross = [op for op in sched.ops() if op.src // 2 != op.dst // 2]
    assert len(cross) == 4 and sched.channels == 2
    assert {op.channel for op in cross} == {1}


def test_export_names_the_msccl_schema():
    from gpucomm.algorithms import build
    xml = to_msccl_xml(build("all_gather", "ring", 4), protocol="ll128", max_bytes=1 << 20)
    head = xml.splitlines()[0]
    for attr in ('coll="allgather"', 'proto="LL128"', 'ngpus="4"', 'inplace="1"',
                 'maxBytes="1048576"'):
        assert attr in head
    assert 'type="s"' in xml and 'type="r"' in xml and "<tb " in xml


GOOD = (EXAMPLES / "allreduce_hierarchical_2x2.xml").read_text()


@pytest.mark.parametrize("text,needle", [
    ("<algo", "not well-formed XML at line 1"),
    ("<foo/>", "root element must be <algo>"),
    (GOOD.replace('coll="allreduce"', 'coll="allmagic"'), "unknown collective"),
    (GOOD.replace('type="rrc"', 'type="rrx"', 1),
     "<step s=1> of <tb id=0> of <gpu id=0>: type='rrx'"),
    (GOOD.replace('<gpu id="3"', '<gpu id="9"'), "<gpu id=9>: id must be below ngpus=4"),
    (GOOD.replace('cnt="1" depid="1" deps="2"', 'cnt="1" depid="7" deps="2"', 1),
     "thread block 7, which <gpu id=0> does not have"),
    (GOOD.replace('srcbuf="s" srcoff="0" dstbuf="i"', 'srcbuf="q" srcoff="0" dstbuf="i"', 1),
     "srcbuf='q', allowed are i, o, s"),
    (GOOD.replace('<tb id="1" send="2" recv="2"', '<tb id="1" send="2" recv="-1"', 1),
     "has recv=-1"),
    (GOOD.replace('i_chunks="2"', 'i_chunks="3"', 1), "chunk counts disagree"),
])
def test_malformed_files_name_the_element(text, needle):
    with pytest.raises(MscclError) as e:
        from_msccl_xml(text)
    assert needle in str(e.value)


def test_deadlock_is_reported_not_hung():
    # rank 0 receives first from rank 1 which also receives first: nobody sends
    bad = GOOD.replace('<step s="0" type="s" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" '
                       'depid="-1" deps="-1" hasdep="0"/>',
                       '<step s="0" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" '
                       'cnt="0" depid="0" deps="3" hasdep="0"/>')
    with pytest.raises(MscclError, match="deadlock|never"):
        from_msccl_xml(bad)


def test_cli_export_then_import(tmp_path, capsys):
    out = tmp_path / "ring.xml"
    assert main(["algo", "export", "ring", "all_reduce", "--ranks", "8", "--format", "msccl-xml",
                 "--output", str(out)]) == 0
    assert main(["algo", "import", str(out), "--format", "json"]) == 0
    capsys.readouterr()
    assert main(["algo", "show", str(out), "all_reduce"]) == 0
    assert "step 0:" in capsys.readouterr().out
    assert main(["algo", "run", str(out), "all_reduce"]) == 0
    assert main(["algo", "show", str(out), "all_gather"]) == 2
    assert "not all_gather" in capsys.readouterr().err


def test_verify_and_bench_take_the_file(tmp_path, capsys):
    import os
    import subprocess
    import sys
    out = tmp_path / "ring2.xml"
    assert main(["algo", "export", "ring", "all_reduce", "--ranks", "2", "--output", str(out)]) == 0
    assert main(["algo", "verify", str(out)]) == 0
    assert "verified" in capsys.readouterr().out
    src = str(Path(__file__).resolve().parents[1] / "src")
    host = tmp_path / "host.yaml"
    host.write_text("bandwidth_Bps: 10.0e9\nlatency_s: 2.0e-5\n")
    env = dict(os.environ, PYTHONPATH=src, GPUCOMM_HOST_YAML=str(host))
    p = subprocess.run([sys.executable, "-m", "gpucomm", "bench", "-g", "2", "--algorithm",
                        str(out), "-b", "1K", "-e", "8K", "-f", "8", "-n", "2", "-w", "1"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "algorithm file:ring2" in p.stdout and "Out of bounds values : 0 OK" in p.stdout
    p = subprocess.run([sys.executable, "-m", "gpucomm", "bench", "-g", "4", "--algorithm",
                        str(out), "-e", "8"], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "is for 2 ranks" in p.stderr


# ---- what MSCCL's executor accepts (issue 27, item 8) ---------------------------------------
def test_exports_past_the_executors_limits_are_spread_over_channels_and_still_right():
    """Ring all-reduce at 34 ranks has 66 sends a connection (the executor allows 64 steps a
    thread block); direct all-to-all at 34 has 33 peers on channel 0 (it allows 32). As they
    were they would be refused; spread over channels they load and compute the same."""
    from gpucomm.interop.msccl import MAX_STEPS, executor_problems
    for coll, name in (("all_reduce", "ring"), ("all_to_all", "direct")):
        sched = verify(build_algo(coll, name, 34))
        plain = executor_problems(to_msccl_xml(sched, fit=False))
        assert plain and all("executor allows" in line for line in plain)
        xml = to_msccl_xml(sched)
        assert executor_problems(xml) == []
        back = verify(from_msccl_xml(xml))
        assert back.channels > 1
        ins, lay = _inputs(sched, seed=1, size=34 * 64 * 4)
        for a, b in zip(execute(sched, ins, "sum", lay.dtype), execute(back, ins, "sum",
                                                                        lay.dtype)):
            assert np.array_equal(a, b)
    assert any(f"{MAX_STEPS} (MSCCL_MAX_NUM_STEPS)" in line for line in
               executor_problems(to_msccl_xml(build_algo("all_reduce", "ring", 34), fit=False)))


def test_export_warns_where_limits_still_fail(capsys, tmp_path, monkeypatch):
    """A fitted export prints nothing; what is still over a limit is a warning on stderr."""
    import gpucomm.interop.msccl as msccl
    out = tmp_path / "a.xml"
    assert main(["algo", "export", "ring", "all_reduce", "--ranks", "34", "--output",
                 str(out)]) == 0
    assert "warning" not in capsys.readouterr().err
    monkeypatch.setattr(msccl, "executor_problems", lambda text: ["rank 0 thread block 9: 80 "
                        "steps, the executor allows 64 (MSCCL_MAX_NUM_STEPS)"])
    assert main(["algo", "export", "ring", "all_reduce", "--ranks", "4", "--output",
                 str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: MSCCL's executor would refuse this file") == 1 and out.exists()


def test_sendrecv_is_a_send_file_and_a_recv_file_as_the_executor_spells_them():
    """msccl_parser.cc knows coll="send" (an ncclSend's program: its only buffer is `i`) and
    coll="recv" (an ncclRecv's: `o`), never in place; the pair imports back as the sendrecv."""
    import xml.etree.ElementTree as ET

    from gpucomm.interop.msccl import COLL_NAMES, executor_problems
    from gpucomm.interop.msccl_p2p import from_msccl_send_recv, to_msccl_send_recv
    with pytest.raises(ScheduleError, match="a `send` and a `recv` file"):
        to_msccl_xml(build_algo("sendrecv", "direct", 2))
    assert "sendrecv" not in COLL_NAMES.values()
    for p in (2, 3, 8):
        sched = build_algo("sendrecv", "direct", p)
        files = to_msccl_send_recv(sched, protocol="ll", min_bytes=1024, max_bytes=1 << 20)
        for part, buf, other in (("send", "i", "o"), ("recv", "o", "i")):
            algo = ET.fromstring(files[part])
            assert (algo.get("coll"), algo.get("inplace"), algo.get("outofplace"),
                    algo.get("proto")) == (part, "0", "1", "LL")
            assert not executor_problems(files[part])
            for g in algo.iter("gpu"):
                assert g.get(f"{other}_chunks") == "0" and g.get(f"{buf}_chunks") != "0"
                tbs = list(g.iter("tb"))
                assert tbs and all(tb.get("recv" if part == "send" else "send") == "-1"
                                   for tb in tbs)
                steps = [st for tb in tbs for st in tb.iter("step")]
                assert {st.get("type") for st in steps} == {"s" if part == "send" else "r"}
                assert {st.get("srcbuf" if part == "send" else "dstbuf") for st in steps} == {buf}
        back = from_msccl_send_recv(files["send"], files["recv"])
        verify(back)
        assert back.collective.name == "sendrecv" and back.nops == sched.nops
        assert dict(back.params)["min_bytes"] == 1024
        ins, _ = _inputs(back, seed=p)
        check_outputs("sendrecv", execute(back, ins), ins)
    with pytest.raises(MscclError, match="expected the send file"):
        from_msccl_send_recv(files["recv"], files["recv"])


def test_algo_export_writes_the_send_and_recv_files_and_import_reads_the_pair(tmp_path, capsys):
    out = tmp_path / "sr.xml"
    assert main(["algo", "export", "direct", "sendrecv", "--ranks", "4", "--output",
                 str(out)]) == 0
    assert "wrote" in capsys.readouterr().out and not out.exists()
    for part in ("send", "recv"):
        assert (tmp_path / f"sr.{part}.xml").exists()
        assert main(["algo", "import", str(tmp_path / f"sr.{part}.xml"), "--size", "1M"]) == 0
        assert "sendrecv on 4 ranks" in capsys.readouterr().out
    assert main(["algo", "export", "direct", "sendrecv", "--ranks", "4"]) == 2
    assert "give --output" in capsys.readouterr().err
    lone = tmp_path / "lone.xml"
    lone.write_text((tmp_path / "sr.send.xml").read_text())
    assert main(["algo", "import", str(lone)]) == 2
    assert "send half of a sendrecv" in capsys.readouterr().err


@pytest.mark.parametrize("alg", ALGOS, ids=lambda a: f"{a.collective}-{a.name}")
def test_out_of_place_exports_never_write_the_input_and_compute_the_same(alg):
    import xml.etree.ElementTree as ET
    coll = get_collective(alg.collective)
    for p in (3, 4, 8):
        try:
            sched = alg.build(p, root=p - 1 if coll.rooted else 0)
        except ScheduleError:
            continue
        text = to_msccl_xml(sched, outofplace=True)
        algo = ET.fromstring(text)
        assert algo.get("outofplace") == "1"  # and inplace="1" where NCCL's buffers nest
        writes = [st for st in algo.iter("step") if st.get("type") not in ("s", "nop")]
        assert all(st.get("dstbuf") != "i" for st in writes), (p, alg.name)
        back = verify(from_msccl_xml(text))
        ins, lay = _inputs(sched, seed=p)
        for a, b in zip(execute(sched, ins, "sum", lay.dtype), execute(back, ins, "sum",
                                                                        lay.dtype)):
            assert (a is None and b is None) or np.array_equal(a, b), p


def test_import_simulates_with_the_files_protocol_and_byte_range(capsys, tmp_path,
                                                                  monkeypatch):
    """The file's LL and maxBytes 1M are what import simulates; the in-process check runs at
    a few elements per chunk whatever --size says (it used 9.5 GB for a 16-rank ring)."""
    import json

    import gpucomm.execute as ex
    seen = []
    real = ex.execute
    monkeypatch.setattr(ex, "execute", lambda s, ins, *a, **k: (
        seen.append(sum(x.size for x in ins if x is not None)), real(s, ins, *a, **k))[1])
    xml = tmp_path / "r.xml"
    assert main(["algo", "export", "ring", "all_reduce", "--ranks", "16", "--protocol", "ll",
                 "--max-bytes", "1M", "--output", str(xml)]) == 0
    capsys.readouterr()
    assert main(["algo", "import", str(xml), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["protocol"], doc["size"], doc["matches_reference"]) == ("ll", 1 << 20, True)
    assert seen and max(seen) < 10_000  # elements over all ranks, not 16 x 64M / 4
    assert main(["algo", "import", str(xml), "--size", "64M", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["size"] == 64 << 20 and "outside the file's range 0..1M" in err


def build_algo(coll, name, p):
    from gpucomm.algorithms import build
    return build(coll, name, p)
