"""Checks a real answer against the generated ``TypedDict`` that types it: every key it declares
required is there, no key it does not declare is, and each value has its declared type (nested
objects, lists, literals and unions included)."""
from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints


def problems(value: object, tp: Any, where: str = "answer") -> list[str]:
    """What in ``value`` does not match ``tp`` (empty: it matches)."""
    origin = get_origin(tp)
    if tp is Any:
        return []
    if tp in (None, type(None)):
        return [] if value is None else [f"{where}: {value!r} is not None"]
    if origin is Literal:
        # ``True == 1`` in Python, not on the wire: a bool matches only a bool literal.
        return [] if any(value == a and isinstance(value, bool) == isinstance(a, bool) for a in get_args(tp)) \
            else [f"{where}: {value!r} is not one of {get_args(tp)}"]
    if origin in (Union, types.UnionType):
        found = [problems(value, member, where) for member in get_args(tp)]
        return [] if any(not p for p in found) else [f"{where}: {value!r} matches no member of {tp}: {found}"]
    if typing.is_typeddict(tp):
        return _typed_dict(value, tp, where)
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {value!r} is not a list"]
        return [p for i, item in enumerate(value) for p in problems(item, get_args(tp)[0], f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not an object"]
        return [p for k, v in value.items() for p in problems(v, get_args(tp)[1], f"{where}.{k}")]
    if tp is float:  # JSON has one number type: an integral one arrives as an int
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, tp)
    return [] if ok else [f"{where}: {value!r} is not a {tp.__name__}"]


def _typed_dict(value: object, tp: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: {value!r} is not an object ({tp.__name__})"]
    required: frozenset[str] = tp.__required_keys__
    optional: frozenset[str] = tp.__optional_keys__
    found = [f"{where}: {tp.__name__} requires {key!r}, the answer has none" for key in sorted(required - set(value))]
    found += [f"{where}: {key!r} is not a key of {tp.__name__}" for key in sorted(set(value) - required - optional)]
    hints = get_type_hints(tp)
    for key in set(value) & set(hints):
        found += problems(value[key], hints[key], f"{where}.{key}")
    return found


def assert_shape(value: object, tp: Any) -> None:
    """Fails with every difference between ``value`` and ``tp``."""
    found = problems(value, tp)
    assert not found, "\n".join(found)
