"""The run context handed to nodes that accept a second ``ctx`` argument.

All non-determinism a node needs (time, ids, random numbers) comes from one injectable
:class:`Entropy` source, so a test can pin it and the replay engine can record it.
"""

from __future__ import annotations

import hashlib
import logging
import random as _random
import threading
import uuid as _uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from stargraph._unchecked import unchecked

# Imported here, not in the functions that use them: an import statement runs the import
# machinery at every call, and every journaled call (two per ReAct step) reaches both.
from stargraph.checkpoint._records import JournalEntry
from stargraph.ir._canonical import content_hash
from stargraph.runtime._protocols import is_positional

if TYPE_CHECKING:
    from stargraph.errors import _RunAt
    from stargraph.runtime._recorded import ReplaySource
    from stargraph.runtime._secrets import SecretMask

__all__ = [
    "AttemptFence",
    "Conversation",
    "Conversations",
    "Entropy",
    "GraphInterrupt",
    "RunContext",
    "SeededEntropy",
    "ServiceMap",
    "SystemEntropy",
    "TaskJournal",
]

T = TypeVar("T")

_log = logging.getLogger("stargraph")
# The fields a recorded call sets (``base`` is the store's): its records' fields set, shared.
_RECORDED = {"step", "node", "index", "seq", "kind", "key", "value", "fingerprint", "request"}


class Conversation:
    """What one task position of a run (a node and its index) keeps between its steps about
    its conversation with a model, so that each step works in proportion to what is new
    rather than to the whole conversation.

    Derived data only: nothing here is recorded, and a miss costs time, never a different
    result (a resumed run starts with none). Each slot has one owner - ``request`` the
    journaled chat model's request encoder, ``transcript`` and ``head`` the ReAct node - that
    replaces its value whole and never changes it in place, so overlapping attempts of one
    task (a retry beside an abandoned attempt) need no lock: one of them can only miss.
    """

    __slots__ = ("head", "request", "transcript")

    def __init__(self) -> None:
        self.request: Any = None
        self.transcript: Any = None
        self.head: Any = None


Conversations = dict[tuple[str, int], Conversation]
"""A run's conversations, by task position ``(node, index)``."""


def conversation_of(conversations: Conversations | None, node: str, index: int) -> Conversation:
    """The conversation of ``(node, index)`` kept in ``conversations``, made on first use (a
    new one, kept nowhere, when there is no run to keep it)."""
    if conversations is None:
        return Conversation()
    found = conversations.get((node, index))
    if found is None:
        found = conversations[(node, index)] = Conversation()
    return found


@runtime_checkable
class Entropy(Protocol):
    """Where clocks, ids and random numbers come from."""

    def now(self) -> datetime:
        """The current time (timezone-aware, UTC)."""
        ...

    def uuid(self) -> str:
        """A fresh unique id."""
        ...

    def random(self) -> float:
        """A float in [0, 1)."""
        ...


class SystemEntropy:
    """The real clock, ``uuid4`` and the OS-seeded ``random`` module."""

    def __init__(self) -> None:
        # Seeding a Random from the OS costs ~10 µs; most runs never draw, so do it lazily.
        self._rng: _random.Random | None = None

    def now(self) -> datetime:
        """``datetime.now(UTC)``."""
        return datetime.now(UTC)

    def uuid(self) -> str:
        """``uuid4()`` as a string."""
        return str(_uuid.uuid4())

    def random(self) -> float:
        """A float from a privately owned ``random.Random``."""
        if self._rng is None:
            self._rng = _random.Random()
        return self._rng.random()


