"""The algorithm registry: (collective, name) -> a function returning a Schedule.

Each family lives in its own small module and registers its builders with `@algorithm`.
A builder takes `nranks`, `root` and its own keyword parameters, and raises ScheduleError
(a ConfigError for bad parameters) when it cannot serve a rank count.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, TypeVar

from ..collectives import Collective, check_ranks, check_root, get_collective
from ..errors import ConfigError
from ..schedule import Schedule

_FAMILIES = ("ring", "tree", "recursive", "direct", "bruck", "hierarchical")


@dataclass(frozen=True)
class Algorithm:
    collective: str
    name: str
    builder: Callable[..., Schedule]
    doc: str
    params: tuple[tuple[str, Any], ...]  # (name, default) pairs beyond nranks and root
    _built: dict[tuple[Any, ...], Schedule] = field(default_factory=dict, init=False, repr=False,
                                          compare=False, hash=False)

    def build(self, nranks: int, root: int = 0, **params: Any) -> Schedule:
        nranks = check_ranks(nranks)
        check_root(get_collective(self.collective), root, nranks)
        unknown = set(params) - {k for k, _ in self.params}
        if unknown:
            allowed = ", ".join(k for k, _ in self.params) or "none"
            raise ConfigError(f"{self.name} {self.collective} has no parameter(s) "
                              f"{', '.join(sorted(unknown))}: allowed are {allowed}")
        return self.builder(nranks, root=root, **params)

    def built(self, nranks: int, root: int = 0, **params: Any) -> Schedule:
        """`build`, kept: the calls with the same arguments share one Schedule (what the
        simulator derives from it, kept in its `cache`, is then derived once). At most 256 are
        kept; `clear_built()` forgets them. An unhashable parameter value builds afresh."""
        key = (nranks, root, tuple(sorted(params.items())))
        try:
            hit = self._built.get(key)
        except TypeError:
            return self.build(nranks, root=root, **params)
        if hit is None:
            if len(self._built) > 256:
                self._built.clear()
            hit = self._built[key] = self.build(nranks, root=root, **params)
        return hit

    def clear_built(self) -> None:
        self._built.clear()


REGISTRY: dict[tuple[str, str], Algorithm] = {}
Builder = TypeVar("Builder", bound=Callable[..., Schedule])


def algorithm(collective: str, name: str) -> Callable[[Builder], Builder]:
    """Register a builder `f(nranks, root=0, **params) -> Schedule` under (collective, name)."""
    coll = get_collective(collective).name

    def register(fn: Builder) -> Builder:
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


def algorithms(collective: Collective | str | None = None) -> list[Algorithm]:
    """Registered algorithms, optionally of one collective, in registration order."""
    coll = get_collective(collective).name if collective is not None else None
    return [a for (c, _), a in REGISTRY.items() if coll is None or c == coll]


def get_algorithm(collective: Collective | str, name: str) -> Algorithm:
    coll = get_collective(collective).name
    if (coll, name) not in REGISTRY:
        names = ", ".join(a.name for a in algorithms(coll))
        raise ConfigError(f"unknown algorithm {name!r} for {coll}: allowed are {names}")
    return REGISTRY[(coll, name)]


def build(collective: Collective | str, name: str, nranks: int, root: int = 0,
          **params: Any) -> Schedule:
    """Build a registered schedule. `build("all_reduce", "ring", 4, channels=2)`."""
    return get_algorithm(collective, name).build(nranks, root=root, **params)


_load()
