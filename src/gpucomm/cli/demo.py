"""`gpucomm demo`: the main job on a built-in default, no configuration needed."""
from __future__ import annotations

import numpy as np

from ..algorithms import build
from ..collectives import check_outputs, layout
from ..execute import execute
from ..limits import MAX_SCHEDULE_RANKS, check_ranks
from ..verify import verify
from ._nccltests import retire
from .common import positive_int


def register(sub) -> None:
    p = sub.add_parser("demo", help="a tour on built-in defaults: a schedule, its proof, a run")
    p.add_argument("--ranks", type=positive_int, default=4,
                   help=f"ranks of the schedule shown (at most {MAX_SCHEDULE_RANKS})")
    retire(p, "-n")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args) -> int:
    p = check_ranks(args.ranks, MAX_SCHEDULE_RANKS, "--ranks")
    print(f"== 1. ring all-reduce on {p} ranks as a schedule (reduce-scatter, then all-gather)")
    sched = build("all_reduce", "ring", p)
    print(sched)
    lay = layout("all_reduce", "1M", "float32", p)
    sent = sched.bytes_sent(lay)
    print(f"each rank sends {int(sent[0])} B of a {lay.size} B buffer = "
          f"{sent[0] / lay.size:.4f} × M (2(P-1)/P = {2 * (p - 1) / p:.4f})")

    print("\n== 2. verified by symbolic execution for 1..17 ranks")
    for name in ("ring", "double_binary_tree", "recursive_halving_doubling", "hierarchical"):
        try:
            for n in range(1, 18):
                verify(build("all_reduce", name, n))
            print(f"   all_reduce {name:<28} ok")
        except Exception as e:  # an algorithm not yet registered is reported, not fatal
            print(f"   all_reduce {name:<28} {type(e).__name__}: {e}")

    print(f"\n== 3. executed on real float32 buffers ({p} ranks × 1000 elements)")
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(1000).astype(np.float32) for _ in range(p)]
    outs = execute(sched, ins, "sum")
    check_outputs("all_reduce", outs, ins, "sum", "float32")
    print(f"   matches the numpy reference; rank 0 [:3] = {outs[0][:3]}; "
          f"identical bits on every rank: "
          f"{all(np.array_equal(o.view(np.uint32), outs[0].view(np.uint32)) for o in outs)}")

    print("\n== 4. the same schedules on real processes: all-reduce on 2 local ranks over shared "
          "memory,\n   measured (nccl-tests columns) beside the simulator's prediction for this "
          "host")
    from ..bench import format_table, run_bench
    from ..bench.plancost import add_predictions
    rows = run_bench("shm", 2, "all_reduce", [8, 1 << 16, 1 << 20, 1 << 24], iters=10, warmup=3)
    note = add_predictions(rows, "all_reduce", 2)
    print(format_table(rows))
    print(f"# predicted: {note}")

    from . import main
    print("\n== 5. the same question on real hardware, simulated: all-reduce on one DGX H100")
    print("   $ gpucomm sim all_reduce_perf --system dgx-h100 -b 8 -e 1G -f 8", flush=True)
    main(["sim", "all_reduce_perf", "--system", "dgx-h100", "-b", "8", "-e", "1G", "-f", "8"])

    print("\n== 6. why the interconnect matters: NVLink vs PCIe, and Llama 3 70B decode at TP=8")
    print("   $ gpucomm hw compare nvlink4 pcie5", flush=True)
    main(["hw", "compare", "nvlink4", "pcie5"])
    argv = ["plan", "--model", "llama3-70b", "--mode", "decode", "--tp", "8", "--seq", "4096",
            "--global-batch", "1", "--gpu", "h100", "--pcie-gen", "5",
            "--compare", "system=dgx-h100,pcie"]
    print("   $ gpucomm " + " ".join(argv), flush=True)
    main(argv)

    print("\n== 7. all of it in one page: an HTML report (curves, topology, link utilisation, "
          "timeline, planner)")
    _report(main, argv)
    return 0


def _report(main, plan_argv) -> None:
    """report.html in the current directory: two 2-node sweeps (flow model: the all-to-all
    on a 2:1 oversubscribed fat-tree, where the heatmap shows the uplinks saturate, and the
    all-reduce, NVLS at large sizes) and the planner's what-if."""
    import os
    import tempfile
    try:
        import plotly  # noqa: F401
    except ImportError:
        print("   skipped: the HTML report needs plotly (pip install 'gpucomm[html]')")
        return
    sims = [["sim", "alltoall_perf", "--system", "dgx-h100", "--nodes", "2", "--fabric",
             "fat-tree", "--oversubscription", "2", "--sim-model", "flow", "-b", "1M",
             "-e", "64M", "-f", "8"],
            ["sim", "all_reduce_perf", "--system", "dgx-h100", "--nodes", "2", "-b", "1K",
             "-e", "1G", "-f", "16", "--sim-model", "flow"]]
    out = os.path.abspath("report.html")
    with tempfile.TemporaryDirectory() as d:
        names = ["all_to_all.html", "all_reduce.html", "plan.html"]
        for argv, name in zip(sims + [plan_argv], names):
            print(f"   $ gpucomm {' '.join(argv)} --html {name}", flush=True)
            _quiet(main, argv + ["--format", "json", "--html", os.path.join(d, name)])
        print(f"   $ gpucomm report {' '.join(names)} --output report.html", flush=True)
        main(["report", *(os.path.join(d, n) for n in names), "--output", out])
    print(f"   open {out} in a browser (one self-contained file: it works offline)")


def _quiet(main, argv) -> None:
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(argv)
