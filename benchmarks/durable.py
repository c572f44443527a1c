"""Durable-run benchmarks (issue 3): a SQLite commit per step, and bytes stored per run.

Two report sections of ``python -m benchmarks``, printed after the core table and selectable
with ``--only durable`` / ``--only bytes``:

``durable``
    The 10-node chain of :mod:`benchmarks.workloads` with every step committed to SQLite
    before the next one starts, each invocation on a new run (thread) id, into a file that
    holds the earlier runs too. Engines:

    - ``stargraph``: ``graph.compile(store=SqliteStore(path))`` (``durability="sync"``, the
      default: one transaction per step, plus one creating the run and one finishing it);
    - ``langgraph``: ``StateGraph.compile(checkpointer=SqliteSaver(conn))`` invoked with
      ``durability="sync"`` (LangGraph 1.x: a keyword of ``Pregel.invoke``, typed
      ``langgraph.types.Durability = Literal["sync", "async", "exit"]``; "sync" persists each
      step's checkpoint and writes before the next step starts);
    - ``plain``: the hand-written loop of the core ``chain`` workload that writes each step's
      whole state as JSON into a table, one transaction per step.

    All three use WAL with ``synchronous=NORMAL`` (``SqliteSaver`` sets WAL itself; its
    connection is given ``synchronous=NORMAL`` here, so no engine wins on pragmas). The
    ``-full`` rows repeat stargraph and LangGraph with ``synchronous=FULL`` (an fsync per
    commit; SQLite's default, so what a bare ``SqliteSaver`` connection gets). The figure is
    wall time per committed node step, median over rounds; engines are interleaved within a
    round.

``bytes``
    The 100-node chain run once per engine into a fresh file; the bytes stored for that run
    (the serialized blobs: stargraph's ``payload`` columns, LangGraph's ``checkpoint`` and
    ``metadata`` blobs plus its ``writes.value``, the plain loop's JSON states) and the
    file's size after ``VACUUM``.

Before anything is timed or measured, every engine runs the chain once and must return the
expected final state, read the same state back from its file, and have stored at least one
row per step; otherwise :class:`~benchmarks.core_harness.StateMismatch` aborts the run.
"""

from __future__ import annotations

import gc
import itertools
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from benchmarks.workloads import (
    Snapshot,
    State,
    _apply,
    _chain_expected,
    bump,
    chain_graph,
    chain_state_graph,
    snapshot,
)

__all__ = [
    "BYTES_SIZE",
    "BYTES_TARGET",
    "DURABLE_ENGINES",
    "DURABLE_INVOCATIONS",
    "DURABLE_SIZE",
    "DURABLE_TARGET",
    "SECTIONS",
    "BytesResult",
    "DurableEngine",
    "DurableResult",
    "EngineSpec",
    "bytes_section",
    "check_durable_agreement",
    "durable_section",
    "measure_bytes",
    "time_durable",
    "vacuumed_size",
]

DURABLE_SIZE = 10
"""Nodes in the chain of the ``durable`` section."""

DURABLE_INVOCATIONS = 100
"""Invocations per timed round of the ``durable`` section (``--quick``: a tenth)."""

DURABLE_TARGET = 10.0
"""stargraph must be at least this many times faster per durable step than LangGraph."""

BYTES_SIZE = 100
"""Nodes in the chain of the ``bytes`` section."""

BYTES_TARGET = 50.0
"""stargraph must store at least this many times fewer bytes per run than LangGraph."""

Synchronous = Literal["NORMAL", "FULL"]


class DurableEngine(Protocol):
    """One engine running the ``n``-node chain durably into one SQLite file."""

    path: Path
    last: str
    """The run (thread) id of the last invocation."""

    def run(self) -> Any:
        """One invocation on a new run id; returns the engine's final state."""

    def stored(self) -> Snapshot:
        """The last run's final state as read back from the file."""

    def rows(self) -> int:
        """Per-step rows the last run left in the file (a commit per step leaves >= n)."""

    def payload_bytes(self) -> int:
        """Bytes of the serialized blobs stored for the last run."""

    def row_bytes(self) -> int:
        """Bytes of every column of every row of the last run (keys and ids included)."""

    def close(self) -> None:
        """Release the file (all connections closed)."""


