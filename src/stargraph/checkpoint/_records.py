"""What a checkpoint store keeps: runs, committed steps, pending writes and the call journal.

All records are frozen pydantic models with JSON-only payloads, so any store can serialise
them (SQLite and PostgreSQL keep them as JSON blobs; the in-memory store keeps the objects).
NaN and +/-infinity are written as the JSON extensions ``NaN``/``Infinity``/``-Infinity``
(pydantic's ``ser_json_inf_nan="constants"``, which its JSON parser reads back), so a float
comes back as the same float from every store instead of as ``null``.

A step record stores the *raw writes* of the step's tasks (in merge order), not the merged
state: state at step ``k`` is the latest snapshot at or before ``k`` with the writes of the
later steps merged through the graph's reducers. That keeps a 1,000-step run that appends to a
list linear in size instead of quadratic; a full snapshot every few steps keeps reads fast.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from stargraph._text import lone_surrogate
from stargraph._typed import TypedModel
from stargraph._unchecked import every_field, unchecked
from stargraph.errors import (
    CheckpointError,
    CorruptCheckpointError,
    RunNotFoundError,
    ThreadBusyError,
)

# What stargraph.checkpoint re-exports (it star-imports this module). The helpers the
# stores share (check_text, iso_now, clip_error, ...) are imported by name.
__all__ = [
    "JournalEntry",
    "PendingWrite",
    "RunOwner",
    "RunRecord",
    "RunStatus",
    "StepRecord",
    "StepValues",
    "TaskRecord",
    "WriteRecord",
]

RunStatus = Literal[
    "pending", "running", "interrupted", "done", "halted", "failed", "cancelled", "orphaned"
]
"""What a run is doing. ``done``: the graph reached its end (nothing left scheduled), or a
success rule (a ``finish`` decision, e.g. ``termination/done``) ended it; ``stopped_by`` then
names that rule. ``halted``: a rule's ``halt`` decision stopped it before the end (an
exhausted error budget, ``max_steps``, a guard rule); ``stopped_by`` names the rule and
``stop_reason`` says why. Both are final: there is nothing to resume (fork an earlier step
instead). ``pending``: a fork created at a stored step that nobody has continued yet;
``resume(run_id)`` starts it. ``cancelled``: it was asked to stop and stopped at a step
boundary (``last_step`` is the step reached, ``stopped_by`` says what cancelled it); it
resumes like a failed run. ``orphaned`` is never stored: a store reports a ``running`` run as
``orphaned`` when the owner of its lease is gone (its process died, it stopped at once on a
second signal, or its heartbeat stopped for longer than the lease); such a run resumes at
once. A ``running`` run without an owner (written before leases) is resumable too."""

STORED_STATUSES: Final = frozenset(
    {"pending", "running", "interrupted", "done", "halted", "failed", "cancelled"}
)
"""The statuses a store keeps (``set_status`` / ``commit_step`` take only these)."""

ENDED_STATUSES: Final = frozenset({"done", "halted"})
"""The statuses of a run that ended: it resumes no more, and its lease is given up by the
commit of its last step (``commit_step(status=...)``) as by ``set_status``."""

MAX_ERROR_CHARS: Final = 16_000
"""A run's stored ``error`` is cut to this many characters (head and tail are kept)."""

_FROZEN = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")


def describe_outcome(status: str, stopped_by: str | None, stop_reason: str | None) -> str:
    """:meth:`RunRecord.outcome` of a run's status fields (also what a ``RunFinished``
    event carries)."""
    if status in ENDED_STATUSES and stopped_by:
        reason = f": {stop_reason}" if stop_reason else ""
        return f"{status} by rule {stopped_by}{reason}"
    if status == "pending":
        return "pending (a fork never continued; resume it to start it)"
    return status


def clip_error(text: str | None) -> str | None:
    """``text`` cut to :data:`MAX_ERROR_CHARS`, keeping its head and tail and saying how many
    characters were cut: a 20 MB exception message would otherwise be stored (and shown by
    every ``get_run``) whole.

    >>> clipped = clip_error("x" * 20_000)
    >>> len(clipped) < 16_000, clipped.splitlines()[1]
    (True, '[... 4,100 characters cut ...]')
    """
    if text is None or len(text) <= MAX_ERROR_CHARS:
        return text
    keep = (MAX_ERROR_CHARS - 100) // 2
    cut = len(text) - 2 * keep
    return f"{text[:keep]}\n[... {cut:,} characters cut ...]\n{text[-keep:]}"


