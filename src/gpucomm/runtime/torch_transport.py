"""Run gpucomm schedules over torch.distributed point-to-point ops (gloo on CPUs, NCCL on GPUs).

Every step of a rank is one `batch_isend_irecv` over the process group the transport is given;
buffers are torch tensors on the group's device (CUDA for NCCL, CPU for gloo), and reductions
run there in torch with the numerics of `gpucomm.dtypes` (float16/bfloat16 widened to float32
and rounded to nearest even after each reduction), so results equal the reference executor's.

    # under torchrun --nproc-per-node 4 (doctests skip it: it needs 4 ranks)
    >>> dist.init_process_group("gloo")  # doctest: +SKIP
    >>> t = TorchTransport()  # the default group; or TorchTransport(group)  # doctest: +SKIP
    >>> x = torch.full((1024,), float(dist.get_rank()))  # doctest: +SKIP
    >>> t.all_reduce(x, algorithm="ring")  # in place; every rank: 6.0  # doctest: +SKIP
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..errors import ConfigError, TransportError
from .p2p import (DEFAULT_TIMEOUT_S, P2P_SLICE_BYTES, P2PTransport, check_deadline,
                  peer_error)

try:
    import torch
    import torch.distributed as dist
except ImportError:  # the transport is optional; importing it without torch says so on use
    torch = dist = None  # type: ignore[assignment]

_NAMES = ("int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64")


def _require_torch():
    if torch is None:
        raise ConfigError("the torch transport needs PyTorch: pip install torch")
    if not dist.is_available():
        raise ConfigError("this PyTorch build has no torch.distributed")


def torch_dtype(dtype) -> "torch.dtype":
    _require_torch()
    name = dt.get_dtype(dtype).name
    if name not in _NAMES:  # uint32/uint64: torch stores them but has no CPU arithmetic
        raise ConfigError(f"the torch transport cannot reduce {name}: allowed are "
                          f"{', '.join(_NAMES)}")
    return getattr(torch, name)


def gpucomm_dtype(tdtype) -> dt.DType:
    for name in _NAMES:
        if getattr(torch, name) == tdtype:
            return dt.get_dtype(name)
    raise ConfigError(f"torch dtype {tdtype} is not supported: allowed are {', '.join(_NAMES)}")


def to_torch(a: np.ndarray, dtype: dt.DType, device) -> "torch.Tensor":
    """A numpy array in gpucomm storage (bfloat16 as uint16) as a tensor on `device`."""
    a = np.ascontiguousarray(a).reshape(-1)
    if dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(a).to(device)


def to_numpy(t: "torch.Tensor", dtype: dt.DType) -> np.ndarray:
    t = t.detach().cpu()
    if dtype.name == "bfloat16":
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


class TorchArrays:
    """Buffers as flat tensors on one device; numpy arrays are copied there and back."""

    def __init__(self, device):
        self.device = torch.device(device)

    def empty(self, n, dtype):
        return torch.empty(n, dtype=torch_dtype(dtype), device=self.device)

    def pack(self, views, n, dtype):
        return torch.cat(views) if len(views) > 1 else views[0]

    def reduce(self, dst, src, op, dtype) -> None:
        fns: dict[str, Callable[..., Any]] = {
            "sum": torch.add, "avg": torch.add, "prod": torch.mul, "min": torch.minimum,
            "max": torch.maximum}
        fn = fns[op]
        if dtype.name in ("float16", "bfloat16"):  # widen, reduce, round: as dtypes.reduce_into
            dst.copy_(fn(dst.float(), src.float()))
        else:
            fn(dst, src, out=dst)

    def finish_avg(self, buf, nranks, dtype) -> None:
        # Divide by a device tensor, not a Python scalar: CUDA turns x / scalar into
        # x * (1 / scalar), which is not bit-identical to a true division.
        wide = buf.float() if dtype.name in ("float16", "bfloat16") else buf
        buf.copy_(torch.div(wide, torch.tensor(nranks, dtype=wide.dtype, device=buf.device)))

    def dtype_of(self, x) -> dt.DType:
        if isinstance(x, torch.Tensor):
            return gpucomm_dtype(x.dtype)
        return dt.get_dtype(np.asarray(x).dtype)

    def write_back(self, out, flat) -> None:
        """Make sure the user's `out` (tensor or numpy array) holds `flat`."""
        if isinstance(out, torch.Tensor):
            if out.data_ptr() != flat.data_ptr() or not out.is_contiguous():
                out.copy_(flat.view(out.shape))
        else:
            np.asarray(out).reshape(-1)[:] = to_numpy(flat, self.dtype_of(flat))

    def as_buffer(self, x, dtype, what):
        if isinstance(x, torch.Tensor):
            if x.dtype != torch_dtype(dtype):
                raise ConfigError(f"{what} is {x.dtype}, the collective runs in {dtype.name}: "
                                  "pass tensors of one dtype")
            if x.device != self.device:
                raise ConfigError(f"{what} is on {x.device}, the process group's device is "
                                  f"{self.device}")
            return x.reshape(-1)
        a = np.asarray(x)
        if a.dtype != dtype.storage:
            raise ConfigError(f"{what} is {a.dtype}, the collective runs in {dtype.name} "
                              f"(storage {dtype.storage})")
        return to_torch(a, dtype, self.device)


