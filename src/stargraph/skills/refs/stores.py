"""Passage stores behind two small protocols, each with a SQLite and an in-memory default.

* :class:`DocumentStore` - passages by id plus keyword search (BM25). SQLite: a plain table
  and an FTS5 index (through the shared SQLite layer ``stargraph._sqlite``); memory: dicts
  and an inverted index.
* :class:`VectorStore` - one vector per passage id, exact cosine search. SQLite keeps the
  vectors as float32 blobs and searches a cached normalised matrix with one numpy product;
  exact search is fast enough at the scale of a reference corpus (``benchmarks/bench_refs.py``:
  10k passages).

Both are live objects: graphs reach them through ``compile(services={"docs": ...,
"vectors": ...})``, never through the IR. :mod:`stargraph.skills.refs.conformance` holds the
shared suites any third-party implementation can run.

>>> docs = InMemoryDocumentStore()
>>> docs.add([Passage(id="p1", text="Paris is the capital of France.")])
>>> [hit.id for hit in docs.search("capital of france", k=3)]
['p1']
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final, NamedTuple, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from pydantic import ConfigDict

from stargraph._sqlite import Database
from stargraph._typed import TypedModel
from stargraph.errors import SkillValidationError, StoreError

__all__ = [
    "DocumentStore",
    "Hit",
    "InMemoryDocumentStore",
    "InMemoryVectorStore",
    "Passage",
    "SqliteDocumentStore",
    "SqliteVectorStore",
    "StoreError",
    "VectorStore",
    "tokenize",
]

_WORD: Final = re.compile(r"\w+")
# BM25 parameters; FTS5's bm25() uses the same defaults, so both stores rank alike.
_K1: Final = 1.2
_B: Final = 0.75


class Passage(TypedModel):
    """One retrievable piece of text. ``id`` is what answers cite (``[p3]``)."""

    typed_error = SkillValidationError

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """Unique id, cited by answers as ``[id]``."""
    text: str
    """The passage text the model reads."""
    source: str = ""
    """Where it came from: a URL, a file, a document id."""
    title: str = ""
    """Title of the document it belongs to."""


class Hit(NamedTuple):
    """A search result: passage id and score (higher is better)."""

    id: str
    score: float


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens (Unicode word characters), the keyword search vocabulary.

    >>> tokenize("Paris, the Capital!")
    ['paris', 'the', 'capital']
    """
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise StoreError(f"k must be an int >= 1, got {k!r}; pass e.g. k=5")


def _rank(scores: dict[str, float], k: int) -> list[Hit]:
    # Best first; ties broken by id so results are the same in every store and process.
    ordered = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return [Hit(pid, score) for pid, score in ordered[:k]]


# --------------------------------------------------------------------------- protocols


@runtime_checkable
class DocumentStore(Protocol):
    """Passages by id, with keyword search."""

    def add(self, passages: Iterable[Passage]) -> None:
        """Insert passages; a passage whose id exists replaces the old one."""
        ...

    def get(self, ids: Sequence[str]) -> list[Passage]:
        """The passages with these ids, in the order asked; unknown ids are left out."""
        ...

    def search(self, query: str, k: int) -> list[Hit]:
        """At most ``k`` passages sharing a word with ``query``, best BM25 score first (ties
        by id); no passage without a query word."""
        ...

    def __len__(self) -> int:
        """Number of passages."""
        ...

    def close(self) -> None:
        """Release resources; the store is unusable afterwards."""
        ...


@runtime_checkable
class VectorStore(Protocol):
    """One vector per passage id, with exact cosine search."""

    def add(self, ids: Sequence[str], vectors: npt.ArrayLike) -> None:
        """Insert ``len(ids)`` vectors (rows); an existing id is replaced. All vectors of a
        store have one length, fixed by the first ``add``."""
        ...

    def search(self, vector: npt.ArrayLike, k: int) -> list[Hit]:
        """The ``k`` ids whose vectors have the highest cosine similarity to ``vector``, best
        first (ties by id)."""
        ...

    def __len__(self) -> int:
        """Number of vectors."""
        ...

    def close(self) -> None:
        """Release resources; the store is unusable afterwards."""
        ...


# --------------------------------------------------------------------------- documents


