"""`gpucomm --version`, optional dependencies found before any work, the activity spinner."""
from __future__ import annotations

import importlib
import sys
import time

import pytest

import gpucomm
from gpucomm.cli import main, progress


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"gpucomm {gpucomm.__version__}"


@pytest.mark.parametrize("argv, module, extra", [
    (["sim", "--collective", "all_reduce", "--plot", "PLOT"], "matplotlib", "plot"),
    (["sim", "--collective", "all_reduce", "--html", "HTML"], "plotly", "html"),
    (["plan", "--model", "llama3-8b", "--tp", "8", "--html", "HTML"], "plotly", "html"),
    (["bench", "--backend", "gloo", "-e", "1K"], "torch", "torch"),
    (["bench", "--backend", "mpi", "-e", "1K"], "mpi4py", "mpi"),
    (["report", "HTML"], "plotly", "html"),
])
def test_a_missing_extra_fails_at_once_naming_it(argv, module, extra, tmp_path, monkeypatch,
                                                  capsys):
    monkeypatch.setitem(sys.modules, module, None)  # find_spec: "not installed"
    argv = [str(tmp_path / "out.png") if a == "PLOT" else str(tmp_path / "out.html")
            if a == "HTML" else a for a in argv]
    started = []
    command = importlib.import_module(f"gpucomm.cli.{argv[0]}")
    monkeypatch.setattr(command, f"cmd_{argv[0]}", lambda args: started.append(args))
    assert main(argv) == 2
    assert started == []  # refused before the command began: no simulation, no ranks
    out, err = capsys.readouterr()
    assert out == ""  # no table was printed first
    assert err.count("\n") == 1
    assert f"needs {module}" in err and f"pip install 'gpucomm[{extra}]'" in err
    assert not list(tmp_path.iterdir())


class _Tty:
    def __init__(self):
        self.text: list[str] = []

    def isatty(self):
        return True

    def write(self, s):
        self.text.append(s)
        return len(s)

    def flush(self):
        pass


def test_activity_shows_while_a_command_is_quiet_and_goes_at_its_first_output(monkeypatch):
    monkeypatch.setattr(progress, "ACTIVITY_DELAY_S", 0.05)
    tty = _Tty()
    with progress.Activity("gpucomm algo import", stream=tty) as act:
        deadline = time.monotonic() + 30  # importing rich can take a while on a loaded machine
        # the spinner's first write may be only the cursor escape: wait for its description
        while "gpucomm algo import" not in "".join(tty.text) and time.monotonic() < deadline:
            time.sleep(0.05)
        shown = "".join(tty.text)
        print("result")  # the command's output stops the spinner
        assert act.done and act.bar is not None
    assert "gpucomm algo import" in shown
    assert sys.stdout is not None and not isinstance(sys.stdout, progress._Tap)


def test_activity_stays_off_on_a_pipe_and_for_quick_commands(monkeypatch):
    class Pipe(_Tty):
        def isatty(self):
            return False

    pipe = Pipe()
    with progress.Activity("x", stream=pipe):
        time.sleep(0.1)
    assert pipe.text == []
    quick = _Tty()
    monkeypatch.setattr(progress, "ACTIVITY_DELAY_S", 60.0)
    with progress.Activity("x", stream=quick) as act:
        pass
    assert quick.text == [] and act.bar is None
