"""Typed caches an object carries for the layers above it.

A value of a lower layer (a Topology, a Schedule) is what a higher layer derives things from
(routes, path tables, whether a schedule is a ring). Those derived things belong to the value:
they live as long as it does and go with it, never in a module-level dict keyed by `id()`.
Each layer declares its own record class with one named slot per thing it keeps (a misspelt
name is an AttributeError, not a silent miss) and asks the value for its instance of it.

    >>> class Seen:
    ...     __slots__ = ("count",)
    ...     def __init__(self) -> None:
    ...         self.count = 0
    >>> memo = Memo()
    >>> memo.of(Seen).count += 1
    >>> memo.of(Seen).count
    1
    >>> memo.clear(); memo.of(Seen).count
    0
"""
from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


class Memo:
    """One instance of each record class asked for (`of`), made on first use; `clear()`
    forgets them all (they are rebuilt, from the value, when next asked for)."""
    __slots__ = ("_records",)

    def __init__(self) -> None:
        self._records: dict[type, Any] = {}

    def of(self, record: type[T]) -> T:
        hit = self._records.get(record)
        if hit is None:
            hit = self._records[record] = record()
        out: T = hit
        return out

    def clear(self) -> None:
        self._records = {}

    def __repr__(self) -> str:
        return f"Memo({', '.join(sorted(t.__name__ for t in self._records))})"