class InMemoryDocumentStore:
    """A :class:`DocumentStore` in dicts: BM25 over an inverted index."""

    def __init__(self) -> None:
        self._passages: dict[str, Passage] = {}
        self._terms: dict[str, Counter[str]] = {}
        self._postings: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def add(self, passages: Iterable[Passage]) -> None:
        """Insert or replace passages."""
        with self._lock:
            for passage in passages:
                old = self._terms.pop(passage.id, None)
                for term in old or ():
                    self._postings[term].discard(passage.id)
                counts = Counter(tokenize(passage.text))
                self._passages[passage.id] = passage
                self._terms[passage.id] = counts
                for term in counts:
                    self._postings.setdefault(term, set()).add(passage.id)

    def get(self, ids: Sequence[str]) -> list[Passage]:
        """Passages in the order asked."""
        return [self._passages[i] for i in ids if i in self._passages]

    def search(self, query: str, k: int) -> list[Hit]:
        """BM25 over the query's distinct words."""
        _check_k(k)
        with self._lock:
            n = len(self._passages)
            if n == 0:
                return []
            avg = sum(sum(c.values()) for c in self._terms.values()) / n or 1.0
            scores: dict[str, float] = {}
            for term in dict.fromkeys(tokenize(query)):
                posting = self._postings.get(term)
                if not posting:
                    continue
                idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
                for pid in posting:
                    counts = self._terms[pid]
                    tf = counts[term]
                    length = sum(counts.values())
                    norm = tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * length / avg))
                    scores[pid] = scores.get(pid, 0.0) + idf * norm
            return _rank(scores, k)

    def __len__(self) -> int:
        return len(self._passages)

    def close(self) -> None:
        """Drop everything."""
        self._passages.clear()
        self._terms.clear()
        self._postings.clear()


class SqliteDocumentStore:
    """A :class:`DocumentStore` in one SQLite file (or ``":memory:"``): a ``passages`` table
    and an FTS5 index ranked with ``bm25()``. Safe to share between threads."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self._file = Database(path)
        self._file.script(
            """
                CREATE TABLE IF NOT EXISTS passages (
                    rid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, text TEXT NOT NULL,
                    source TEXT NOT NULL, title TEXT NOT NULL);
                CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5(
                    body, tokenize = 'unicode61 remove_diacritics 0');
                """
        )

    def add(self, passages: Iterable[Passage]) -> None:
        """Insert or replace passages in one transaction."""
        with self._file.write() as db:
            cur = db.cursor()
            for p in passages:
                row = cur.execute("SELECT rid FROM passages WHERE id = ?", (p.id,)).fetchone()
                if row is not None:
                    cur.execute("DELETE FROM passages_fts WHERE rowid = ?", row)
                    cur.execute("DELETE FROM passages WHERE rid = ?", row)
                cur.execute(
                    "INSERT INTO passages (id, text, source, title) VALUES (?, ?, ?, ?)",
                    (p.id, p.text, p.source, p.title),
                )
                # The FTS body is the tokenised text, so both stores see the same words.
                cur.execute(
                    "INSERT INTO passages_fts (rowid, body) VALUES (?, ?)",
                    (cur.lastrowid, " ".join(tokenize(p.text))),
                )

    def get(self, ids: Sequence[str]) -> list[Passage]:
        """Passages in the order asked."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self._file.rows(
            f"SELECT id, text, source, title FROM passages WHERE id IN ({marks})", tuple(ids)
        )
        found = {r[0]: Passage(id=r[0], text=r[1], source=r[2], title=r[3]) for r in rows}
        return [found[i] for i in ids if i in found]

    def search(self, query: str, k: int) -> list[Hit]:
        """FTS5 ``bm25()`` over the query's distinct words (OR-ed, each quoted)."""
        _check_k(k)
        terms = list(dict.fromkeys(tokenize(query)))
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        rows = self._file.rows(
            "SELECT p.id, -bm25(passages_fts) AS score FROM passages_fts "
            "JOIN passages p ON p.rid = passages_fts.rowid "
            "WHERE passages_fts MATCH ? ORDER BY score DESC, p.id LIMIT ?",
            (match, k),
        )
        return [Hit(r[0], float(r[1])) for r in rows]

    def __len__(self) -> int:
        return int(self._file.rows("SELECT count(*) FROM passages")[0][0])

    def close(self) -> None:
        """Close the connections."""
        self._file.close()


# --------------------------------------------------------------------------- vectors


def _as_matrix(vectors: npt.ArrayLike, rows: int, dim: int | None) -> npt.NDArray[np.float32]:
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim == 1 and rows == 1:
        matrix = matrix.reshape(1, -1)
    if matrix.ndim != 2 or matrix.shape[0] != rows:
        raise StoreError(
            f"expected {rows} vectors as a ({rows}, dim) array, got shape {matrix.shape}; "
            "pass one row per id"
        )
    if dim is not None and matrix.shape[1] != dim:
        raise StoreError(
            f"vectors have length {matrix.shape[1]} but this store holds length {dim}; "
            "use the embedder the store was built with"
        )
    if not np.isfinite(matrix).all():
        raise StoreError("vectors contain NaN or infinity; check the embedder")
    return matrix


