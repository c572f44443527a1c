"""sha256 helpers for the commit-log hash chain, over the one canonical JSON.

``canonical_json`` is :func:`stargraph.ir.canonical_json` (RFC 8785), re-exported so the
tools package keeps its import surface; graph hashes and commit-log links use the same bytes.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

import orjson

from stargraph.ir import canonical_json

__all__ = ["GENESIS_HASH", "canonical_json", "content_ref", "flat_canonical_json", "sha256_hex"]

GENESIS_HASH: Final = "0" * 64
"""``prev_hash`` of the first record in a chain."""


def sha256_hex(data: bytes) -> str:
    """Lower-case hex sha256 of ``data`` (64 characters)."""
    return hashlib.sha256(data).hexdigest()


def content_ref(data: bytes) -> str:
    """Content address of ``data``: ``"sha256:<64 hex>"``, the form every ``artifact_ref`` takes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


# RFC 8785 numbers are IEEE doubles: integers beyond 2**53 - 1 take its exact path.
_SAFE_INT: Final = 2**53 - 1
_SORTED: Final = orjson.OPT_SORT_KEYS


def flat_canonical_json(value: Any) -> bytes | None:
    """``canonical_json(value)`` for a JSON object of ASCII text keys whose values are text,
    null, booleans, safe integers, lists of text, or objects of such scalars (a tool call's
    arguments, the request a journal records for it); ``None`` for any other value, which
    :func:`canonical_json` handles. These are the values for which that function dumps with
    orjson anyway, checked here in one loop (every tool call hashes two of them): the
    general check walks each nested value with a call of its own."""
    if type(value) is not dict or not _flat(value, nested=True):
        return None
    try:
        return orjson.dumps(value, option=_SORTED)
    except TypeError:  # orjson's error (text with a lone surrogate): canonical_json raises
        return None


def _flat(value: dict[Any, Any], *, nested: bool) -> bool:
    """Whether ``value`` holds only text, null, boolean and safe-integer values under ASCII
    text keys (``nested``: also lists of text and objects of such scalars)."""
    for key, item in value.items():
        if type(key) is not str or not key.isascii():
            return False
        kind = type(item)
        if kind is str or item is None or kind is bool:
            continue
        if kind is int:
            if not -_SAFE_INT <= item <= _SAFE_INT:
                return False
        elif nested and kind is dict:
            if not _flat(item, nested=False):
                return False
        elif nested and kind is list:
            if any(type(text) is not str for text in item):
                return False
        else:
            return False
    return True
