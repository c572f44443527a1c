"""Replay tooling: cassettes (recorded runs as files) and structured run diffs.

Replaying itself is ``CompiledGraph.replay(run_id | recording)``; this package moves
recordings in and out of files and compares runs::

    export_cassette(store, "run-1", "tests/golden/run-1.json")
    recording = load_cassette("tests/golden/run-1.json", graph_hash=app.graph_hash)
    app.replay(recording)
    diff(Recording.from_store(store, "a"), Recording.from_store(store, "b")).first_step

A cassette stores each recorded model request as what is new since the previous request of
the same conversation (``JournalEntry.base`` names that one by fingerprint); a loaded cassette
holds them whole again. Cassettes written before, with whole requests, load as they are.

A cassette is JSON with a checksum over its canonical content, so a truncated file or a stray
edit is refused with a :class:`~stargraph.errors.CassetteError` naming what is wrong.

**The checksum detects accidents, not tampering**: it is a plain SHA-256 that anyone who edits
a cassette can recompute, so an unsigned cassette whose values were edited consistently (and
its checksum recomputed) replays the forged data. For integrity against a forger, *sign*
cassettes with a secret key: ``export_cassette(..., key=b"...")`` adds an HMAC-SHA256
``signature`` over the content, and ``load_cassette(..., key=b"...")`` refuses a cassette that
is unsigned, signed with another key, or edited after signing. Without ``key=`` both read the
``STARGRAPH_CASSETTE_KEY`` environment variable (so the CLI signs and checks too); when a key
is in effect an unsigned cassette is refused, and a signed cassette is refused when no key is.

**Regression suite.** :func:`check_cassette` replays a cassette against a *new version* of
its graph (``replay(cassette, graph=new)``): unchanged regions are served from the record,
changed ones run, and the verdict is ``identical``, ``changed`` or ``broken``
(:class:`CassetteCheck`); ``stargraph check`` runs it over many cassettes in parallel. A
cassette exported with ``graph=`` carries the recording graph's region hashes for that.

A run with subgraph nodes has child runs (``<run>::<site>@<step>.<index>``, nested for deeper
skills); the cassette carries them all under ``children`` (covered by the checksum), and
:func:`load_cassette` returns a :class:`Cassette` whose replay serves each child from them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import orjson
from pydantic import ConfigDict, ValidationError

from stargraph._typed import TypedModel, validate_raw
from stargraph.checkpoint import CheckpointStore, MemoryStore, Recording, StepRecord
from stargraph.checkpoint._compact import compact_steps
from stargraph.compile._subgraphs import site_of
from stargraph.errors import CassetteError, ReplayError, StargraphError
from stargraph.ir import GraphIR, SubgraphNodeIR, content_hash
from stargraph.ir._canonical import non_canonical
from stargraph.runtime._changes import value_changes
from stargraph.runtime._plan import ChildRunId
from stargraph.runtime._replayplan import ReplayPlan
from stargraph.runtime._versions import RegionReport, ReplayReport, region_hashes, replay_across

if TYPE_CHECKING:
    from stargraph.runtime import CompiledGraph

__all__ = [
    "CASSETTE_FORMAT",
    "CASSETTE_KEY_ENV",
    "Cassette",
    "CassetteCheck",
    "RegionReport",
    "ReplayPlan",
    "ReplayReport",
    "RunDiff",
    "StepDiff",
    "Verdict",
    "align_steps",
    "check_cassette",
    "check_cassettes",
    "diff",
    "export_cassette",
    "inserted_step",
    "load_cassette",
    "record_again",
    "value_changes",
]

CASSETTE_FORMAT: Final = "stargraph-cassette/1"
"""The format tag every cassette carries."""

CASSETTE_KEY_ENV: Final = "STARGRAPH_CASSETTE_KEY"
"""Environment variable holding the cassette signing key, used when no ``key=`` is given."""

_SIGNATURE_PREFIX: Final = "hmac-sha256:"

CassetteKey = bytes | str
"""A signing key: bytes, or text (encoded as UTF-8)."""


def _key(key: CassetteKey | None) -> bytes | None:
    """The key in effect: ``key`` if given, else ``$STARGRAPH_CASSETTE_KEY``, else none."""
    if key is None:
        key = os.environ.get(CASSETTE_KEY_ENV) or None
        if key is None:
            return None
    raw = key.encode() if isinstance(key, str) else bytes(key)
    if not raw:
        raise CassetteError(
            "the cassette key is empty; pass a secret key (at least 16 random bytes) or none"
        )
    return raw


def _signature(key: bytes, checksum: str) -> str:
    # The checksum is a SHA-256 over the canonical content (recording and children), so an
    # HMAC over it (with the format tag) authenticates every byte that replay reads.
    message = f"{CASSETTE_FORMAT}\n{checksum}".encode()
    return _SIGNATURE_PREFIX + hmac.new(key, message, hashlib.sha256).hexdigest()


class Cassette(Recording):
    """A recording loaded from a cassette, with the recordings of its child runs (subgraph
    nodes' runs, at every depth), which replay serves the replayed subgraph nodes from."""

    typed_error = CassetteError

    children: tuple[Recording, ...] = ()
    regions: dict[str, str] = {}
    """The region hashes of the graph that recorded the run (``export_cassette(...,
    graph=app)``), which a replay against another graph version compares its own with."""


def _body(recording: Recording, *, timestamps: bool = True) -> dict[str, Any]:
    # Model requests go in as deltas on the previous request of their conversation (a
    # cassette of a long conversation grows with it, not with its square); loading rebuilds
    # them whole (``Recording`` does).
    recording = recording.model_copy(update={"steps": tuple(compact_steps(recording.steps))})
    if not timestamps:
        recording = recording.model_copy(
            update={
                "run": recording.run.model_copy(update={"created_at": "", "updated_at": ""}),
                "steps": tuple(s.model_copy(update={"created_ms": 0}) for s in recording.steps),
            }
        )
    return recording.model_dump(mode="json", exclude_defaults=True)


def _checksum(body: Any, children: Any, regions: Any = None) -> str:
    # Without children the checksum is over the recording alone (the original format);
    # region hashes, when the cassette carries them, are covered too.
    if regions is not None:
        return content_hash({"children": children, "recording": body, "regions": regions})
    return content_hash(body if children is None else {"children": children, "recording": body})


def _content_checksum(where: str, body: Any, children: Any, regions: Any = None) -> str:
    """The checksum of the content read; a value canonical JSON cannot carry (which export
    never writes) is refused, naming its JSON pointer in the cassette."""
    try:
        return _checksum(body, children, regions)
    except (TypeError, ValueError):
        found = list(non_canonical({"children": children, "recording": body}))
        listed = "; ".join(f"{pointer}: {reason}" for pointer, reason in found[:5])
        more = f" (and {len(found) - 5} more)" if len(found) > 5 else ""
        raise CassetteError(
            f"cassette {where} holds values with no canonical JSON form ({listed}{more}); "
            "export_cassette never writes one, so the file was edited or written by another "
            "program - export the run again"
        ) from None


def _child_ids(store: CheckpointStore, recording: Recording) -> set[str]:
    """Every descendant run of the recorded run; for a fork, also those its parent made at
    the steps the fork copied (replay looks them up under the parent's id)."""
    record = recording.run
    runs = [r.run_id for r in store.list_runs(limit=1_000_000)]
    found = {r for r in runs if r.startswith(f"{record.run_id}::")}
    if record.parent_run_id is not None and record.parent_step is not None:
        copied = _copied_positions(store, recording, record.parent_step)
        for run in runs:
            top = ChildRunId.top(run, record.parent_run_id)
            if top is not None and (copied is None or (top.site, top.activation) in copied):
                found.add(run)
    return found


def _copied_positions(
    store: CheckpointStore, recording: Recording, parent_step: int
) -> set[tuple[str, int]] | None:
    """The ``(site, activation)`` of every child run made at the steps a fork copied from
    its parent (its steps up to ``parent_step``); ``None`` when the store lacks the fork's
    graph to name the sites by (every child run of the parent is then taken)."""
    data = store.get_graph(recording.run.graph_hash)
    if data is None:
        return None
    ir = GraphIR.from_json(data)
    sites = {str(n.id): site_of(n) for n in ir.nodes if isinstance(n, SubgraphNodeIR)}
    copied = [s for s in recording.steps if s.step <= parent_step]
    activations = ChildRunId.activations(sorted(copied, key=lambda s: s.step), sites)
    return {(sites[node], activation) for (_, node), activation in activations.items()}


def export_cassette(
    store: CheckpointStore,
    run_id: str,
    path: str | Path,
    *,
    timestamps: bool = True,
    key: CassetteKey | None = None,
    graph: CompiledGraph[Any] | None = None,
) -> Path:
    """Write run ``run_id`` (record, steps, every recorded call) to a cassette file, with
    its child runs, if any. ``timestamps=False`` blanks the wall-clock fields (run
    ``created_at``/``updated_at``, step ``created_ms``), so a deterministic run gives the same
    bytes every time it is recorded (golden files).

    ``key`` (default: ``$STARGRAPH_CASSETTE_KEY``, if set) signs the cassette with
    HMAC-SHA256, so that :func:`load_cassette` given the same key detects any edit; without
    a key the cassette carries only its checksum, which detects accidents, not forgery.

    ``graph`` (the graph that recorded the run) adds its region hashes, so that the cassette
    can be replayed against a later version of the graph (``replay(cassette, graph=new)``,
    ``stargraph check``) once the recording graph's code is gone."""
    recording = Recording.from_store(store, run_id)
    regions = None
    if graph is not None:
        if graph.graph_hash != recording.run.graph_hash:
            raise CassetteError(
                f"export_cassette(graph=): run {run_id!r} was recorded by graph "
                f"{recording.run.graph_hash}, not by the graph given ({graph.graph_hash}); "
                "pass the graph that recorded it"
            )
        regions = region_hashes(graph.plan)
    body = _body(recording, timestamps=timestamps)
    child_ids = sorted(_child_ids(store, recording))
    children = [
        _body(Recording.from_store(store, child), timestamps=timestamps) for child in child_ids
    ]
    checksum = _checksum(body, children or None, regions)
    document: dict[str, Any] = {
        "format": CASSETTE_FORMAT,
        "graph_hash": recording.run.graph_hash,
        "checksum": checksum,
        "recording": body,
    }
    if children:
        document["children"] = children
    if regions is not None:
        document["regions"] = regions
    secret = _key(key)
    if secret is not None:
        document["signature"] = _signature(secret, checksum)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    return target


def load_cassette(
    path: str | Path, *, graph_hash: str | None = None, key: CassetteKey | None = None
) -> Cassette:
    """Read a cassette, checking its format, checksum, signature and (if given) graph hash.

    With a key (``key=`` or ``$STARGRAPH_CASSETTE_KEY``) the cassette must carry a valid
    signature made with that key: an unsigned cassette, another key's signature, or any edit
    since signing raises :class:`~stargraph.errors.CassetteError`. A signed cassette read
    without a key is refused too, rather than trusted on its checksum alone."""
    where = str(path)
    try:
        document = orjson.loads(Path(path).read_bytes())
    except OSError as exc:
        raise CassetteError(f"cassette {where} cannot be read: {exc}") from exc
    except orjson.JSONDecodeError as exc:
        raise CassetteError(
            f"cassette {where} is not valid JSON ({exc}); it was truncated or damaged - "
            "export it again"
        ) from exc
    if not isinstance(document, dict) or document.get("format") != CASSETTE_FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise CassetteError(f"cassette {where} has format {found!r}, expected {CASSETTE_FORMAT!r}")
    body = document.get("recording")
    children = document.get("children")
    regions = document.get("regions")
    content = _content_checksum(where, body, children, regions)
    if content != document.get("checksum"):
        raise CassetteError(
            f"cassette {where} does not match its checksum (recorded "
            f"{document.get('checksum')}, content {content}): it was edited "
            "by hand; record the run again instead of editing the cassette"
        )
    _check_signature(where, document, _key(key))
    try:
        recording = validate_raw(
            Cassette,
            {**body, "children": children or (), "regions": regions or {}}
            if isinstance(body, dict)
            else body,
        )
    except ValidationError as exc:
        raise CassetteError(f"cassette {where} holds an invalid recording: {exc}") from exc
    if graph_hash is not None and recording.run.graph_hash != graph_hash:
        raise CassetteError(
            f"cassette {where} was recorded by graph {recording.run.graph_hash}, not by this "
            f"graph {graph_hash}; record it again with this graph"
        )
    return recording


def _check_signature(where: str, document: dict[str, Any], key: bytes | None) -> None:
    signature = document.get("signature")
    if key is None:
        if signature is not None:
            raise CassetteError(
                f"cassette {where} is signed; load it with its key (load_cassette(..., key=...) "
                f"or ${CASSETTE_KEY_ENV}) so its signature can be checked"
            )
        return
    if signature is None:
        raise CassetteError(
            f"cassette {where} is not signed, but a cassette key is in effect; its checksum "
            "cannot tell an edit from the original - export it again with the key"
        )
    expected = _signature(key, str(document.get("checksum")))
    if not isinstance(signature, str) or not hmac.compare_digest(signature, expected):
        raise CassetteError(
            f"cassette {where} does not match its signature: it was edited after it was "
            "signed, or signed with another key; do not replay it - export the run again"
        )


class StepDiff(TypedModel):
    """How one step differs between two runs (absent side: ``None``).

    Steps are aligned by what ran, not by number: a step only one side has (the
    ``__update__`` step a fork or counterfactual inserts, a migration) is shown alone, and the
    steps after it are compared with the other side's matching steps, so ``step_a`` and
    ``step_b`` may differ. ``step`` is ``step_a`` (``step_b`` for a step only B has).
    """

    typed_error = ReplayError

    model_config = ConfigDict(frozen=True)

    step: int
    writes_a: dict[str, Any] | None
    writes_b: dict[str, Any] | None
    next_a: list[str] | None
    next_b: list[str] | None
    facts_differ: bool
    step_a: int | None = None
    step_b: int | None = None


class RunDiff(TypedModel):
    """Per-step differences between two recorded runs, and whether their ends differ."""

    typed_error = ReplayError

    model_config = ConfigDict(frozen=True)

    run_a: str
    run_b: str
    steps: tuple[StepDiff, ...]
    status_a: str
    status_b: str

    @property
    def first_step(self) -> int | None:
        """The first step at which the runs differ (``None`` when they do not)."""
        return self.steps[0].step if self.steps else None

    @property
    def identical(self) -> bool:
        """True when every step and the final status agree."""
        return not self.steps and self.status_a == self.status_b


def _number(step: StepRecord) -> int:
    return step.step


def _writes(step: StepRecord | None) -> dict[str, Any] | None:
    if step is None:
        return None
    return {f"{w.node}/{w.index}": w.writes for w in step.writes}


def _next(step: StepRecord | None) -> list[str] | None:
    return None if step is None else [f"{t.node}/{t.index}" for t in step.next]


# Steps written by the engine on the user's behalf rather than by the graph's nodes.
_INSERTED = frozenset({"__update__", "__migration__"})


def inserted_step(step: StepRecord | None) -> bool:
    """Whether ``step`` was written by the engine on the user's behalf (the ``__update__`` of
    a fork, a counterfactual or ``resume(update=...)``, a ``__migration__``), not by nodes."""
    return step is not None and bool(step.writes) and all(w.node in _INSERTED for w in step.writes)


def align_steps(
    a: Sequence[StepRecord], b: Sequence[StepRecord]
) -> Iterator[tuple[StepRecord | None, StepRecord | None]]:
    """Pairs of steps of two runs that correspond, in order: an inserted step (the
    ``__update__`` of a fork or counterfactual, a ``__migration__``) that the other side has
    not got at that point is paired with ``None``, so the steps after it still line up."""
    i = j = 0
    while i < len(a) or j < len(b):
        sa = a[i] if i < len(a) else None
        sb = b[j] if j < len(b) else None
        if inserted_step(sa) and not inserted_step(sb):
            yield sa, None
            i += 1
        elif inserted_step(sb) and not inserted_step(sa):
            yield None, sb
            j += 1
        else:
            yield sa, sb
            i += sa is not None
            j += sb is not None


def diff(a: Recording, b: Recording) -> RunDiff:
    """Compare two runs step by step: writes per task, scheduled tasks, rule facts.

    Steps are aligned by what ran (see :class:`StepDiff`), so a counterfactual is compared
    with its parent task by task after the update it inserted."""
    out = []
    for sa, sb in align_steps(sorted(a.steps, key=_number), sorted(b.steps, key=_number)):
        step_a = None if sa is None else sa.step
        step_b = None if sb is None else sb.step
        entry = StepDiff(
            step=step_a if step_a is not None else step_b if step_b is not None else 0,
            step_a=step_a,
            step_b=step_b,
            writes_a=_writes(sa),
            writes_b=_writes(sb),
            next_a=_next(sa),
            next_b=_next(sb),
            facts_differ=(sa.facts if sa else None) != (sb.facts if sb else None),
        )
        if (
            entry.writes_a != entry.writes_b
            or entry.next_a != entry.next_b
            or entry.facts_differ
            or (step_a == step_b == 0 and sa and sb and sa.snapshot != sb.snapshot)
        ):
            out.append(entry)
    return RunDiff(
        run_a=a.run.run_id,
        run_b=b.run.run_id,
        steps=tuple(out),
        status_a=a.run.status,
        status_b=b.run.status,
    )


# --------------------------------------------------------------------------- regression suite
#
# Recorded runs as a regression suite: each cassette replayed against a new graph version
# (``replay(cassette, graph=new)``, see ``runtime._versions``) becomes ``identical`` (the new
# graph reproduces the record), ``changed`` (it runs to the end, differing where the graph
# changed: the regions, the final-state diff, a score if asked) or ``broken`` (the replay
# failed: a changed region needs a service it was not given, a node raised, the cassette is
# damaged). ``stargraph check`` runs it over many cassettes in parallel processes.


Verdict = Literal["identical", "changed", "broken"]
"""What became of a cassette replayed against a new graph version."""


class CassetteCheck(TypedModel):
    """One cassette replayed against a new graph version (see :func:`check_cassette`).

    ``changed_regions``: the regions whose code or IR changed and that the run reached;
    ``regions``: the whole per-region report; ``changes``: how the final state differs from
    the recorded one; ``score``: the score function's value of the new final state (when
    one was given); ``error``: why the replay failed (``broken``)."""

    typed_error = ReplayError

    model_config = ConfigDict(frozen=True)

    path: str
    run_id: str
    verdict: Verdict
    changed_regions: tuple[str, ...] = ()
    regions: tuple[RegionReport, ...] = ()
    changes: tuple[str, ...] = ()
    score: float | None = None
    error: str | None = None
    seconds: float = 0.0
    recorded: bool = False


def _regions(cassette: Any, graph: CompiledGraph[Any], where: str) -> dict[str, str]:
    carried: dict[str, str] = dict(getattr(cassette, "regions", None) or {})
    if carried:
        return carried
    if cassette.run.graph_hash == graph.graph_hash:
        # A cassette from before region hashes, of this very graph: nothing changed.
        return region_hashes(graph.plan)
    raise ReplayError(
        f"cassette {where} carries no region hashes and was recorded by graph "
        f"{cassette.run.graph_hash}, not {graph.graph_hash}; record it again with "
        "export_cassette(..., graph=app) (or stargraph check --record with the graph that "
        "recorded it) before editing the graph",
        run_id=cassette.run.run_id,
    )


def check_cassette(
    path: str | Path,
    graph: CompiledGraph[Any],
    *,
    live: bool = True,
    score: Callable[[dict[str, Any]], float] | None = None,
    key: bytes | str | None = None,
) -> CassetteCheck:
    """Replay the cassette at ``path`` against ``graph`` and say what became of it.

    ``live``: changed regions run with ``graph``'s services (else a call they make breaks
    the check). ``score``: called with the new final state (JSON) of a cassette that ran to
    the end. ``key``: the cassette signing key, as for ``load_cassette``."""
    started = time.perf_counter()
    where = str(path)
    run_id = ""
    try:
        cassette = load_cassette(path, key=key)
        run_id = cassette.run.run_id
        report = replay_across(
            graph.steploop, cassette, _regions(cassette, graph, where), live=live
        )
    except StargraphError as exc:
        return CassetteCheck(
            path=where,
            run_id=run_id,
            verdict="broken",
            error=f"{type(exc).__name__}: {exc}",
            seconds=time.perf_counter() - started,
        )
    return _verdict(where, report, score, started)


def _verdict(
    where: str,
    report: ReplayReport,
    score: Callable[[dict[str, Any]], float] | None,
    started: float,
) -> CassetteCheck:
    value = None if score is None else float(score(report.final))
    return CassetteCheck(
        path=where,
        run_id=report.run_id,
        verdict="identical" if report.identical else "changed",
        changed_regions=report.changed_regions,
        regions=report.regions,
        changes=report.changes,
        score=value,
        seconds=time.perf_counter() - started,
    )


def check_cassettes(
    paths: Iterable[str | Path],
    graph: CompiledGraph[Any],
    *,
    live: bool = True,
    score: Callable[[dict[str, Any]], float] | None = None,
    key: bytes | str | None = None,
) -> list[CassetteCheck]:
    """:func:`check_cassette` for each of ``paths``, in this process, in order (``stargraph
    check`` spreads them over processes)."""
    return [check_cassette(p, graph, live=live, score=score, key=key) for p in paths]


def record_again(
    path: str | Path, graph: CompiledGraph[Any], *, key: bytes | str | None = None
) -> Path:
    """Refresh the cassette at ``path``: run ``graph`` live from the cassette's recorded
    input (same run id) and write the new recording over it, with ``graph``'s region
    hashes. What ``stargraph check --record`` does to the cassettes whose changes are
    accepted; every model call of the run is made again."""
    cassette = load_cassette(path, key=key)
    first = min(cassette.steps, key=lambda s: s.step)
    snapshot = first.snapshot or {}
    store = MemoryStore()
    app = graph.with_store(store)
    fields = app.plan.channels
    app.invoke({k: v for k, v in snapshot.items() if k in fields}, run_id=cassette.run.run_id)
    return export_cassette(store, cassette.run.run_id, path, key=key, graph=app)