# The whole second last formatted, and its text: the stores stamp several records per run,
# and datetime's isoformat costs ten times more than finishing this prefix.
_SECOND: list[tuple[int, str]] = [(-1, "")]


def _prefix(second: int) -> str:
    """``second`` as ISO text without its offset (``2025-11-27T07:53:20``)."""
    cached, prefix = _SECOND[0]
    if cached != second:
        prefix = datetime.fromtimestamp(second, UTC).isoformat()[:-6]
        _SECOND[0] = (second, prefix)
    return prefix


def iso_at(epoch: float) -> str:
    """``epoch`` (``time.time()``) as UTC ISO text, exactly as
    ``datetime.fromtimestamp(epoch, UTC).isoformat()`` writes it.

    >>> iso_at(1_764_230_000.25), iso_at(1_764_230_000.0)
    ('2025-11-27T07:53:20.250000+00:00', '2025-11-27T07:53:20+00:00')
    """
    # As datetime does it: the fraction, in microseconds rounded half to even.
    fraction, whole = math.modf(epoch)
    second, micros = int(whole), round(fraction * 1e6)
    if micros >= 1_000_000:
        second, micros = second + 1, micros - 1_000_000
    elif micros < 0:
        second, micros = second - 1, micros + 1_000_000
    prefix = _prefix(second)
    return f"{prefix}.{micros:06d}+00:00" if micros else f"{prefix}+00:00"


# The second iso_now last stamped: its first nanosecond, the next second's, and its text.
# Every step commit stamps the run: a nanosecond clock read within that second then needs
# one subtraction of small integers instead of dividing a 61-bit one.
_NOW: list[tuple[int, int, str]] = [(0, 0, "")]
# "000" to "999": two look-ups write the microseconds, at a third of a padded format's cost.
_DIGITS: Final = tuple(f"{n:03d}" for n in range(1000))


def iso_now() -> str:
    """The current UTC time as ISO text (``datetime.now(UTC).isoformat()``)."""
    ns = time.time_ns()
    start, end, prefix = _NOW[0]
    if not start <= ns < end:
        second = ns // 1_000_000_000
        start = second * 1_000_000_000
        prefix = _prefix(second)
        _NOW[0] = (start, start + 1_000_000_000, prefix)
    micros = (ns - start) // 1000  # datetime.now() truncates too
    if not micros:
        return f"{prefix}+00:00"
    millis = micros // 1000
    return f"{prefix}.{_DIGITS[millis]}{_DIGITS[micros - millis * 1000]}+00:00"