class SeededEntropy:
    """Deterministic entropy for tests, keyed by *where* a value is drawn.

    Inside a run, ``ctx.now()``, ``ctx.uuid()`` and ``ctx.random()`` draw at a position
    (run, step, node, index, draw number), and a seeded run gives the same value at the same
    position in every process - so an interrupted-and-resumed run draws exactly what an
    uninterrupted one does. ``now()`` is the start time plus the step in seconds (plus the
    draw number in milliseconds). The plain ``now()``/``uuid()``/``random()`` methods draw
    sequentially, for use outside a run.
    """

    def __init__(self, seed: int = 0, start: datetime | None = None) -> None:
        self.seed = seed
        self.start = start or datetime(2026, 1, 1, tzinfo=UTC)
        """The time ``now_at`` counts from (and the first sequential ``now()``)."""
        self._rng = _random.Random(seed)
        self._now = self.start

    def _bits(self, position: str) -> int:
        digest = hashlib.sha256(f"{self.seed}\0{position}".encode()).digest()
        return int.from_bytes(digest[:16], "big")

    def now_at(self, position: str, step: int, draw: int) -> datetime:
        """The start time plus ``step`` seconds and ``draw`` milliseconds."""
        del position
        return self.start + timedelta(seconds=step, milliseconds=draw)

    def uuid_at(self, position: str) -> str:
        """A UUID derived from the seed and the position."""
        return str(_uuid.UUID(int=self._bits(position), version=4))

    def random_at(self, position: str) -> float:
        """A float in [0, 1) derived from the seed and the position."""
        return (self._bits(position) >> 75) / float(1 << 53)

    def now(self) -> datetime:
        """The start time plus one second per previous call."""
        current = self._now
        self._now = current + timedelta(seconds=1)
        return current

    def uuid(self) -> str:
        """A UUID built from the seeded generator."""
        return str(_uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def random(self) -> float:
        """A float from the seeded generator."""
        return self._rng.random()


def entropy_spec(entropy: Entropy) -> dict[str, Any] | None:
    """The JSON form in which a run's entropy source travels to a worker process, read back
    by :func:`entropy_from_spec`: a :class:`SeededEntropy` as its seed and start time (all
    a worker needs to draw by position what this process would), a :class:`SystemEntropy`
    as ``{}``. ``None`` for any other source, a subclass of those two included: it may draw
    differently, and no worker could rebuild it."""
    if type(entropy) is SeededEntropy:
        return {"seed": entropy.seed, "start": entropy.start.isoformat()}
    if type(entropy) is SystemEntropy:
        return {}
    return None


def entropy_from_spec(spec: dict[str, Any] | None) -> Entropy:
    """The entropy source :func:`entropy_spec` gave ``spec`` for (a :class:`SystemEntropy`
    for ``{}`` or ``None``)."""
    if not spec:
        return SystemEntropy()
    return SeededEntropy(spec["seed"], datetime.fromisoformat(spec["start"]))


class GraphInterrupt(BaseException):
    """Raised by ``ctx.interrupt()`` to stop the run at an interrupt; the executor catches it.

    It derives from ``BaseException`` so that a node's own ``except Exception`` cannot
    swallow it by accident.
    """

    def __init__(self, payload: Any, seq: int) -> None:
        super().__init__(payload)
        self.payload = payload
        self.seq = seq


class AttemptFence:
    """What the attempts of one task share when they may overlap.

    A node with ``timeout_s`` runs each attempt on a thread that Python cannot stop: when an
    attempt times out, its thread is abandoned and a retry starts while it may still run.
    Each attempt gets its own :class:`TaskJournal` handle (its *epoch*); abandoning an
    attempt revokes its handle, so the old thread's next journaled call raises
    :class:`~stargraph.errors.AttemptAbandonedError` instead of repeating an effect the retry
    already made. A call the abandoned thread had already *begun* - an effect under way when
    the timeout struck - is finished and recorded: ``gate`` makes the retry wait for it and
    be served its result, so the effect is neither lost nor made twice. Once the task has
    finished, ``seal()`` refuses every late record, so no row reaches a committed step.
    """

    __slots__ = ("gate", "lock", "sealed")

    def __init__(self) -> None:
        # Held for a whole journaled call (lookup, effect, record) by the attempt making it;
        # re-entrant because an effect may itself make a journaled call.
        self.gate = threading.RLock()
        # Orders a record against seal(): no row is written after the task has finished.
        self.lock = threading.Lock()
        self.sealed = False

    def seal(self) -> None:
        """The task finished: from now on every record of any of its attempts is refused."""
        with self.lock:
            self.sealed = True


@dataclass(slots=True, kw_only=True, eq=False, repr=False)
class TaskJournal:
    """The recorded calls of one task execution (clock, ids, ``once``, model and tool calls,
    interrupt responses), as seen by one *attempt* of it.

    Live, each call is recorded as it happens (persisted at once through ``persist``), and a
    re-execution of the same task - after a crash, a retry or an interrupt - is served the
    recorded values in order, so effects are not repeated. In *replay* mode every call must
    come from the record: a call past its end raises :class:`ReplayMissError`, a call whose
    request differs raises :class:`ReplayDivergenceError` with both fingerprints and a diff.

    Every attempt of a task has its own handle over the shared ``entries``: a retry gets a
    new one, and the abandoned one is revoked (:meth:`revoke`), after which its calls raise
    :class:`~stargraph.errors.AttemptAbandonedError` (see :class:`AttemptFence`).
    """

    step: int
    node: str
    index: int
    entries: list[JournalEntry]
    persist: Callable[[JournalEntry], None] | None
    replay: bool = False
    run_id: str | None = None
    fence: AttemptFence | None = None
    attempt: int = 1
    # A journal of a run without a store, made only so that services bound to it
    # reach the live stream: nothing keeps it, so it cannot interrupt the run either.
    ephemeral: bool = False
    # In replay: where the recordings of the run's child runs are, for a subgraph node
    # to replay its child from (handed down from the replayed run, never looked up).
    source: ReplaySource | None = None
    seq: int = field(default=0, init=False)
    revoked: bool = field(default=False, init=False)
    # Where a service streaming a model's answer hands each piece of text as it
    # arrives (stream mode "messages"); None when nobody streams the run's messages.
    # The recorded call stays the whole answer, so replay does not depend on it.
    tokens: Callable[[str], None] | None = field(default=None, init=False)
    # The run's registered secrets, masked in each record (and in the value the node is
    # handed, so a resumed run sees what the live one saw); None: recorded as they are.
    mask: SecretMask | None = None
    # The run's conversations (see Conversation); None: nothing is kept between steps.
    conversations: Conversations | None = None

    @property
    def conversation(self) -> Conversation:
        """What this task position keeps between steps about its model conversation."""
        return conversation_of(self.conversations, self.node, self.index)

    def restart(self) -> None:
        """Serve the journal again from its first call (same attempt)."""
        self.seq = 0

    def revoke(self) -> None:
        """This attempt was abandoned: its later calls raise and record nothing."""
        self.revoked = True

    def where(self) -> _RunAt:
        """Where this task runs, as the keywords that locate a :class:`RunError`."""
        return {"run_id": self.run_id, "step": self.step, "node": self.node}

    def _abandoned(self, kind: str, key: str) -> Exception:
        from stargraph.errors import AttemptAbandonedError

        return AttemptAbandonedError(
            f"attempt {self.attempt} of node {self.node!r} at step {self.step} of run "
            f"{self.run_id!r} was abandoned (it outlived its timeout and another attempt took "
            f"over), so its call {kind}({key!r}) was refused and nothing was recorded; make "
            "the node stop soon after its timeout, or raise timeout_s",
            **self.where(),
        )

    def call(
        self,
        kind: str,
        key: str,
        compute: Callable[[], Any],
        *,
        request: Any = None,
        fingerprint: str | None = None,
    ) -> Any:
        """The recorded value of call number ``seq`` if there is one, else ``compute()``
        (recorded). ``request`` (JSON) is fingerprinted (unless its ``fingerprint`` is given:
        ``content_hash(request)``, computed by a caller that can do it faster) and compared
        with the record.

        A recorded call of another kind, key or request means the node is not deterministic
        given its inputs (or the graph changed); that is reported, never papered over.
        """
        if self.revoked:
            raise self._abandoned(kind, key)
        fence = self.fence
        if fence is None:
            seq, fingerprint, hit = self._lookup(kind, key, request, fingerprint)
            if hit is not None:
                return hit.value
            return self._record(
                seq, kind, key, fingerprint=fingerprint, request=request, value=compute()
            )
        # Attempts may overlap: wait until no other attempt is inside a call (an abandoned
        # one may be finishing an effect), so its result is read here, not made again.
        with fence.gate:
            if self.revoked:
                raise self._abandoned(kind, key)
            seq, fingerprint, hit = self._lookup(kind, key, request, fingerprint)
            if hit is not None:
                return hit.value
            value = compute()
            # Recorded even when this attempt was abandoned meanwhile: the effect happened,
            # and the retry waiting on the gate must be served it rather than repeat it.
            value = self._record(
                seq, kind, key, fingerprint=fingerprint, request=request, value=value
            )
            if self.revoked:
                raise self._abandoned(kind, key)
            return value

    async def acall(
        self,
        kind: str,
        key: str,
        compute: Callable[[], Awaitable[Any]],
        *,
        request: Any = None,
        fingerprint: str | None = None,
    ) -> Any:
        """Async :meth:`call`: ``compute`` is awaited only when there is no record."""
        if self.revoked:
            raise self._abandoned(kind, key)
        seq, fingerprint, hit = self._lookup(kind, key, request, fingerprint)
        if hit is not None:
            return hit.value
        value = await compute()
        return self._record(seq, kind, key, fingerprint=fingerprint, request=request, value=value)

    def _lookup(
        self, kind: str, key: str, request: Any, known: str | None = None
    ) -> tuple[int, str, JournalEntry | None]:
        seq = self.seq
        self.seq += 1
        if known is not None:
            fingerprint = known
        else:
            fingerprint = "" if request is None else _fingerprint(request)
        if seq < len(self.entries):
            entry = self.entries[seq]
            if entry.kind != kind or entry.key != key or entry.fingerprint != fingerprint:
                raise self._divergence(
                    seq, kind, key, fingerprint=fingerprint, request=request, entry=entry
                )
            return seq, fingerprint, entry
        if self.replay:
            from stargraph.errors import ReplayMissError

            raise ReplayMissError(
                f"replay of node {self.node!r} at step {self.step}: call #{seq} {kind}({key!r}) "
                f"has no recorded stub (the record has {len(self.entries)} calls for this "
                "node execution); the graph now makes more calls than the recorded run did",
                **self.where(),
            )
        return seq, fingerprint, None

    def _record(
        self, seq: int, kind: str, key: str, *, fingerprint: str, request: Any, value: Any
    ) -> Any:
        mask = self.mask
        if mask is not None:
            # After the fingerprint: a replay fingerprints the request it rebuilds, unmasked.
            value = mask.data(value)
            request = mask.data(request)
        fields = {
            "step": self.step,
            "node": self.node,
            "index": self.index,
            "seq": seq,
            "kind": kind,
            "key": key,
            "value": value,
            "fingerprint": fingerprint,
            "request": request,
        }
        if _plain(self, kind, key, fingerprint):
            # The journal's own values (step, node, index, a sequence number from 0, JSON
            # value and request, which the field types take as they are): the record
            # JournalEntry(...) validates into, built without validating them again.
            fields["base"] = ""
            entry = unchecked(JournalEntry, fields, _RECORDED)
        else:
            entry = JournalEntry(**fields)
        fence = self.fence
        if fence is None:
            if self.revoked:
                raise self._abandoned(kind, key)
            if self.persist is not None:
                self.persist(entry)
            self.entries.append(entry)
            return value
        with fence.lock:
            if fence.sealed:
                # The task finished (its step may be committed) while this abandoned attempt
                # was still inside the call: its effect happened but can no longer be recorded.
                _log.warning(
                    "node %r at step %d of run %r: abandoned attempt %d finished %s(%r) after "
                    "the task had completed; the effect happened but is not recorded",
                    self.node,
                    self.step,
                    self.run_id,
                    self.attempt,
                    kind,
                    key,
                )
                raise self._abandoned(kind, key)
            if self.persist is not None:
                self.persist(entry)
            self.entries.append(entry)
        return value

    def _divergence(
        self, seq: int, kind: str, key: str, *, fingerprint: str, request: Any, entry: JournalEntry
    ) -> Exception:
        from stargraph.errors import ReplayDivergenceError

        what = (
            f"node {self.node!r} at step {self.step}, call #{seq}: made {kind}({key!r}) "
            f"[{fingerprint or 'no request'}] but the record has {entry.kind}({entry.key!r}) "
            f"[{entry.fingerprint or 'no request'}]"
        )
        diff = _request_diff(entry.request, request)
        return ReplayDivergenceError(
            what
            + ("; request diff:\n" + diff if diff else "")
            + "\n(a node must make the same calls, with the same requests, in the same order "
            "as the recorded run)",
            **self.where(),
            call_index=seq,
            fingerprint=fingerprint,
            recorded_fingerprint=entry.fingerprint,
        )

    def peek(self, kind: str) -> JournalEntry | None:
        """The recorded entry at the current position if it has this kind (no advance)."""
        if self.revoked:
            raise self._abandoned(kind, "")
        if self.seq < len(self.entries) and self.entries[self.seq].kind == kind:
            return self.entries[self.seq]
        return None


def _plain(journal: TaskJournal, kind: object, key: object, fingerprint: object) -> bool:
    """Whether a call's record is made of values of its fields' exact types (text, and
    integers: a sequence number counts from 0), so that validating them changes nothing."""
    return (
        type(kind) is str
        and type(key) is str
        and type(fingerprint) is str
        and type(journal.node) is str
        and type(journal.step) is int
        and type(journal.index) is int
    )


def _fingerprint(request: Any) -> str:
    return str(content_hash(request))


def _request_diff(recorded: Any, current: Any) -> str:
    """A unified diff of two JSON requests, pretty-printed with sorted keys."""
    import difflib
    import json

    if recorded is None and current is None:
        return ""
    old = json.dumps(recorded, indent=1, sort_keys=True, ensure_ascii=False).splitlines()
    new = json.dumps(current, indent=1, sort_keys=True, ensure_ascii=False).splitlines()
    return "\n".join(difflib.unified_diff(old, new, "recorded", "replayed", lineterm="", n=2))


class ServiceMap(dict[str, Any]):
    """The services a graph was compiled with, as nodes read them: a name it was not given
    is a :class:`~stargraph.errors.MissingServiceError` naming it and how to give it, on
    every path that runs the node (the runtime adds the node, run and step)."""

    __slots__ = ()

    def __missing__(self, key: str) -> Any:
        from stargraph.errors import MissingServiceError

        raise MissingServiceError(
            f"services[{key!r}] was not given to the graph; compile it with "
            f"services={{{key!r}: ...}} (a worker: Worker(db, services=...) or `stargraph "
            "worker --services module:fn`)",
            service=key,
        )


def activation_of(ctx: RunContext) -> int:
    """Which step of its node ``ctx``'s task runs in: 1 for the node's first step in the run,
    2 for its second ... (counted for subgraph nodes only; see ``ChildRunId``)."""
    return ctx._activation


def mark_cache_hit(ctx: RunContext) -> None:
    """Note that ``ctx``'s node execution served its writes from its node cache."""
    hits = ctx._hits
    if hits is not None:
        hits.add((ctx.node, ctx.index))


class RunContext:
    """What a node may know and use about the run it is part of.

    ``idempotency_key`` is stable for one node execution across retries and resumes of the
    same step, so a node can make an external side effect idempotent with it. ``now()``,
    ``uuid()``, ``random()`` and ``once()`` are journaled in durable runs: a re-execution of
    the same step gets the same values and does not repeat a ``once`` effect.

    ``thread_id`` is the thread the run is a turn of (``invoke(..., thread_id=...)``; a
    subgraph's child run has its parent's), ``None`` for a run on no thread.

    ``remaining_steps`` is the run's step budget left after this step (``max_steps`` minus
    ``step``; LangGraph's ``RemainingSteps``): at 0 the run stops with
    :class:`~stargraph.errors.StepLimitExceeded` if anything is still scheduled.
    """

    __slots__ = (
        "_activation",
        "_conversations",
        "_custom",
        "_draws",
        "_feed",
        "_hits",
        "_revoked",
        "config",
        "entropy",
        "events",
        "index",
        "journal",
        "node",
        "path",
        "remaining_steps",
        "run_id",
        "services",
        "step",
        "thread_id",
    )

    def __init__(
        self,
        *,
        run_id: str,
        step: int,
        node: str,
        index: int,
        path: tuple[str, ...],
        config: Mapping[str, Any],
        entropy: Entropy,
        journal: TaskJournal | None = None,
        services: Mapping[str, Any] | None = None,
        events: list[Any] | None = None,
        custom: Callable[[Any], None] | None = None,
        feed: Any = None,
        conversations: Conversations | None = None,
        remaining_steps: int = 2**53 - 1,
        thread_id: str | None = None,
        cache_hits: set[tuple[str, int]] | None = None,
        activation: int = 0,
    ) -> None:
        self.journal = journal
        # Which step of this node (1st, 2nd ...) in the run this is, for a subgraph node's
        # child run id (see activation_of); 0 for the nodes nobody counts.
        self._activation = activation
        self._conversations = conversations
        # The step budget left after this step (max_steps - step), as LangGraph's
        # RemainingSteps counts it: a loop can wind down before StepLimitExceeded.
        self.remaining_steps = remaining_steps
        # The thread this run is a turn of (invoke(..., thread_id=)), or None: what a node
        # keys per-conversation data by. A child run of a subgraph node has its parent's.
        self.thread_id = thread_id
        # Where a cached node's wrapper notes that it served its writes from the cache, for
        # the step's node_finished event and updates item (see mark_cache_hit).
        self._hits = cache_hits
        # Where ctx.emit() hands payloads: the run's live stream in mode "custom", or None.
        self._custom = custom
        # The run's live stream, handed down to the nested run of a subgraph node so that
        # its nodes' custom events and model tokens reach the same consumer.
        self._feed = feed
        self._draws = 0
        self._revoked = False
        # Where a subgraph node puts its child's events; the executor streams them, in task
        # order, before this node's own node_finished event. None when nobody is streaming.
        self.events = events
        # Live objects a node needs but the IR cannot hold (a chat model, a tool arbiter, a
        # database handle), given to compile(services=...); never part of the hash.
        self.services: Mapping[str, Any] = {} if services is None else services
        self.run_id = run_id
        self.step = step
        self.node = node
        self.index = index
        self.path = path
        self.config = config
        self.entropy = entropy

    @property
    def conversation(self) -> Conversation:
        """What this node keeps between its steps about its conversation with a model (see
        :class:`Conversation`): the run holds one per node and index."""
        return conversation_of(self._conversations, self.node, self.index)

    def emit(self, payload: Any) -> None:
        """Hand ``payload`` to whoever streams the run in mode ``"custom"``, at once, as a
        :class:`~stargraph.runtime.CustomEvent` naming this node (progress, partial results).

        It is not recorded and not replayed; when nobody streams the run in that mode it
        does nothing, so a node can call it unconditionally.
        """
        custom = self._custom
        if custom is not None and not self._revoked:
            custom(payload)

    def revoke(self) -> None:
        """This attempt was abandoned (it timed out; a retry took over): from now on its
        ``once``, ``now``, ``uuid``, ``random``, ``record_call`` and ``interrupt``, and the
        journaled services it was given, raise :class:`~stargraph.errors.AttemptAbandonedError`.
        """
        self._revoked = True
        if self.journal is not None:
            self.journal.revoke()

    def where(self) -> _RunAt:
        """Where this node execution runs, as the keywords that locate a
        :class:`~stargraph.errors.RunError`: ``raise NodeError(message, **ctx.where())``."""
        return {"run_id": self.run_id, "step": self.step, "node": self.node}

    def _unjournaled(self, what: str) -> None:
        # Without a journal an abandoned attempt has no record to protect, but it must not
        # make effects or draws either: the attempt that replaced it makes them.
        if self._revoked:
            from stargraph.errors import AttemptAbandonedError

            raise AttemptAbandonedError(
                f"an abandoned attempt of node {self.node!r} at step {self.step} of run "
                f"{self.run_id!r} called ctx.{what}() after its timeout, when another attempt "
                "had taken over; the call was refused",
                **self.where(),
            )

    @property
    def idempotency_key(self) -> str:
        """``run/path/step/node/index``: the same for every attempt of this execution."""
        path = "/".join(self.path)
        return f"{self.run_id}/{path}/{self.step}/{self.node}/{self.index}"

    def _position(self, kind: str) -> tuple[str, int]:
        draw = self._draws
        self._draws += 1
        return f"{self.idempotency_key}/{kind}#{draw}", draw

    def _now(self) -> datetime:
        entropy = self.entropy
        if not is_positional(entropy):
            return self.entropy.now()
        position, draw = self._position("now")
        return entropy.now_at(position, self.step, draw)

    def _uuid(self) -> str:
        entropy = self.entropy
        if not is_positional(entropy):
            return self.entropy.uuid()
        return str(entropy.uuid_at(self._position("uuid")[0]))

    def _random(self) -> float:
        entropy = self.entropy
        if not is_positional(entropy):
            return self.entropy.random()
        return float(entropy.random_at(self._position("random")[0]))

    def now(self) -> datetime:
        """The current time from the run's entropy source (journaled in durable runs)."""
        if self.journal is None:
            self._unjournaled("now")
            return self._now()
        text = self.journal.call("now", "", lambda: self._now().isoformat())
        return datetime.fromisoformat(text)

    def uuid(self) -> str:
        """A fresh id from the run's entropy source (journaled in durable runs)."""
        if self.journal is None:
            self._unjournaled("uuid")
            return self._uuid()
        return str(self.journal.call("uuid", "", self._uuid))

    def random(self) -> float:
        """A random float in [0, 1) from the run's entropy source (journaled)."""
        if self.journal is None:
            self._unjournaled("random")
            return self._random()
        return float(self.journal.call("random", "", self._random))

    def record_call(self, kind: str, key: str, request: Any, call: Callable[[], Any]) -> Any:
        """Make a non-deterministic call through the run's record (``call()`` must return
        JSON). Live it runs and is recorded with the request's fingerprint; on re-execution
        and in replay the recorded response is returned without calling."""
        if self.journal is None:
            self._unjournaled("record_call")
            return call()
        return self.journal.call(kind, key, call, request=request)

    def once(self, name: str, effect: Callable[[], T]) -> T:
        """Run ``effect()`` once for this node execution and journal its (JSON) result.

        A re-execution of the same step (after a crash, a retry, an interrupt) gets the
        recorded result instead of running the effect again. Without a checkpoint store
        there is nothing to resume, and the effect simply runs.

        Under ``timeout_s`` an attempt that outlives its timeout keeps running on its thread
        while a retry takes over; from then on its ``once`` raises
        :class:`~stargraph.errors.AttemptAbandonedError` and runs nothing, and an effect it
        had already begun is finished, recorded and served to the retry - so with a store the
        effect runs exactly once however the attempts interleave.
        """
        if self.journal is None:
            self._unjournaled("once")
            return effect()
        return self.journal.call("once", name, effect)  # type: ignore[no-any-return]

    def interrupt(self, payload: Any = None) -> Any:
        """Stop the run until a human answers; returns the answer on resume.

        The first time, this raises a control-flow signal: the run is saved with status
        ``interrupted`` and ``payload``. ``resume(run_id, response=...)`` re-executes the node
        from its start; this call then returns ``response``. Effects before the interrupt
        should go through ``ctx.once`` so the re-execution does not repeat them.
        """
        from stargraph.errors import RunError

        if self.journal is None or self.journal.ephemeral:
            raise RunError(
                f"node {self.node!r} called ctx.interrupt() but the graph has no checkpoint "
                "store to keep the interrupted run in; compile it with store=SqliteStore(...) or "
                "MemoryStore()",
                **self.where(),
            )
        recorded = self.journal.peek("interrupt")
        if recorded is not None:
            self.journal.seq += 1
            return recorded.value["response"] if isinstance(recorded.value, dict) else None
        raise GraphInterrupt(payload, self.journal.seq)
