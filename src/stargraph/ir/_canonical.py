"""Canonical JSON (RFC 8785) and the sha256 content hashes built on it.

Every hash stargraph computes (graph hashes, request fingerprints, commit-log links) goes
through :func:`canonical_json`, so two processes agree byte for byte whatever their
``PYTHONHASHSEED`` or dict insertion order.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from typing import Any, Final, NewType

import orjson
import rfc8785

__all__ = ["ContentHash", "canonical_json", "content_hash", "non_canonical"]

ContentHash = NewType("ContentHash", str)
"""A ``"sha256:<64 hex>"`` digest of canonical JSON."""


# RFC 8785 numbers are IEEE doubles, so integers beyond 2**53 - 1 are outside its domain.
_SAFE_INT: Final = 2**53 - 1


def _is_plain(value: Any) -> bool:
    """True when orjson's sorted output is byte-identical to RFC 8785 for ``value``.

    That holds for strings, safe integers, booleans, null, lists and objects with ASCII keys:
    both escape strings the same way (ECMAScript rules) and ASCII keys sort the same in UTF-8
    and UTF-16. Floats (ECMAScript number formatting) and non-ASCII keys (UTF-16 ordering)
    take the exact path instead. A property test (tests/tools) pins the equivalence.
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is dict:
        # The leaves (text, null, flags, integers) are checked here rather than one call
        # each: every request fingerprint and tool call's hash comes this way.
        for key, item in value.items():
            if type(key) is not str or not key.isascii():
                return _is_plain_slow(value)
            leaf = type(item)
            if leaf is str or item is None or leaf is bool:
                continue
            if leaf is int:
                if not -_SAFE_INT <= item <= _SAFE_INT:
                    return False
            elif not _is_plain(item):
                return False
        return True
    if kind is list or kind is tuple:
        return all(map(_is_plain_leaf, value))
    if kind is int:
        return bool(-_SAFE_INT <= value <= _SAFE_INT)
    return _is_plain_slow(value)


def _is_plain_leaf(item: Any) -> bool:
    """:func:`_is_plain` of a list's item, with the scalar leaves answered without a call of
    their own (an object's are answered in its loop)."""
    leaf = type(item)
    if leaf is str or item is None or leaf is bool:
        return True
    if leaf is int:
        return bool(-_SAFE_INT <= item <= _SAFE_INT)
    return _is_plain(item)


def _is_plain_slow(value: Any) -> bool:
    """:func:`_is_plain` for subclasses of the JSON types (and what is none of them)."""
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
    """Serialise a JSON-compatible value per RFC 8785 (JCS): sorted keys, no whitespace,
    ECMAScript number formatting. Raises ``TypeError`` for values JSON cannot carry."""
    if _is_plain(value):
        # orjson is ~15x faster than the pure-Python canonicaliser, and _is_plain guarantees
        # identical bytes; graph hashes, request fingerprints and commit links all land here.
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return bytes(rfc8785.dumps(value))


def content_hash(value: Any) -> ContentHash:
    """``"sha256:<hex>"`` of the canonical JSON of ``value``."""
    return ContentHash("sha256:" + hashlib.sha256(canonical_json(value)).hexdigest())


def _pointer_part(key: object) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def non_canonical(value: Any, pointer: str = "") -> Iterator[tuple[str, str]]:
    """``(JSON pointer, reason)`` of every value in ``value`` that :func:`canonical_json`
    cannot carry, in document order.

    RFC 8785 writes every number as an IEEE double and every string as UTF-8, so an integer
    beyond +-(2**53 - 1) (it would not survive the round trip), a non-finite float and a
    string (or key) holding a lone surrogate have no canonical form; nor has anything that is
    not JSON. Loaders use it to name every culprit in a document that will be hashed.
    """
    here = pointer or "/"
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -_SAFE_INT <= value <= _SAFE_INT:
            shown = str(value) if value.bit_length() < 128 else f"of {value.bit_length()} bits"
            yield here, f"integer {shown} is beyond +-(2**53 - 1), outside exact JSON numbers"
    elif isinstance(value, float):
        if not math.isfinite(value):
            yield here, f"number {value} is not finite"
    elif isinstance(value, str):
        if not _utf8(value):
            yield here, f"string {value[:40]!r} holds a lone surrogate, not UTF-8 text"
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from non_canonical(item, f"{pointer}/{index}")
    elif isinstance(value, dict):
        for key, item in value.items():
            at = f"{pointer}/{_pointer_part(key)}"
            if not isinstance(key, str) or not _utf8(key):
                yield at, f"key {key!r:.40} is not UTF-8 text"
            else:
                yield from non_canonical(item, at)
    else:
        yield here, f"a {type(value).__name__} is not a JSON value"


def _utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
