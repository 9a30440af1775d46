"""Interop with the tools GPU clusters already run.

- `nccltests`: read nccl-tests logs as printed, with any `NCCL_DEBUG=INFO` lines in them.
- `system`: infer the machine (GPU model, nodes, GPUs per node, NIC) a log ran on.
- `doctor`: measured vs expected per size, a verdict and the causes a log shows.
- `msccl`: MSCCL algorithm XML out of a Schedule and back in.
- `tuner`: NCCL's example tuner-plugin CSV from gpucomm's `auto` choice.

This layer reads schedules, topologies and simulator results; nothing below imports it.
"""
