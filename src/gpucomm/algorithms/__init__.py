"""The algorithm registry: (collective, name) -> a function returning a Schedule.

Each family lives in its own small module and registers its builders with `@algorithm`.
A builder takes `nranks`, `root` and its own keyword parameters, and raises ScheduleError
(a ConfigError for bad parameters) when it cannot serve a rank count.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Callable

from ..collectives import check_ranks, check_root, get_collective
from ..errors import ConfigError
from ..schedule import Schedule

_FAMILIES = ("ring", "tree", "recursive", "direct", "bruck", "hierarchical")


@dataclass(frozen=True)
class Algorithm:
    collective: str
    name: str
    builder: Callable[..., Schedule]
    doc: str
    params: tuple  # (name, default) pairs beyond nranks and root

    def build(self, nranks: int, root: int = 0, **params) -> Schedule:
        nranks = check_ranks(nranks)
        check_root(get_collective(self.collective), root, nranks)
        unknown = set(params) - {k for k, _ in self.params}
        if unknown:
            allowed = ", ".join(k for k, _ in self.params) or "none"
            raise ConfigError(f"{self.name} {self.collective} has no parameter(s) "
                              f"{', '.join(sorted(unknown))}: allowed are {allowed}")
        return self.builder(nranks, root=root, **params)


REGISTRY: dict[tuple[str, str], Algorithm] = {}


def algorithm(collective: str, name: str):
    """Register a builder `f(nranks, root=0, **params) -> Schedule` under (collective, name)."""
    coll = get_collective(collective).name

    def register(fn):
        sig = inspect.signature(fn)
        params = tuple((k, p.default) for k, p in sig.parameters.items()
                       if k not in ("nranks", "root"))
        doc = (inspect.getdoc(fn) or "").split("\n")[0]
        REGISTRY[(coll, name)] = Algorithm(coll, name, fn, doc, params)
        return fn
    return register


def _load() -> None:
    for family in _FAMILIES:
        importlib.import_module(f"{__name__}.{family}")


def algorithms(collective=None) -> list[Algorithm]:
    """Registered algorithms, optionally of one collective, in registration order."""
    coll = get_collective(collective).name if collective is not None else None
    return [a for (c, _), a in REGISTRY.items() if coll is None or c == coll]


def get_algorithm(collective, name: str) -> Algorithm:
    coll = get_collective(collective).name
    if (coll, name) not in REGISTRY:
        names = ", ".join(a.name for a in algorithms(coll))
        raise ConfigError(f"unknown algorithm {name!r} for {coll}: allowed are {names}")
    return REGISTRY[(coll, name)]


def build(collective, name: str, nranks: int, root: int = 0, **params) -> Schedule:
    """Build a registered schedule. `build("all_reduce", "ring", 4, channels=2)`."""
    return get_algorithm(collective, name).build(nranks, root=root, **params)


_load()