def _normalised(matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: npt.NDArray[np.float32] = (matrix / norms).astype(np.float32, copy=False)
    return out


def _cosine_top(
    ids: Sequence[str], matrix: npt.NDArray[np.float32], query: npt.ArrayLike, k: int
) -> list[Hit]:
    _check_k(k)
    if not ids:
        return []
    q = _as_matrix(query, 1, matrix.shape[1])[0]
    norm = float(np.linalg.norm(q))
    scores = np.dot(matrix, q / norm if norm else q)
    if k < len(ids):
        # argpartition picks the candidates in O(n); only those are sorted. Extra candidates
        # tied with the k-th score are kept so the tie-break by id is exact.
        kth = np.partition(scores, len(ids) - k)[len(ids) - k]
        candidates = np.flatnonzero(scores >= kth)
    else:
        candidates = np.arange(len(ids))
    best = sorted(candidates.tolist(), key=lambda i: (-float(scores[i]), ids[i]))
    return [Hit(ids[i], float(scores[i])) for i in best[:k]]


class InMemoryVectorStore:
    """A :class:`VectorStore` in a numpy matrix (rows normalised on insert)."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}
        self._ids: list[str] = []
        self._matrix: npt.NDArray[np.float32] | None = None
        self._lock = threading.Lock()

    def add(self, ids: Sequence[str], vectors: npt.ArrayLike) -> None:
        """Insert or replace vectors."""
        with self._lock:
            dim = None if self._matrix is None else self._matrix.shape[1]
            matrix = _normalised(_as_matrix(vectors, len(ids), dim))
            if self._matrix is None:
                self._matrix = np.zeros((0, matrix.shape[1]), dtype=np.float32)
            new_rows = []
            for pid, row in zip(ids, matrix, strict=True):
                at = self._index.get(pid)
                if at is None:
                    self._index[pid] = len(self._ids)
                    self._ids.append(pid)
                    new_rows.append(row)
                else:
                    self._matrix[at] = row
            if new_rows:
                self._matrix = np.vstack([self._matrix, np.asarray(new_rows)])

    def search(self, vector: npt.ArrayLike, k: int) -> list[Hit]:
        """Exact cosine search."""
        with self._lock:
            if self._matrix is None:
                _check_k(k)
                return []
            return _cosine_top(self._ids, self._matrix, vector, k)

    def __len__(self) -> int:
        return len(self._ids)

    def close(self) -> None:
        """Drop everything."""
        self._index.clear()
        self._ids.clear()
        self._matrix = None


class SqliteVectorStore:
    """A :class:`VectorStore` in one SQLite file (or ``":memory:"``): float32 blobs in a
    ``vectors`` table. Searches use a normalised matrix loaded once and dropped on ``add``.
    Safe to share between threads."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self._file = Database(path)
        # Keeps the cached matrix in step with the table (dropped by add, rebuilt by search).
        self._lock = threading.Lock()
        self._cache: tuple[list[str], npt.NDArray[np.float32]] | None = None
        self._file.script(
            """
            CREATE TABLE IF NOT EXISTS vectors (id TEXT PRIMARY KEY, vec BLOB NOT NULL);
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            """
        )

    @property
    def _db(self) -> sqlite3.Connection:
        """This thread's connection (``":memory:"``: the shared one)."""
        return self._file.connection()

    def _dim(self) -> int | None:
        rows = self._file.rows("SELECT value FROM meta WHERE key = 'dim'")
        return int(rows[0][0]) if rows else None

    @property
    def dim(self) -> int | None:
        """Vector length, once the first vectors are in."""
        with self._lock:
            return self._dim()

    def add(self, ids: Sequence[str], vectors: npt.ArrayLike) -> None:
        """Insert or replace vectors in one transaction."""
        with self._lock:
            matrix = _as_matrix(vectors, len(ids), self._dim())
            with self._file.write() as db:
                db.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES ('dim', ?)",
                    (str(matrix.shape[1]),),
                )
                db.executemany(
                    "INSERT OR REPLACE INTO vectors (id, vec) VALUES (?, ?)",
                    [
                        (pid, row.astype("<f4").tobytes())
                        for pid, row in zip(ids, matrix, strict=True)
                    ],
                )
            self._cache = None

    def _loaded(self) -> tuple[list[str], npt.NDArray[np.float32]]:
        if self._cache is None:
            rows = self._file.rows("SELECT id, vec FROM vectors ORDER BY id")
            dim = self._dim() or 0
            ids = [r[0] for r in rows]
            blob = b"".join(r[1] for r in rows)
            matrix = np.frombuffer(blob, dtype="<f4").reshape(len(ids), dim).astype(np.float32)
            self._cache = (ids, _normalised(matrix))
        return self._cache

    def search(self, vector: npt.ArrayLike, k: int) -> list[Hit]:
        """Exact cosine search (one matrix-vector product)."""
        with self._lock:
            ids, matrix = self._loaded()
            return _cosine_top(ids, matrix, vector, k)

    def __len__(self) -> int:
        return int(self._file.rows("SELECT count(*) FROM vectors")[0][0])

    def close(self) -> None:
        """Close the connections."""
        with self._lock:
            self._file.close()
            self._cache = None
