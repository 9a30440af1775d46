"""The shm transport's rendezvous over a key-value store (torch.distributed's c10d store):
no extra port, so it works where torchrun's own store holds MASTER_PORT.

Every set-up in a process takes a fresh generation from a store counter, so a process that
initialises, shuts down and initialises again never reads the keys of its first life.
"""
from __future__ import annotations

import json
from datetime import timedelta

from ..errors import CommTimeout, TransportError


class StoreRendezvous:
    """`allgather` of small JSON objects through `store` (set / wait / get / add)."""

    def __init__(self, store, rank: int, world: int, timeout: float, prefix: str = "gpucomm"):
        self.store, self.rank, self.world, self.timeout = store, rank, world, timeout
        # Every rank adds 1 once per set-up: the first `world` adds are generation 0, the
        # next `world` generation 1, ... (a set-up finishes on every rank before any rank
        # can start the next, since each waits for all the others' keys).
        count = self._do("join", lambda: store.add(f"{prefix}/joins", 1))
        self.prefix = f"{prefix}/{(count - 1) // world}"
        self.round = 0

    def allgather(self, obj) -> list:
        self.round += 1
        keys = [f"{self.prefix}/{self.round}/{r}" for r in range(self.world)]
        self._do("set", lambda: self.store.set(keys[self.rank], json.dumps(obj)))
        self._do("wait", lambda: self.store.wait(keys, timedelta(seconds=self.timeout)))
        return [json.loads(self._do("get", lambda k=k: self.store.get(k))) for k in keys]

    def _do(self, what: str, fn):
        try:
            return fn()
        except Exception as e:  # the store raises RuntimeError subclasses (DistStoreError)
            text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if "timeout" in text.lower() or "timed out" in text.lower():
                raise CommTimeout(f"rank {self.rank}: rendezvous round {self.round} timed out "
                                  f"after {self.timeout:g}s (a rank never reached "
                                  f"gpucomm's set-up, or it died)") from None
            raise TransportError(f"rank {self.rank}: rendezvous store {what} failed: "
                                 f"{text}") from None

    def close(self) -> None:
        pass
