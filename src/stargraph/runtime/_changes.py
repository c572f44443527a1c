"""Where two JSON values differ, as lines a person reads (``stargraph diff``, the run
console, and the report of a replay against another graph version all use it)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["value_changes"]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def value_changes(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two JSON values differ, one line per path with both values (``path: A = ..  B
    = ..``, or ``only in A``/``only in B`` for a key one side lacks); empty when equal.

    Dictionaries are compared key by key (``where`` prefixes the dotted paths); any other
    values are compared whole. ``stargraph diff`` and the run console's side-by-side view
    both describe differences with it, so they say the same thing.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b)):
            sub = f"{where}.{key}" if where else str(key)
            if key not in a:
                out.append(f"{sub}: only in B = {_json(b[key])}")
            elif key not in b:
                out.append(f"{sub}: only in A = {_json(a[key])}")
            else:
                out += value_changes(a[key], b[key], sub)
        return out
    if a != b:
        return [f"{where or '<value>'}: A = {_json(a)}  B = {_json(b)}"]
    return []
