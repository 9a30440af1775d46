"""The HTML report: every section present, the embedded data equal to the command's JSON,
every figure a valid plotly figure; `gpucomm report` over saved results."""
import json
import re

import pytest

from gpucomm.cli import main
from gpucomm.report.html import read_report

plotly = pytest.importorskip("plotly", reason="the HTML report needs plotly: pip install "
                             "'gpucomm[html]'")
import plotly.graph_objects as go  # noqa: E402


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def sections(html: str) -> set:
    return set(re.findall(r'data-section="(\w+)"', html))


def figures(html: str) -> list:
    start = html.index('id="gpucomm-figures">') + len('id="gpucomm-figures">')
    return json.loads(html[start:html.index("</script>", start)])


def check_figures(html: str) -> list:
    """Every figure is one plotly accepts (unknown properties raise) and has a div."""
    figs = figures(html)
    for f in figs:
        go.Figure({"data": f["data"], "layout": f["layout"]})
        assert f'<div class="chart" id="{f["id"]}">' in html
        assert any(len(t.get("x") or t.get("z") or []) for t in f["data"]), f["id"]
    return figs


@pytest.fixture(scope="module")
def sim_report(tmp_path_factory):
    path = tmp_path_factory.mktemp("r") / "sim.html"
    argv = ["sim", "all_reduce_perf", "--system", "dgx-h100", "--nodes", "2", "-b", "1K",
            "-e", "4M", "-f", "64", "--sim-model", "flow", "--algorithm", "ring",
            "--html", str(path), "--format", "json"]
    return argv, path


def test_sim_html_embeds_the_json_result_and_every_section(capsys, sim_report):
    argv, path = sim_report
    rc, out, err = run(capsys, *argv)
    assert rc == 0 and f"wrote {path}" in err
    html = path.read_text()
    doc = read_report(path)
    (e,) = doc["entries"]
    assert e["result"] == json.loads(out)  # the data embedded is the JSON result
    assert e["kind"] == "sim" and e["version"] == doc["version"]
    assert e["command"] == "gpucomm " + " ".join(argv)
    assert e["inputs"]["system"] == "dgx-h100" and e["inputs"]["nodes"] == 2
    assert sections(html) == {"sweep", "topology", "links", "timeline"}
    assert "<script src=" not in html and "<link " not in html  # nothing fetched: self-contained
    figs = check_figures(html)
    assert len(figs) == 5
    # the chosen line is the result's busbw; every protocol ring tried is a line of its own
    sweep = figs[0]["data"]
    chosen = [t for t in sweep if t["name"] == "chosen"][0]
    assert chosen["y"] == [r["busbw"] for r in e["result"]["rows"]]
    assert {t["name"] for t in sweep} >= {"ring/ll", "ring/ll128", "ring/simple", "chosen"}
    # the timeline holds the Chrome trace's ops of the largest size: 2(P-1) steps x P x channels
    trace = e["extras"]["trace"]
    assert trace["size"] == 4 << 20 and trace["ops_total"] == len(trace["ops"])
    assert trace["ops_total"] % (2 * 15 * 16) == 0
    assert trace["links"]["method"] == "flow rates"  # the flow model re-run, every rate
    assert max(max(row) for row in trace["links"]["util"]) <= 1.0
    topo = e["extras"]["topology"]
    kinds = {d[1] for d in topo["devices"]}
    assert {"gpu", "nvswitch", "nic", "switch"} <= kinds
    assert {ln[3] for ln in topo["links"]} >= {"nvlink", "pcie", "ib"}


@pytest.mark.parametrize("nodes", [1, 2])
def test_sim_nvls_report_draws_the_switch_chunks(capsys, tmp_path, nodes):
    path = tmp_path / "nvls.html"
    rc, _, _ = run(capsys, "sim", "--system", "dgx-h100", "--nodes", str(nodes), "-b", "1G",
                   "-e", "1G", "--html", str(path))
    assert rc == 0
    trace = read_report(path)["entries"][0]["extras"]["trace"]
    assert trace["algorithm"] == ("nvls" if nodes == 1 else "nvls_tree")
    phases = {"NVLS latency", "load-reduce", "multicast"} | (
        {"inter-node tree"} if nodes > 1 else set())
    assert {op[1] for op in trace["ops"]} == phases


def test_plan_compare_html(capsys, tmp_path):
    path = tmp_path / "plan.html"
    argv = ["plan", "--model", "llama3-70b", "--mode", "decode", "--tp", "8", "--seq", "4096",
            "--global-batch", "1", "--gpu", "h100", "--pcie-gen", "5",
            "--compare", "system=dgx-h100,pcie", "--format", "json", "--html", str(path)]
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    html = path.read_text()
    (e,) = read_report(path)["entries"]
    assert e["kind"] == "plan_compare" and e["result"] == json.loads(out)
    assert sections(html) == {"plan"}
    steps, mem = check_figures(html)
    assert steps["data"][0]["x"] == ["system=dgx-h100", "system=pcie"]
    compute = [t for t in steps["data"] if t["name"] == "compute"][0]
    assert compute["y"] == pytest.approx([1e3 * v["compute_time_s"] for v in e["result"]])
    # the stacked parts add up to the step time of each variant
    bars = [t for t in steps["data"] if t["type"] == "bar"]
    for i, v in enumerate(e["result"]):
        assert sum(t["y"][i] for t in bars) == pytest.approx(1e3 * v["step_time_s"], rel=1e-6)
    hbm = [t for t in mem["data"] if t["name"] == "HBM"][0]
    assert hbm["y"] == pytest.approx([v["hbm_bytes"] / 1e9 for v in e["result"]])


