"""Canonical JSON (RFC 8785) and the sha256 content hashes built on it.

Every hash stargraph computes (graph hashes, request fingerprints, commit-log links) goes
through :func:`canonical_json`, so two processes agree byte for byte whatever their
``PYTHONHASHSEED`` or dict insertion order.
"""

from __future__ import annotations

import hashlib
from typing import Any, NewType

import rfc8785

__all__ = ["ContentHash", "canonical_json", "content_hash"]

ContentHash = NewType("ContentHash", str)
"""A ``"sha256:<64 hex>"`` digest of canonical JSON."""


def canonical_json(value: Any) -> bytes:
    """Serialise a JSON-compatible value per RFC 8785 (JCS): sorted keys, no whitespace,
    ECMAScript number formatting. Raises ``TypeError`` for values JSON cannot carry."""
    return bytes(rfc8785.dumps(value))


def content_hash(value: Any) -> ContentHash:
    """``"sha256:<hex>"`` of the canonical JSON of ``value``."""
    return ContentHash("sha256:" + hashlib.sha256(canonical_json(value)).hexdigest())
