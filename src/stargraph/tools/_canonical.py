"""Canonical JSON (RFC 8785) and sha256 helpers for the commit-log hash chain (row D10).

Kept inside ``stargraph.tools`` until the IR package offers a shared helper; the contract is
the same: ``canonical_json`` returns RFC 8785 bytes, so a hash computed here equals a hash
computed by any JCS implementation.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

import orjson
import rfc8785

__all__ = ["GENESIS_HASH", "canonical_json", "content_ref", "sha256_hex"]

GENESIS_HASH: Final = "0" * 64
"""``prev_hash`` of the first record in a chain (D10)."""

# RFC 8785 numbers are IEEE doubles, so integers beyond 2**53 - 1 are outside its domain.
_SAFE_INT: Final = 2**53 - 1


def _is_plain(value: Any) -> bool:
    """True when orjson's sorted output is byte-identical to RFC 8785 for ``value``.

    That holds for strings, safe integers, booleans, null, lists and objects with ASCII keys:
    both escape strings the same way (ECMAScript rules) and ASCII keys sort the same in UTF-8
    and UTF-16. Floats (ECMAScript number formatting) and non-ASCII keys (UTF-16 ordering)
    take the slow, exact path instead. A property test pins the equivalence.
    """
    if value is None or isinstance(value, str | bool):
        return True
    if isinstance(value, int):
        return -_SAFE_INT <= value <= _SAFE_INT
    if isinstance(value, list | tuple):
        return all(_is_plain(item) for item in value)
    if isinstance(value, dict):
        return all(
            isinstance(key, str) and key.isascii() and _is_plain(item)
            for key, item in value.items()
        )
    return False


def canonical_json(value: Any) -> bytes:
    """RFC 8785 (JCS) bytes for a JSON value: sorted keys, no whitespace, ECMAScript numbers.

    >>> canonical_json({"b": 1, "a": [True, None]})
    b'{"a":[true,null],"b":1}'
    """
    if _is_plain(value):
        # orjson is ~15x faster than the pure-Python canonicaliser; _is_plain guarantees the
        # bytes are identical, and the dispatch hot path hashes two documents per call.
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    result: bytes = rfc8785.dumps(value)
    return result


def sha256_hex(data: bytes) -> str:
    """Lower-case hex sha256 of ``data`` (64 characters)."""
    return hashlib.sha256(data).hexdigest()


def content_ref(data: bytes) -> str:
    """Content address of ``data``: ``"sha256:<64 hex>"``, the form every ``artifact_ref`` takes."""
    return "sha256:" + sha256_hex(data)