def unicode_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as UTF-8 (a lone surrogate, and where), or ``None``."""
    at = lone_surrogate(text)
    return None if at is None else f"it holds a lone surrogate {text[at]!r} at index {at}"


def check_text(run_id: str, /, **texts: str | None) -> None:
    """Raise ``CheckpointError`` naming the first of ``texts`` that is not valid Unicode."""
    for what, text in texts.items():
        problem = None if text is None else unicode_problem(text)
        if problem is not None:
            raise CheckpointError(
                f"cannot store {what.replace('_', ' ')} {text!r} of run {run_id!r}: {problem}; "
                "stored text must be valid Unicode (UTF-8), so use a plain string",
                run_id=run_id,
            )


def check_status(run_id: str, status: str) -> None:
    """Refuse a status no store keeps."""
    if status not in STORED_STATUSES:
        raise CheckpointError(
            f"run {run_id!r}: unknown status {status!r}; use one of {sorted(STORED_STATUSES)}",
            run_id=run_id,
        )


def check_thread(run: RunRecord) -> None:
    """Refuse a run record that names a thread without a turn, or a turn without a thread."""
    if (run.thread_id is None) != (run.turn is None):
        raise CheckpointError(
            f"run {run.run_id!r} has thread_id={run.thread_id!r} and turn={run.turn!r}; a "
            "turn of a thread needs both, a run on its own neither",
            run_id=run.run_id,
        )
    if run.thread_id is not None:
        check_text(run.run_id, thread_id=run.thread_id)


def turn_taken(run: RunRecord, holder: str | None = None) -> ThreadBusyError:
    """The error for a second run created as the same turn of the same thread."""
    by = f" (run {holder!r})" if holder else ""
    return ThreadBusyError(
        f"thread {run.thread_id!r} already has a turn {run.turn}{by}, so run {run.run_id!r} "
        "cannot be that turn: another caller started it at the same moment; let that turn "
        "finish, then start the next one",
        run_id=run.run_id,
    )


def missing(run_id: str, where: str) -> RunNotFoundError:
    """The error for a run ``where`` (a file, a schema, this store) does not hold."""
    return RunNotFoundError(
        f"no run {run_id!r} in {where}; list runs with store.list_runs()", run_id=run_id
    )


_ModelT = TypeVar("_ModelT", bound=BaseModel)


def trusted_fields(cls: type[_ModelT], fields: dict[str, Any]) -> _ModelT:
    """A record built without validation from fields its writer knows to be valid and of
    the declared types (tuples where a tuple is declared): the dict becomes the record's
    own (the caller hands it over). A field it does not name takes its default, as
    validation would give it. The executor builds several records per step, and validating
    what it has just built costs ten times more than this."""
    every = every_field(cls)
    if fields.keys() == every:
        return unchecked(cls, fields, every)
    given = set(fields)
    for name, info in cls.model_fields.items():
        if name not in given and not info.is_required():
            fields[name] = info.get_default(call_default_factory=True)
    return unchecked(cls, fields, given)


class TaskRecord(TypedModel):
    """A scheduled node execution: ``(node, index)`` plus a ``Send`` payload, if any."""

    typed_error = CorruptCheckpointError

    model_config = _FROZEN

    node: str
    index: int = 0
    payload: dict[str, Any] | None = None


class WriteRecord(TypedModel):
    """The validated writes of one finished task, as JSON."""

    typed_error = CorruptCheckpointError

    model_config = _FROZEN

    node: str
    index: int = 0
    writes: dict[str, Any]


class JournalEntry(TypedModel):
    """One recorded non-deterministic call made by a task (clock, id, random, ``ctx.once``,
    an interrupt's response; later LLM and tool calls), served back on re-execution."""

    typed_error = CorruptCheckpointError

    model_config = _FROZEN

    step: int
    node: str
    index: int = 0
    seq: int = Field(ge=0, description="Position of the call within the task execution.")
    kind: str
    key: str = Field(default="", description="What was called: a name, a model, a tool id.")
    value: Any = None
    fingerprint: str = Field(default="", description="sha256 of the canonical request.")
    request: Any = Field(
        default=None,
        description="The request, to explain a divergence. When ``base`` is set, only what is "
        "new since that request.",
    )
    base: str = Field(
        default="",
        description="As stored: the fingerprint of the earlier request of the same "
        "conversation that ``request`` extends (empty: ``request`` is whole). "
        "``Recording.from_store`` and loaded cassettes hold whole requests.",
    )


class StepRecord(TypedModel):
    """One committed step (step 0 is the input). Appended once, never updated."""

    typed_error = CorruptCheckpointError

    model_config = _FROZEN

    step: int = Field(ge=0)
    writes: tuple[WriteRecord, ...] = ()
    snapshot: dict[str, Any] | None = Field(
        default=None,
        description="Channel values after this step (step 0 and every Nth), but those named in "
        "``carried``.",
    )
    carried: dict[str, int] = Field(
        default_factory=dict,
        description="Append-only channels a snapshot leaves out, each with the step whose "
        "snapshot holds its value in full: its value here is that one with the writes of every "
        "later step up to this one appended, so a snapshot never copies a growing list again.",
    )
    next: tuple[TaskRecord, ...] = ()
    joins: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="Join edge index -> sources seen since it last fired."
    )
    facts: Any = Field(default=None, description="Rule engine snapshot after this step.")
    facts_from: int | None = Field(
        default=None,
        ge=0,
        description="As stored: the earlier step whose record holds this step's rule facts "
        "(they did not change since; ``facts`` is then None). Never before the last snapshot "
        "step. ``get_steps`` of every store gives the facts themselves back, this ``None``.",
    )
    decision: dict[str, Any] | None = Field(
        default=None,
        description="The rule decision taken at this step (kind, rule, targets, reason), "
        "when it was not 'continue'.",
    )
    attempts: dict[str, int] = Field(
        default_factory=dict, description="'node/index' -> attempts used, when more than one."
    )
    calls: tuple[JournalEntry, ...] = Field(
        default=(),
        description="Every recorded call of the step's tasks (model, tools, clock, ids): the "
        "replay record.",
    )
    created_ms: int = Field(
        default=0,
        description="Commit time, milliseconds since the Unix epoch (an int: it is stored with "
        "every step, and an ISO string would be a third of a small step's bytes).",
    )
    as_node: str | None = Field(
        default=None,
        description="For an update step (``fork``/``resume`` with ``update=`` and "
        "``as_node=``): the node the update was routed as, whose edges and rules chose the "
        "next tasks.",
    )


