"""Mutations of a JSON value for the fast decoders' agreement tests: a few values changed (to odd, often invalid
ones), keys dropped or added, or the whole value replaced -- what a schema and a fast path must agree on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value (dict keys and list indexes) that a mutation may change."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


def mutated(draw: st.DrawFn, value: Any, odd: st.SearchStrategy[Any], ts: st.SearchStrategy[Any],
            whole: st.SearchStrategy[Any], extra_keys: Sequence[str] = ("extra",)) -> Any:
    """``value`` changed one to three times: a place replaced by ``odd`` (a ``ts`` by ``ts``), a key dropped, one of
    ``extra_keys`` added, or (at the top) the whole value replaced by ``whole``."""
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(value)))
        if not path:
            value = draw(whole)
            continue
        parent = value
        for key in path[:-1]:
            parent = parent[key]
        choice = draw(st.integers(0, 3))
        if choice == 0 and isinstance(parent, dict):
            del parent[path[-1]]
        elif choice == 1 and isinstance(parent, dict):
            parent[draw(st.sampled_from(list(extra_keys)))] = draw(odd)
        elif path[-1] == "ts":
            parent[path[-1]] = draw(ts)
        else:
            parent[path[-1]] = draw(odd)
    return value
