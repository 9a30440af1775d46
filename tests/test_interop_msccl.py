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
ALGOS = [a for a in algorithms() if a.collective != "barrier"]
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
