"""The runtime's contracts (gpucomm.runtime.contracts) are types a transport author implements,
and mypy holds the project's transports to them."""
import pathlib
import textwrap

import numpy as np
import pytest

from gpucomm.algorithms import build
from gpucomm.runtime.contracts import Arrays, Engine, Transport
from gpucomm.runtime.p2p import NUMPY, P2PTransport

ROOT = pathlib.Path(__file__).resolve().parents[1]


class LoopbackEngine:
    """The smallest Engine: one rank, so nothing is ever posted."""
    rank, nranks = 0, 1

    def post(self, sends, recvs):
        assert not sends and not recvs
        return []

    def wait(self, pending, deadline):
        pass


def test_an_engine_becomes_a_transport():
    engine = LoopbackEngine()
    assert isinstance(engine, Engine) and isinstance(NUMPY, Arrays)
    tr = P2PTransport(engine)
    assert isinstance(tr, Transport)
    x = np.arange(6, dtype=np.float32)
    tr.execute(build("all_reduce", "ring", 1).materialize(), x, x)
    assert x.tolist() == list(range(6))
    tr.barrier()


def test_objects_missing_a_member_are_not_transports_or_engines():
    class NoWait:
        rank, nranks = 0, 1

        def post(self, sends, recvs):
            return []

    assert not isinstance(NoWait(), Engine)
    assert not isinstance(LoopbackEngine(), Transport)  # an engine alone cannot execute


@pytest.mark.slow
def test_mypy_holds_transports_to_the_contract(tmp_path, monkeypatch):
    """The project's transports pass (runtime/_conformance.py); one with a wrong `send` does not,
    and mypy names the member."""
    api = pytest.importorskip("mypy.api", reason="mypy is not installed (pip install .[lint])")
    bad = tmp_path / "bad_transport.py"
    bad.write_text(textwrap.dedent('''
        from gpucomm.runtime.contracts import Transport
        from gpucomm.runtime.p2p import P2PTransport

        class Broken(P2PTransport):
            def send(self, arr, dst: int) -> None:  # no dtype, no timeout
                pass

        def check(t: Broken) -> Transport:
            return t
    '''))
    monkeypatch.setenv("MYPYPATH", str(ROOT / "src"))  # this tree, however gpucomm is installed
    conf = str(ROOT / "pyproject.toml")
    out, err, status = api.run(["--config-file", conf, "--no-error-summary",
                                str(ROOT / "src/gpucomm/runtime/_conformance.py")])
    assert status == 0, out + err
    out, err, status = api.run(["--config-file", conf, "--follow-imports", "silent", str(bad)])
    assert status == 1 and "bad_transport.py" in out and "send" in out, out + err