class TorchEngine:
    """Point-to-point over a torch.distributed process group: one batch_isend_irecv a step."""

    def __init__(self, group=None, store=None, batched=None):
        _require_torch()
        if not dist.is_initialized():
            raise ConfigError("torch.distributed is not initialised: call "
                              "dist.init_process_group(...) first (e.g. under torchrun)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.nranks = dist.get_world_size(group)
        self.backend = str(dist.get_backend(group))
        if self.rank < 0:
            raise ConfigError("this process is not a member of the process group it was given")
        self.store = store if store is not None else _default_store()
        # NCCL must get a step's ops in one batch_isend_irecv; elsewhere ops are posted one by
        # one, which ties an error while posting to its peer (batched=True forces the batch)
        self.batched = self.backend == "nccl" if batched is None else bool(batched)

    def post(self, sends, recvs) -> list:
        """Post receives then sends; one pending handle per (peer, buffer, tag), in that order."""
        what = [(p, "recv", b, t) for p, b, t in recvs] + [(p, "send", b.contiguous(), t)
                                                           for p, b, t in sends]
        if not what:
            return []
        if self.batched:
            # NCCL needs a step's ops in one group call (else paired sends/recvs deadlock)
            ops = [dist.P2POp(dist.irecv if v == "recv" else dist.isend, b, group=self.group,
                              group_peer=p, tag=tag) for p, v, b, tag in what]
            try:
                works = dist.batch_isend_irecv(ops)
            except RuntimeError as e:
                raise TransportError(f"rank {self.rank}: posting ops with ranks "
                                     f"{sorted({w[0] for w in what})} failed: "
                                     f"{_first_line(e)}") from e
            if len(works) != len(ops):  # coalesced: one handle stands for every peer
                peers = sorted({w[0] for w in what})
                return [(works[0], peers, "exchange")] * len(ops) if works else []
            return [(w, p, v) for w, (p, v, _, _) in zip(works, what)]
        # gloo & co. post each op on its own anyway (batch_isend_irecv loops the same way);
        # doing it here ties a failure while posting to its peer
        out = []
        for p, v, b, tag in what:
            try:
                w = (dist.irecv(b, group=self.group, group_src=p, tag=tag) if v == "recv" else
                     dist.isend(b, group=self.group, group_dst=p, tag=tag))
            except RuntimeError as e:
                raise self._fail(p, v, _first_line(e), False) from e
            out.append((w, p, v))
        return out

    owns_group = False  # set by init_torch_transport when it started the default group

    def close(self) -> None:
        """Destroy the default process group if this transport's init started it."""
        if self.owns_group and dist.is_initialized():
            self.owns_group = False
            try:
                dist.destroy_process_group()
            except Exception:  # a peer already gone: nothing left to tear down cleanly
                pass

    def wait(self, pending: list, deadline: float) -> None:
        for w, peer, verb in pending:
            try:
                ok = w.wait(timeout=timedelta(seconds=check_deadline(deadline)))
            except RuntimeError as e:
                msg = _first_line(e)
                raise self._fail(peer, verb, msg,
                                 "timed out" in msg.lower() or "timeout" in msg.lower()) from e
            if ok is False:
                raise self._fail(peer, verb, "wait returned False", True)

    # --- naming the rank that failed first --------------------------------------------------
    # A rank that loses a peer writes `gpucomm/lost/<its global rank>` = the peer into the
    # job's store before it raises (and so before its sockets close). A rank that then loses
    # *that* rank follows the chain, so ranks two hops from a dead one still name it.
    def _fail(self, peer, verb, msg, timed_out):
        err = peer_error(self.rank, peer, verb, msg, timed_out)
        if self.store is None or not isinstance(peer, int):
            return err
        # The store may sit behind a cut link, where its calls block past any timeout they
        # are given: ask it from a daemon thread and give up after two seconds.
        found: list = []
        t = threading.Thread(target=self._chain, args=(peer, found), daemon=True)
        t.start()
        t.join(2.0)
        if not found or not found[0]:
            return err
        lost = ", which had lost ".join(f"rank {self._local(x)}" for x in found[0])
        return type(err)(f"{err}; rank {peer} had already lost {lost}")

    def _chain(self, peer, found) -> None:
        try:
            g = self._global
            self.store.set(f"gpucomm/lost/{g(self.rank)}", str(g(peer)))
            chain, cur = [], g(peer)
            for _ in range(self.nranks):
                key = f"gpucomm/lost/{cur}"
                if not self.store.check([key]):
                    break
                nxt = int(self.store.get(key))
                if nxt == g(self.rank) or nxt in chain or nxt == g(peer):
                    break
                chain.append(nxt)
                cur = nxt
            found.append(chain)
        except Exception:  # the store may be gone with the failed rank: keep the plain error
            found.append([])

    def _global(self, r: int) -> int:
        return r if self.group is None else dist.get_global_rank(self.group, r)

    def _local(self, g: int) -> int:
        return g if self.group is None else dist.get_group_rank(self.group, g)


def _default_store():
    """The default process group's store (torchrun's agent store, or the TCPStore of
    init_process_group), to leave failure notes in; None where torch hides it."""
    try:
        from torch.distributed.distributed_c10d import _get_default_store
        return _get_default_store()
    except Exception:
        return None


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


class TorchTransport(P2PTransport):
    """A P2PTransport over torch.distributed; tensors live on the group's device.

    `device` defaults to the current CUDA device for NCCL groups and to the CPU otherwise.
    Numpy inputs and outputs are accepted too (copied to the device and back).
    """

    def __init__(self, group=None, device=None, timeout: float = DEFAULT_TIMEOUT_S,
                 slice_bytes: int = P2P_SLICE_BYTES, batched=None):
        engine = TorchEngine(group, batched=batched)
        if device is None:
            device = (torch.device("cuda", torch.cuda.current_device())
                      if engine.backend == "nccl" else torch.device("cpu"))
        arrays = TorchArrays(device)
        super().__init__(engine, arrays, timeout, slice_bytes)
        self.engine: TorchEngine = engine
        self.device = arrays.device
        if engine.backend == "nccl":
            # NCCL's first batched p2p call must involve every rank of the group
            dist.barrier(group=group)

    def all_reduce(self, tensor, op: str = "sum", algorithm: str = "ring", **params) -> None:
        """All-reduce `tensor` in place with a registered gpucomm algorithm."""
        from ..algorithms import build
        self.execute(self._schedule("all_reduce", algorithm, params, build), tensor, tensor, op)

    def _schedule(self, coll, algorithm, params, build):
        key = ("_sched", coll, algorithm, tuple(sorted(params.items())))
        cache = self.__dict__.setdefault("_schedules", {})
        if key not in cache:
            cache[key] = build(coll, algorithm, self.nranks, **params).materialize()
        return cache[key]


def init_torch_transport(timeout: float = DEFAULT_TIMEOUT_S) -> TorchTransport:
    """A TorchTransport on the default process group, which it starts from the torchrun
    environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) if nobody has: NCCL when CUDA
    is available, gloo otherwise. A group it started is destroyed by the transport's close().
    """
    _require_torch()
    owns = False
    if not dist.is_initialized():
        import os
        for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            if not os.environ.get(name):
                raise ConfigError(f"environment variable {name} is not set: run under torchrun "
                                  "(or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT)")
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend, timeout=timedelta(seconds=max(timeout, 30.0)))
        owns = True
    tr = TorchTransport(timeout=timeout)
    tr.engine.owns_group = owns
    return tr