@dataclass(slots=True)
class StepValues:
    """One step as the runtime commits it: the fields of its :class:`StepRecord` as plain
    values it made itself (JSON data, records), each write as ``(node, index, writes)``.
    Treat it as immutable. A store that declares the feature ``"step_values"`` takes it in
    ``commit_step`` in place of a record and gives the record back (:meth:`record`) when
    the step is read, so a step nobody reads is never built; any other store is given the
    record."""

    step: int
    writes: tuple[tuple[str, int, dict[str, Any]], ...]
    snapshot: dict[str, Any] | None
    carried: dict[str, int]
    next: tuple[TaskRecord, ...]
    joins: dict[str, tuple[str, ...]]
    facts: Any
    facts_from: int | None
    decision: dict[str, Any] | None
    attempts: dict[str, int]
    calls: tuple[JournalEntry, ...]
    created_ms: int
    as_node: str | None

    def record(self) -> StepRecord:
        """The step's record (built without validation: the runtime made every value, of
        its declared type)."""
        if len(self.writes) == 1:  # the common step: no generator
            ((node, index, dumped),) = self.writes
            writes: tuple[WriteRecord, ...] = (
                trusted_fields(WriteRecord, {"node": node, "index": index, "writes": dumped}),
            )
        else:
            writes = tuple(
                trusted_fields(WriteRecord, {"node": n, "index": i, "writes": w})
                for n, i, w in self.writes
            )
        return trusted_fields(
            StepRecord,
            {
                "step": self.step,
                "writes": writes,
                "snapshot": self.snapshot,
                "carried": self.carried,
                "next": self.next,
                "joins": self.joins,
                "facts": self.facts,
                "facts_from": self.facts_from,
                "decision": self.decision,
                "attempts": self.attempts,
                "calls": self.calls,
                "created_ms": self.created_ms,
                "as_node": self.as_node,
            },
        )


def resolve_facts(
    run_id: str, steps: list[StepRecord], held: Callable[[int], StepRecord | None]
) -> list[StepRecord]:
    """``steps`` (ordered, of one run) with each reference to another step's rule facts
    (``facts_from``) replaced by those facts, as every reader of a store expects them.

    A step referred to outside ``steps`` (a range read starting after it) is asked of
    ``held`` (its record as stored, or ``None`` if the store lacks it: a damaged run).
    The list is returned as it is when no step refers (every run without rules)."""
    if not any(s.facts_from is not None for s in steps):
        return steps
    by_step = {s.step: s for s in steps}
    facts_at: dict[int, Any] = {}  # the facts of each step referred to, once checked
    out: list[StepRecord] = []
    for step in steps:
        at = step.facts_from
        if at is None:
            out.append(step)
            continue
        if at not in facts_at:
            holder = by_step.get(at)
            if holder is None and at < step.step:
                holder = held(at)
            facts_at[at] = _holder(run_id, step, at, holder).facts
        # A copy of the record's fields, as model_copy makes it (unvalidated) but cheaper.
        fields = dict(step.__dict__)
        fields.update(facts=facts_at[at], facts_from=None)
        out.append(trusted_fields(StepRecord, fields))
    return out