def _sum(conn: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> int:
    return int(conn.execute(sql, params).fetchone()[0] or 0)


def _value_bytes(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, str):
        return len(value.encode())
    return 8  # INTEGER / REAL: SQLite stores up to 8 bytes


def _row_bytes(conn: sqlite3.Connection, tables: Sequence[str], key: str, value: str) -> int:
    """Bytes of every column of the rows of ``tables`` whose ``key`` column is ``value``."""
    return sum(
        _value_bytes(column)
        for table in tables
        for row in conn.execute(f"SELECT * FROM {table} WHERE {key} = ?", (value,))
        for column in row
    )


@contextmanager
def _reader(path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(path)
    try:
        yield conn
    finally:
        conn.close()


_STARGRAPH_BLOBS = (
    ("runs", "extra"),
    ("steps", "payload"),
    ("pending", "payload"),
    ("journal", "payload"),
)


class StargraphEngine:
    """``chain_graph(n).compile(store=SqliteStore(path, synchronous=...))``."""

    def __init__(self, n: int, path: Path, synchronous: Synchronous = "NORMAL") -> None:
        from stargraph.checkpoint import SqliteStore

        self.path = path
        self.store = SqliteStore(path, synchronous=synchronous)
        self.app = chain_graph(n).compile(store=self.store, max_steps=n + 10)
        self._ids = (f"run-{i}" for i in itertools.count())
        self.last = ""

    def run(self) -> State:
        self.last = next(self._ids)
        return self.app.invoke({}, run_id=self.last)

    def stored(self) -> Snapshot:
        return snapshot(self.app.get_state(self.last))

    def rows(self) -> int:
        return len(self.app.history(self.last))

    def payload_bytes(self) -> int:
        run = self.last
        # Every table that holds a run's data keeps it in a JSON ``payload`` column (the
        # ``runs`` row adds ``extra``: NULL unless the run failed or was interrupted).
        with _reader(self.path) as conn:
            return sum(
                _sum(conn, f"SELECT SUM(LENGTH({column})) FROM {table} WHERE run_id = ?", (run,))
                for table, column in _STARGRAPH_BLOBS
            )

    def row_bytes(self) -> int:
        with _reader(self.path) as conn:
            return _row_bytes(conn, [table for table, _ in _STARGRAPH_BLOBS], "run_id", self.last)

    def close(self) -> None:
        self.store.close()


class LangGraphEngine:
    """The chain as a LangGraph ``StateGraph`` with a ``SqliteSaver``, ``durability="sync"``."""

    def __init__(self, n: int, path: Path, synchronous: Synchronous = "NORMAL") -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.path = path
        # As SqliteSaver.from_conn_string opens it; setup() switches the file to WAL.
        self.conn = sqlite3.connect(path, check_same_thread=False)
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        saver = SqliteSaver(self.conn)
        saver.setup()
        self.app = chain_state_graph(n).compile(checkpointer=saver)
        self._limit = n + 10
        self._ids = (f"thread-{i}" for i in itertools.count())
        self.last = ""

    def _config(self) -> Any:
        return {"configurable": {"thread_id": self.last}, "recursion_limit": self._limit}

    def run(self) -> Any:
        self.last = next(self._ids)
        return self.app.invoke({"counter": 0, "items": []}, self._config(), durability="sync")

    def stored(self) -> Snapshot:
        return snapshot(self.app.get_state(self._config()).values)

    def rows(self) -> int:
        return _sum(self.conn, "SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?", (self.last,))

    def payload_bytes(self) -> int:
        # Schema (langgraph-checkpoint-sqlite 3.x): checkpoints(thread_id, checkpoint_ns,
        # checkpoint_id, parent_checkpoint_id, type, checkpoint BLOB, metadata BLOB) and
        # writes(thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel,
        # type, value BLOB). Only the blobs are counted, as only stargraph's payloads are.
        return _sum(
            self.conn,
            "SELECT SUM(LENGTH(checkpoint) + LENGTH(metadata)) FROM checkpoints "
            "WHERE thread_id = ?",
            (self.last,),
        ) + _sum(
            self.conn, "SELECT SUM(LENGTH(value)) FROM writes WHERE thread_id = ?", (self.last,)
        )

    def row_bytes(self) -> int:
        return _row_bytes(self.conn, ("checkpoints", "writes"), "thread_id", self.last)

    def close(self) -> None:
        self.conn.close()


class PlainEngine:
    """The chain as a Python loop that commits each step's state as JSON (WAL, NORMAL)."""

    def __init__(self, n: int, path: Path) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None)  # explicit BEGIN/COMMIT
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS steps (run_id TEXT NOT NULL, step INTEGER NOT NULL, "
            "state BLOB NOT NULL, PRIMARY KEY (run_id, step))"
        )
        self._fns = [bump] * n
        self._ids = (f"run-{i}" for i in itertools.count())
        self.last = ""

    def run(self) -> State:
        self.last = run_id = next(self._ids)
        conn, insert = self.conn, "INSERT INTO steps (run_id, step, state) VALUES (?, ?, ?)"
        state = State()
        for step, fn in enumerate(self._fns, 1):
            state = _apply(state, fn(state))
            conn.execute("BEGIN")
            conn.execute(insert, (run_id, step, state.model_dump_json().encode()))
            conn.execute("COMMIT")
        return state

    def stored(self) -> Snapshot:
        row = self.conn.execute(
            "SELECT state FROM steps WHERE run_id = ? ORDER BY step DESC LIMIT 1", (self.last,)
        ).fetchone()
        return snapshot(State.model_validate_json(row[0]))

    def rows(self) -> int:
        return _sum(self.conn, "SELECT COUNT(*) FROM steps WHERE run_id = ?", (self.last,))

    def payload_bytes(self) -> int:
        return _sum(
            self.conn, "SELECT SUM(LENGTH(state)) FROM steps WHERE run_id = ?", (self.last,)
        )

    def row_bytes(self) -> int:
        return _row_bytes(self.conn, ("steps",), "run_id", self.last)

    def close(self) -> None:
        self.conn.close()


@dataclass(frozen=True)
class EngineSpec:
    """A named way of opening a :class:`DurableEngine` on a chain of ``n`` nodes in a file."""

    name: str
    setup: str
    open: Callable[[int, Path], DurableEngine]


DURABLE_ENGINES: tuple[EngineSpec, ...] = (
    EngineSpec("stargraph", "SqliteStore, WAL, synchronous=NORMAL", StargraphEngine),
    EngineSpec(
        "langgraph",
        'SqliteSaver, durability="sync", WAL, synchronous=NORMAL',
        LangGraphEngine,
    ),
    EngineSpec("plain", "JSON state per step, WAL, synchronous=NORMAL", PlainEngine),
    EngineSpec(
        "stargraph-full",
        "SqliteStore, WAL, synchronous=FULL",
        lambda n, p: StargraphEngine(n, p, "FULL"),
    ),
    EngineSpec(
        "langgraph-full",
        'SqliteSaver, durability="sync", WAL, synchronous=FULL',
        lambda n, p: LangGraphEngine(n, p, "FULL"),
    ),
)
"""Engines of the ``durable`` section, in table order."""

BYTES_ENGINES: tuple[str, ...] = ("stargraph", "langgraph", "plain")
"""Engines of the ``bytes`` section (the ``-full`` variants store the same bytes)."""


def _open(
    specs: Sequence[EngineSpec], n: int, directory: Path, stack: ExitStack
) -> dict[str, DurableEngine]:
    engines: dict[str, DurableEngine] = {}
    for spec in specs:
        engine = spec.open(n, directory / f"{spec.name}.db")
        stack.callback(engine.close)
        engines[spec.name] = engine
    return engines


def _describe(final: Snapshot) -> str:
    counter, items = final
    shown = ", ".join(repr(i) for i in items[:4]) + (", ..." if len(items) > 4 else "")
    return f"counter={counter}, {len(items)} items [{shown}]"


def _check(engines: Mapping[str, DurableEngine], n: int, what: str) -> dict[str, Snapshot]:
    """Run each engine once; raise ``StateMismatch`` unless every one returns and stores the
    expected final state with a row per step. Returns each engine's final state."""
    from benchmarks.core_harness import StateMismatch

    expected = _chain_expected(n)
    finals: dict[str, Snapshot] = {}
    problems: list[str] = []
    for name, engine in engines.items():
        finals[name] = returned = snapshot(engine.run())
        stored, rows = engine.stored(), engine.rows()
        if returned != expected:
            problems.append(f"  {name:<15}: returned {_describe(returned)}")
        if stored != expected:
            problems.append(f"  {name:<15}: stored   {_describe(stored)}")
        if rows < n:
            problems.append(f"  {name:<15}: {rows} rows stored for {n} steps")
    if problems:
        head = [f"{what} (chain of {n}): engines disagree with the expected final state"]
        head.append(f"  {'expected':<15}: {_describe(expected)}")
        raise StateMismatch("\n".join(head + problems))
    return finals


def check_durable_agreement(
    n: int, directory: Path, specs: Sequence[EngineSpec] = DURABLE_ENGINES
) -> dict[str, Snapshot]:
    """Open every engine on fresh files in ``directory`` and :func:`_check` them once."""
    with ExitStack() as stack:
        return _check(_open(specs, n, directory, stack), n, "durable")


# ---------------------------------------------------------------------- timing


@dataclass(frozen=True)
class DurableResult:
    """µs per committed step, one figure per round, per engine."""

    size: int
    invocations: int
    rounds: int
    per_step_us: Mapping[str, Sequence[float]]

    def median(self, engine: str) -> float:
        """Median µs per step of ``engine``."""
        return statistics.median(self.per_step_us[engine])

    def ratio(self, slow: str, fast: str) -> float:
        """How many times slower ``slow`` is than ``fast``."""
        return self.median(slow) / self.median(fast)


def time_durable(
    n: int,
    directory: Path,
    *,
    rounds: int,
    invocations: int,
    specs: Sequence[EngineSpec] = DURABLE_ENGINES,
) -> DurableResult:
    """Check the engines agree, then time ``rounds`` rounds of ``invocations`` runs each."""
    per_step: dict[str, list[float]] = {spec.name: [] for spec in specs}
    with ExitStack() as stack:
        engines = _open(specs, n, directory, stack)
        _check(engines, n, "durable")  # also the warm-up: first-call caches, lazy imports
        for _ in range(rounds):
            for name, engine in engines.items():
                gc.collect()
                start = time.perf_counter_ns()
                for _ in range(invocations):
                    engine.run()
                elapsed = time.perf_counter_ns() - start
                per_step[name].append(elapsed / 1000 / (n * invocations))
    return DurableResult(n, invocations, rounds, per_step)


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def render_durable(result: DurableResult) -> tuple[str, list[str]]:
    """The ``durable`` table, and the missed targets."""
    lg = result.ratio("langgraph", "stargraph")
    ratios = {
        "langgraph": f"LangGraph/stargraph {lg:6.1f}x  {_verdict(lg >= DURABLE_TARGET)} "
        f"(>= {DURABLE_TARGET:.0f}x)",
        "plain": f"stargraph/plain     {result.ratio('stargraph', 'plain'):6.1f}x",
        "langgraph-full": "LangGraph/stargraph "
        f"{result.ratio('langgraph-full', 'stargraph-full'):6.1f}x  (both FULL)",
    }
    header = f"{'engine':<15} {'SQLite setup':<56} {'µs/step':>9}  ratio"
    lines = [
        f"durable: {result.size}-node chain, one SQLite commit per step, a new run id per "
        f"invocation; median µs per step over {result.rounds} round(s) of "
        f"{result.invocations} invocations",
        "",
        header,
        "-" * (len(header) + 30),
    ]
    setups = {spec.name: spec.setup for spec in DURABLE_ENGINES}
    for name in result.per_step_us:
        row = (
            f"{name:<15} {setups.get(name, ''):<56} {result.median(name):>9.1f}  "
            f"{ratios.get(name, '')}"
        )
        lines.append(row.rstrip())
    misses = []
    if lg < DURABLE_TARGET:
        misses.append(
            f"durable: stargraph only {lg:.1f}x faster per step than LangGraph "
            f"(target {DURABLE_TARGET:.0f}x)"
        )
    return "\n".join(lines), misses


# ---------------------------------------------------------------------- bytes


@dataclass(frozen=True)
class BytesResult:
    """What one run of one engine left in its own fresh file."""

    rows: int
    payload: int
    row_bytes: int
    vacuumed: int


def vacuumed_size(path: Path) -> int:
    """Size of the SQLite file at ``path`` after ``VACUUM`` (its WAL checkpointed away)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def measure_bytes(
    n: int, directory: Path, engines: Sequence[str] = BYTES_ENGINES
) -> dict[str, BytesResult]:
    """Run the ``n``-node chain once per engine into a fresh file; what each run stored."""
    specs = [spec for spec in DURABLE_ENGINES if spec.name in engines]
    results = {}
    with ExitStack() as stack:
        opened = _open(specs, n, directory, stack)
        _check(opened, n, "bytes")
        for name, engine in opened.items():
            results[name] = (engine.rows(), engine.payload_bytes(), engine.row_bytes())
    # Every connection is closed now, so VACUUM sees the whole file.
    return {
        name: BytesResult(rows, payload, row_bytes, vacuumed_size(directory / f"{name}.db"))
        for name, (rows, payload, row_bytes) in results.items()
    }


# Why stargraph stores so much less: a stargraph step row holds that step's *writes* (here
# {"counter": k+1, "items": ["k"]}), the next task and a timestamp: ~150 bytes whatever the
# run's length (a third of it the ISO ``created_at``, 47 bytes; without it the 100-node run
# would store ~11 KB instead of ~16 KB). A full snapshot of the state is added every
# ``snapshot_every`` (50) steps, so reading any step replays at most 49 deltas. A LangGraph
# checkpoint holds the *values of every channel* (the whole ``items`` list, so it grows with
# the step number) and, larger still, ``channel_versions`` (one version string per channel,
# including a ``branch:to:<node>`` trigger channel per node) and ``versions_seen`` (per node,
# the versions it has seen): on a 100-node chain that bookkeeping grows by ~150 bytes a step
# and every checkpoint repeats all of it, so the run's bytes grow quadratically with its
# length (~7.5 KB per checkpoint by step 50). The plain loop, storing the whole state per
# step, is quadratic too, but only in the list. The file sizes after VACUUM are closer than
# the payloads: SQLite allocates whole 4 KiB pages per table and index, and stargraph's
# schema (runs, steps, pending, journal, meta and their indexes) costs a fixed 48 KB before
# the first run.


def render_bytes(n: int, results: Mapping[str, BytesResult]) -> tuple[str, list[str]]:
    """The ``bytes`` table, and the missed targets."""
    sg, lg = results["stargraph"], results["langgraph"]
    payload_ratio = lg.payload / sg.payload
    row_ratio = lg.row_bytes / sg.row_bytes
    file_ratio = lg.vacuumed / sg.vacuumed
    header = (
        f"{'engine':<15} {'rows':>6} {'payload bytes':>14} {'row bytes':>10} "
        f"{'file after VACUUM':>18}"
    )
    lines = [
        f"bytes: {n}-node chain, one run per engine into a fresh SQLite file. payload: the "
        "run's serialized blobs; row bytes: every column of its rows (keys, ids, types); "
        "file: its size after VACUUM",
        "",
        header,
        "-" * len(header),
    ]
    for name, r in results.items():
        lines.append(
            f"{name:<15} {r.rows:>6} {r.payload:>14,} {r.row_bytes:>10,} {r.vacuumed:>18,}"
        )
    lines.append("")
    lines.append(
        f"LangGraph/stargraph: payload {payload_ratio:.1f}x  "
        f"{_verdict(payload_ratio >= BYTES_TARGET)} (>= {BYTES_TARGET:.0f}x); "
        f"row bytes {row_ratio:.1f}x; file after VACUUM {file_ratio:.1f}x"
    )
    misses = []
    if payload_ratio < BYTES_TARGET:
        misses.append(
            f"bytes: stargraph stores only {payload_ratio:.1f}x fewer bytes per run than "
            f"LangGraph (target {BYTES_TARGET:.0f}x)"
        )
    return "\n".join(lines), misses


# ---------------------------------------------------------------------- sections


def durable_section(*, quick: bool, rounds: int) -> tuple[str, list[str]]:
    """Run and render the ``durable`` section."""
    invocations = max(1, DURABLE_INVOCATIONS // 10) if quick else DURABLE_INVOCATIONS
    with tempfile.TemporaryDirectory(prefix="stargraph-bench-") as tmp:
        result = time_durable(DURABLE_SIZE, Path(tmp), rounds=rounds, invocations=invocations)
    return render_durable(result)


def bytes_section(*, quick: bool, rounds: int) -> tuple[str, list[str]]:
    """Run and render the ``bytes`` section (deterministic: one run, no rounds)."""
    del quick, rounds
    with tempfile.TemporaryDirectory(prefix="stargraph-bench-") as tmp:
        results = measure_bytes(BYTES_SIZE, Path(tmp))
    return render_bytes(BYTES_SIZE, results)


class Section(Protocol):
    """A report section: run it, return its text and its missed targets."""

    def __call__(self, *, quick: bool, rounds: int) -> tuple[str, list[str]]: ...


SECTIONS: dict[str, Section] = {"durable": durable_section, "bytes": bytes_section}
"""Sections of this module by ``--only`` name, in report order."""
