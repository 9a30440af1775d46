"""The HTML report in a real browser (headless Chromium): every chart draws, nothing logs an
error, and a screenshot of the page is kept as a test artifact.

Skipped, with the reason, where no Chromium is installed (`apt-get install chromium`; .ci/run
installs it when it runs as root). The screenshot goes to out/test-artifacts/ (or
$GPUCOMM_ARTIFACTS); GPUCOMM_UPDATE_DOCS=1 also writes its first section to docs/report.png
for docs/interop.md.
"""
import json
import os
import pathlib

import pytest

from gpucomm.cli import main
from gpucomm.report.browser import find_browser, open_in_browser

pytest.importorskip("plotly", reason="the HTML report needs plotly: pip install 'gpucomm[html]'")
BROWSER = find_browser()
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium browser: apt-get install chromium (Debian's package), "
    "or set GPUCOMM_BROWSER to one")
ROOT = pathlib.Path(__file__).resolve().parents[1]
ARTIFACTS = pathlib.Path(os.environ.get("GPUCOMM_ARTIFACTS", ROOT / "out" / "test-artifacts"))
# the report `make demo` writes: sweeps on two DGX H100 nodes (flow model; all-to-all on a
# 2:1 oversubscribed fat-tree), and a planner what-if (Llama 3 70B decode, NVLink vs PCIe)
SIM = ["sim", "all_reduce_perf", "--system", "dgx-h100", "--nodes", "2", "-b", "1K", "-e", "1G",
       "-f", "16", "--sim-model", "flow"]
A2A = ["sim", "alltoall_perf", "--system", "dgx-h100", "--nodes", "2", "--fabric", "fat-tree",
       "--oversubscription", "2", "--sim-model", "flow", "-b", "1M", "-e", "64M", "-f", "8"]
PLAN = ["plan", "--model", "llama3-70b", "--mode", "decode", "--tp", "8", "--seq", "4096",
        "--global-batch", "1", "--gpu", "h100", "--pcie-gen", "5", "--compare",
        "system=dgx-h100,pcie"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("browser")
    parts = []
    for name, argv in (("a2a", A2A), ("sim", SIM), ("plan", PLAN)):
        parts.append(str(d / f"{name}.html"))
        assert main(argv + ["--html", parts[-1]]) == 0
    assert main(["report", *parts, "--output", str(d / "report.html")]) == 0
    return d / "report.html"


def test_every_chart_draws_without_errors(report):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    view = open_in_browser(report, screenshot=shot)
    print(f"screenshot: {shot}")
    nfigs = report.read_text().count('<div class="chart" id=')
    # per sim: sweep x2, topology, links, timeline; plan: steps and memory
    assert view.status["charts"] == nfigs == 5 + 5 + 2
    assert view.status["drawn"] == nfigs, view.status
    assert view.status["errors"] == [] and view.errors == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and view.size[1] > 2000
    assert len(view.sections) == 3 and view.sections == sorted(view.sections)
    if os.environ.get("GPUCOMM_UPDATE_DOCS") == "1":  # docs/interop.md's picture: the first section
        from PIL import Image
        img = Image.open(shot).crop((0, 0, view.size[0], view.sections[1]))
        img.quantize(256).save(ROOT / "docs" / "report.png", optimize=True)


def test_a_broken_page_is_caught(tmp_path, report):
    """The check can fail: a chart with nothing to draw and a script error are reported."""
    html = report.read_text()
    start = html.index('id="gpucomm-figures">') + len('id="gpucomm-figures">')
    end = html.index("</script>", start)
    figs = json.loads(html[start:end])
    figs[0]["data"] = []
    broken = (html[:start] + json.dumps(figs) + html[end:]).replace(
        "</body>", "<script>console.error('boom'); null.x;</script></body>")
    path = tmp_path / "broken.html"
    path.write_text(broken)
    view = open_in_browser(path)
    assert view.status["drawn"] == view.status["charts"] - 1
    assert any("drew nothing" in e for e in view.status["errors"])
    assert any("boom" in e for e in view.errors)
    assert any("exception" in e for e in view.errors)