def _holder(run_id: str, step: StepRecord, at: int, found: StepRecord | None) -> StepRecord:
    """The step ``at`` that ``step`` takes its rule facts from, which must hold them."""
    if found is None or found.facts is None or at >= step.step:
        raise CorruptCheckpointError(
            f"run {run_id!r} step {step.step} takes its rule facts from step {at}, which "
            f"{'does not hold them' if found is not None else 'is missing'}; the checkpoint "
            "is damaged; fork the run from an earlier step",
            run_id=run_id,
            step=step.step,
        )
    return found


class RunOwner(TypedModel):
    """Who holds a run's lease: one invoke/resume in one process, until the run is
    interrupted, finishes or fails. ``token`` is unique per lease (status changes and commits
    compare-and-set on it); ``host``/``pid``/``started_at`` name the process,
    ``process_start`` (Linux clock ticks since boot) tells a live owner from a later process
    that reused its pid. The owner renews the lease every few seconds; after ``lease_s``
    without a heartbeat it lapses."""

    typed_error = CorruptCheckpointError

    model_config = _FROZEN

    token: str
    host: str
    pid: int
    started_at: str = Field(default="", description="When the owner process started (ISO).")
    process_start: int | None = None
    lease_s: float = Field(default=30.0, gt=0)

    def describe(self) -> str:
        """``host:pid (since <time>)``, for messages."""
        since = f" (process started {self.started_at})" if self.started_at else ""
        return f"{self.host}:{self.pid}{since}"


class RunRecord(TypedModel):
    """A run's identity and status. ``last_step`` is the newest committed step."""

    typed_error = CorruptCheckpointError

    model_config = _FROZEN

    run_id: str
    graph_name: str
    graph_hash: str
    code_hash: str
    status: RunStatus = "running"
    last_step: int = 0
    parent_run_id: str | None = None
    parent_step: int | None = None
    created_at: str = ""
    updated_at: str = ""
    error: str | None = None
    stopped_by: str | None = Field(
        default=None,
        description="The rule that ended the run (``halted``, or ``done`` by a success "
        "rule), or what cancelled it (a signal, cancel()).",
    )
    stop_reason: str | None = Field(
        default=None,
        description="Why the rule ``stopped_by`` ended the run (its decision's reason, e.g. "
        "``error_budget_exhausted``).",
    )
    interrupt: Any = Field(default=None, description="What an interrupted run waits on.")
    owner: RunOwner | None = Field(
        default=None, description="Who holds the run's lease (None: nobody runs it)."
    )
    lease_expires: str | None = Field(
        default=None,
        description="When the owner's lease lapses without a heartbeat (ISO; set by the store).",
    )
    thread_id: str | None = Field(
        default=None,
        description="The thread this run is a turn of (``invoke(..., thread_id=...)``); None "
        "for a run on its own.",
    )
    turn: int | None = Field(
        default=None,
        ge=1,
        description="Which turn of its thread the run is, from 1 (None outside a thread). A "
        "store keeps one run per thread and turn.",
    )

    def outcome(self) -> str:
        """The status as a person reads it, with the rule that ended the run and why:
        ``halted by rule termination/error_budget: error_budget_exhausted``, ``done by rule
        termination/done: done``, ``pending (a fork never continued; resume it to start
        it)``, or the bare status.

        >>> RunRecord(run_id="r", graph_name="g", graph_hash="h", code_hash="c",
        ...           status="halted", stopped_by="guard/blocked", stop_reason="spam").outcome()
        'halted by rule guard/blocked: spam'
        """
        return describe_outcome(self.status, self.stopped_by, self.stop_reason)


class PendingWrite(TypedModel):
    """Writes of a task that finished in a step whose siblings had not finished yet.

    Saved at once, so a crash before the step commits does not re-run the finished task.
    """

    typed_error = CorruptCheckpointError

    model_config = _FROZEN

    step: int
    node: str
    index: int = 0
    writes: dict[str, Any]