def test_bench_html_has_measured_predicted_and_error(capsys, tmp_path):
    path = tmp_path / "bench.html"
    rc, out, err = run(capsys, "bench", "--nranks", "2", "-b", "1K", "-e", "64K", "-f", "8",
                       "--iters", "3", "-w", "1", "--format", "json", "--html", str(path))
    assert rc == 0
    html = path.read_text()
    (e,) = read_report(path)["entries"]
    assert e["kind"] == "bench" and e["result"] == json.loads(out)
    assert sections(html) == {"measured"}
    bw, times, error = check_figures(html)
    assert {t["name"] for t in bw["data"]} == {"measured (out-of-place)", "measured (in-place)",
                                               "predicted"}
    assert times["data"][0]["y"] == [r["time_us"] for r in e["result"]["rows"]]
    for r, pct in zip(e["result"]["rows"], error["data"][0]["y"]):
        if r.get("predicted_time_us"):
            assert pct == pytest.approx(100 * (r["time_us"] / r["predicted_time_us"] - 1))


def test_report_command_merges_json_and_html(capsys, tmp_path, sim_report):
    _, sim_html = sim_report
    if not sim_html.exists():
        run(capsys, *sim_report[0])
    rc, plan_json, _ = run(capsys, "plan", "--model", "llama3-8b", "--tp", "8", "--seq", "2048",
                           "--format", "json")
    (tmp_path / "plan.json").write_text(plan_json)
    rc, search_json, _ = run(capsys, "plan", "--model", "llama3-8b", "--nodes", "2", "--seq",
                             "2048", "--global-batch", "64", "--search", "--top", "3",
                             "--format", "json")
    (tmp_path / "search.json").write_text(search_json)
    out = tmp_path / "all.html"
    rc, _, err = run(capsys, "report", str(sim_html), str(tmp_path / "plan.json"),
                     str(tmp_path / "search.json"), "--output", str(out))
    assert rc == 0 and "3 sections" in err
    doc = read_report(out)
    assert [e["kind"] for e in doc["entries"]] == ["sim", "plan", "plan_search"]
    assert doc["entries"][0] == read_report(sim_html)["entries"][0]  # taken over as it was
    assert doc["entries"][1]["result"] == json.loads(plan_json)
    assert doc["entries"][2]["result"] == json.loads(search_json)
    assert doc["command"].startswith("gpucomm report ")
    html = out.read_text()
    assert sections(html) == {"sweep", "topology", "links", "timeline", "plan"}
    assert len(re.findall(r'<section class="entry"', html)) == 3
    check_figures(html)


@pytest.mark.parametrize("content, needle", [
    ("{not json", "is not JSON"),
    (None, "cannot read"),
])
def test_report_bad_input_is_one_line(capsys, tmp_path, content, needle):
    path = tmp_path / "in.json"
    if content is not None:
        path.write_text(content)
    rc, out, err = run(capsys, "report", str(path), "--output", str(tmp_path / "o.html"))
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.html").exists()


def test_report_of_an_html_file_that_is_not_a_report(capsys, tmp_path):
    path = tmp_path / "x.html"
    path.write_text("<html></html>")
    rc, _, err = run(capsys, "report", str(path), "--output", str(tmp_path / "o.html"))
    assert rc == 2 and "not a gpucomm HTML report" in err


def test_embedded_json_cannot_close_its_script(tmp_path):
    from gpucomm.report.html import write_html
    path = write_html(tmp_path / "x.html", {"note": "</script><script>alert(1)</script>"})
    assert read_report(path)["entries"][0]["result"]["note"].startswith("</script>")
    html = (tmp_path / "x.html").read_text()
    assert "alert(1)" in html and "<script>alert(1)" not in html
    assert html.count("</script>") == html.count("<script")


def test_sim_compare_html_has_the_error_per_size(capsys, tmp_path):
    from test_simulate_cli import LOG
    log = tmp_path / "ar.log"
    log.write_text(LOG)
    path = tmp_path / "cmp.html"
    rc, out, _ = run(capsys, "sim", "--compare", str(log), "--system", "dgx-h100",
                     "--gpus-per-node", "2", "--format", "json", "--html", str(path))
    assert rc == 0
    html = path.read_text()
    (e,) = read_report(path)["entries"]
    assert e["kind"] == "sim_compare" and e["result"] == json.loads(out)
    assert e["inputs"]["compare_sha256"]  # the log that was read, by its hash
    assert sections(html) == {"measured", "topology"}
    bw, times, error = check_figures(html)[:3]
    assert error["data"][0]["y"] == pytest.approx([100 * r["busbw_error"]
                                                   for r in e["result"]["rows"]])
