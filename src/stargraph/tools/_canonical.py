"""sha256 helpers for the commit-log hash chain, over the one canonical JSON.

``canonical_json`` is :func:`stargraph.ir.canonical_json` (RFC 8785), re-exported so the
tools package keeps its import surface; graph hashes and commit-log links use the same bytes.
"""

from __future__ import annotations

import hashlib
from typing import Final

from stargraph.ir import canonical_json

__all__ = ["GENESIS_HASH", "canonical_json", "content_ref", "sha256_hex"]

GENESIS_HASH: Final = "0" * 64
"""``prev_hash`` of the first record in a chain."""


def sha256_hex(data: bytes) -> str:
    """Lower-case hex sha256 of ``data`` (64 characters)."""
    return hashlib.sha256(data).hexdigest()


def content_ref(data: bytes) -> str:
    """Content address of ``data``: ``"sha256:<64 hex>"``, the form every ``artifact_ref`` takes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()
