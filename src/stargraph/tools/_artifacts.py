"""Content-addressed artifact store for tool payloads.

A payload is stored under ``sha256:<hex>`` of its bytes, so storing the same payload twice is
free and a reference can never point at different content later.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

from stargraph.errors import ArtifactNotFoundError, CorruptCheckpointError
from stargraph.tools._canonical import content_ref

__all__ = ["ArtifactStore", "DirectoryArtifactStore", "InMemoryArtifactStore"]


@runtime_checkable
class ArtifactStore(Protocol):
    """Bytes by content hash. ``conformance.check_artifact_store`` is its shared suite."""

    def put(self, data: bytes) -> str:
        """Store ``data``; return ``"sha256:<hex>"``."""
        ...

    def get(self, ref: str) -> bytes:
        """The bytes stored under ``ref``; a ``LookupError`` if absent (stargraph's stores
        raise :class:`~stargraph.errors.ArtifactNotFoundError`)."""
        ...

    def __contains__(self, ref: object) -> bool:
        """Whether ``ref`` is stored."""
        ...


class InMemoryArtifactStore:
    """The default store: a dict."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def put(self, data: bytes) -> str:
        """Store ``data``; return its ref."""
        ref = content_ref(data)
        with self._lock:
            self._data.setdefault(ref, bytes(data))
        return ref

    def get(self, ref: str) -> bytes:
        """Stored bytes for ``ref``."""
        with self._lock:
            data = self._data.get(ref)
        if data is None:
            raise ArtifactNotFoundError(
                f"no artifact {ref!r} in this in-memory store (fix: read it from the store the "
                "arbiter that produced it used; an in-memory store forgets on exit)"
            )
        return data

    def __contains__(self, ref: object) -> bool:
        return ref in self._data


class DirectoryArtifactStore:
    """Artifacts as files ``<root>/<hex[:2]>/<hex>``, written atomically (temp + rename).

    ``get`` re-hashes what it reads, so a file edited on disk is reported, never returned.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, ref: str) -> Path:
        algo, _, digest = ref.partition(":")
        if (
            algo != "sha256"
            or len(digest) != 64
            or not all(c in "0123456789abcdef" for c in digest)
        ):
            raise ArtifactNotFoundError(
                f"{ref!r} is not an artifact ref (fix: pass the 'sha256:<64 hex>' artifact_ref "
                "of a tool result)"
            )
        return self.root / digest[:2] / digest

    def put(self, data: bytes) -> str:
        """Store ``data`` (no-op if already stored); return its ref."""
        ref = content_ref(data)
        path = self._path(ref)
        if path.exists():
            return ref
        path.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return ref

    def get(self, ref: str) -> bytes:
        """Stored bytes for ``ref``; :class:`CorruptCheckpointError` if the file was altered."""
        path = self._path(ref)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ArtifactNotFoundError(
                f"no artifact {ref!r} under {self.root} (fix: open the directory the arbiter "
                "that produced it wrote to)"
            ) from None
        if content_ref(data) != ref:
            raise CorruptCheckpointError(
                f"artifact file {path} does not match its hash {ref}; it was modified on disk "
                "(fix: restore it from a backup or re-run the call that produced it)"
            )
        return data

    def __contains__(self, ref: object) -> bool:
        if not isinstance(ref, str):
            return False
        try:
            return self._path(ref).exists()
        except ArtifactNotFoundError:
            return False
