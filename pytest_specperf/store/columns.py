"""A history line's rounds, kept as columns (`compact.columns`: a field once, a value per round), made
rounds again: a dashboard reads every round of a year of nights of every key, so a setup's column names
are split once (`_plan`) and the common shape is built column by column (`round_samples`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from pytest_specperf.engines.base import SpecCounters
from pytest_specperf.measure.records import Distribution, RoundSample


def rows(table: Mapping[str, list[Any]], n: int) -> list[dict[str, Any]]:
    """Inverse of `columns`."""
    _check(table, n)
    values = list(table.values())
    plain, nested = _plan(tuple(table))
    out = []
    for i in range(n):
        body = {name: values[at][i] for name, at in plain}
        for head, subs in nested:
            body[head] = {sub: values[at][i] for sub, at in subs}
        out.append(body)
    return out


def _check(table: Mapping[str, list[Any]], n: int) -> None:
    """ValueError naming the first column that is not a list of `n` values."""
    for name, column in table.items():
        if not isinstance(column, list) or len(column) != n:
            raise ValueError(f"round column {name!r} must hold {n} values")


#: a round's fields, and how a field kept as one column per key (`columns`) is made from its keys' values
_ROUND_FIELDS = frozenset(f.name for f in fields(RoundSample))
_LATENCIES = ("ttft_ms", "tpot_ms", "e2e_ms", "chunk_gap_ms")
_OBJECTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    **dict.fromkeys(_LATENCIES, Distribution.from_dict),
    "spec_counters": SpecCounters.from_dict,
}


def round_samples(table: Mapping[str, list[Any]], n: int) -> list[RoundSample]:
    """The rounds of a line's columns, as `RoundSample.from_dict` makes them of `rows`, built column by
    column without a dictionary of every round first: a dashboard reads every round of a year of
    nights of every key. Columns of another shape (per-request records, an object field it does not
    know) go through `rows` and `from_dict`."""
    values = list(table.values())
    if set(map(type, values)) - {list} or set(map(len, values)) - {n}:  # each column checked at C speed first
        _check(table, n)
    recipe = _recipe(tuple(table))
    if recipe is None:
        return [RoundSample.from_dict(body) for body in rows(table, n)]
    names, plain, objects = recipe
    built = [values[at] for at in plain]
    for head, keys, columns in objects:
        if keys is None:  # a latency, its keys in `Distribution`'s order
            built.append(list(map(Distribution, *(values[at] for at in columns))))
        else:
            make = _OBJECTS[head]
            built.append(
                [make(dict(zip(keys, row, strict=True))) for row in zip(*(values[at] for at in columns), strict=True)]
            )
    return [RoundSample(**dict(zip(names, row, strict=True))) for row in zip(*built, strict=True)]


#: a latency's keys in `Distribution`'s order: its columns, when they are these, make it positionally
_DISTRIBUTION_KEYS = tuple(f.name for f in fields(Distribution))
#: the round's fields, the plain fields' columns, and each object field's keys (None: a latency's, in
#: order) and columns; None when `round_samples` leaves the columns to `rows` and `from_dict`
_Recipe = tuple[tuple[str, ...], tuple[int, ...], tuple[tuple[str, tuple[str, ...] | None, tuple[int, ...]], ...]]
_RECIPES: dict[tuple[str, ...], _Recipe | None] = {}


def _recipe(names: tuple[str, ...]) -> _Recipe | None:
    """How `round_samples` builds the rounds of the column `names` (made once per setup)."""
    if names in _RECIPES:
        return _RECIPES[names]
    plain, nested = _plan(names)
    known = [(name, at) for name, at in plain if name in _ROUND_FIELDS]
    objects = [(head, subs) for head, subs in nested if head in _ROUND_FIELDS]
    found: _Recipe | None = None
    shaped = all(head in _OBJECTS for head, _ in objects) and not {"records", "spec_counters"} & set(names)
    if shaped and set(_LATENCIES) <= {head for head, _ in objects}:  # else `from_dict` says what is missing
        made = [(head, _keys(head, subs), tuple(at for _, at in subs)) for head, subs in objects]
        found = (tuple(n for n, _ in known) + tuple(h for h, _ in objects), tuple(at for _, at in known), tuple(made))
    if len(_RECIPES) < 1024:
        _RECIPES[names] = found
    return found


def _keys(head: str, subs: tuple[tuple[str, int], ...]) -> tuple[str, ...] | None:
    keys = tuple(sub for sub, _ in subs)
    return None if head in _LATENCIES and keys == _DISTRIBUTION_KEYS else keys


_Plan = tuple[tuple[tuple[str, int], ...], tuple[tuple[str, tuple[tuple[str, int], ...]], ...]]
#: how a setup's column names map onto a round's fields, made once per setup: every night of a key
#: shares its setup, so a year of lines is turned into rounds without splitting the names again
_PLANS: dict[tuple[str, ...], _Plan] = {}


def _plan(names: tuple[str, ...]) -> _Plan:
    """(plain field, column) and (object field, (its key, column) ...) for the column `names`."""
    found = _PLANS.get(names)
    if found is None:
        plain: list[tuple[str, int]] = []
        nested: dict[str, list[tuple[str, int]]] = {}
        for at, name in enumerate(names):
            head, dot, sub = name.partition(".")
            if dot:
                nested.setdefault(head, []).append((sub, at))
            else:
                plain.append((name, at))
        found = (tuple(plain), tuple((head, tuple(subs)) for head, subs in nested.items()))
        if len(_PLANS) < 1024:
            _PLANS[names] = found
    return found
