"""A small JSON Schema checker: the keywords the JSON report's schema (report/schema.py) uses, so that
reading a report back needs no `jsonschema` package.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def problems(instance: Any, schema: Mapping[str, Any]) -> list[str]:
    """Problems of `instance` against `schema`, as 'where: what' strings (empty when valid).

    Covers the keywords the report's schema uses (type, const, enum, minimum, required, properties,
    additionalProperties, items, anyOf, local $ref), so the package needs no jsonschema dependency.
    """
    found: list[str] = []
    _check(instance, schema, schema, "$", found)
    return found


def _check(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], where: str, out: list[str]) -> None:
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"unsupported $ref {ref!r}")
        _check(value, root["$defs"][ref.removeprefix("#/$defs/")], root, where, out)
    if "anyOf" in schema:
        if not any(not _sub(value, option, root, where) for option in schema["anyOf"]):
            out.append(f"{where}: matches none of the allowed shapes ({_describe(value)})")
        return
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        if not any(_TYPES[t](value) for t in names):
            out.append(f"{where}: expected {' or '.join(names)}, got {_describe(value)}")
            return
    _check_value(value, schema, where, out)
    if isinstance(value, dict):
        _check_object(value, schema, root, where, out)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _check(item, schema["items"], root, f"{where}[{i}]", out)


def _check_value(value: Any, schema: Mapping[str, Any], where: str, out: list[str]) -> None:
    """The keywords that judge a value itself: const, enum, minimum."""
    if "const" in schema and value != schema["const"]:
        out.append(f"{where}: expected {schema['const']!r}, got {value!r}")
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and _TYPES["number"](value) and value < schema["minimum"]:
        out.append(f"{where}: {value} is below the minimum {schema['minimum']}")


def _check_object(
    value: dict[str, Any], schema: Mapping[str, Any], root: Mapping[str, Any], where: str, out: list[str]
) -> None:
    for key in schema.get("required", ()):
        if key not in value:
            out.append(f"{where}: missing required key {key!r}")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            _check(item, properties[key], root, f"{where}.{key}", out)
        elif extra is False:
            out.append(f"{where}: unexpected key {key!r}")
        elif isinstance(extra, Mapping):
            _check(item, extra, root, f"{where}.{key}", out)


def _sub(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], where: str) -> list[str]:
    found: list[str] = []
    _check(value, schema, root, where, found)
    return found


def _describe(value: Any) -> str:
    return "null" if value is None else type(value).__name__
