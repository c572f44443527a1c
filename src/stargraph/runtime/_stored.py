"""Stored runs: load (for resume), fork, migrate and nested child runs, as plain functions.

Everything that reads a run back from the checkpoint store lives here. Each function takes
the graph's :class:`~stargraph.runtime._steploop.StepLoop` (its plan, store and options);
``load`` returns a :class:`Run` ready for the loop's drivers, leased to this process. The
``CompiledGraph`` methods (``resume``, ``fork``, ...) delegate here.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from stargraph.checkpoint import (
    CheckpointStore,
    JournalEntry,
    RunRecord,
    RunStatus,
    StepRecord,
    WriteRecord,
)
from stargraph.checkpoint._lease import Lease
from stargraph.checkpoint._records import ENDED_STATUSES
from stargraph.errors import (
    CheckpointError,
    CodeHashMismatch,
    CodeHashWarning,
    GraphHashMismatch,
    InvalidInputError,
    RunNotResumableError,
)
from stargraph.runtime._durable import (
    Persistence,
    check_run_id,
    check_values,
    decode_writes,
    joins_from,
    load_journal,
    load_values,
    take_lease,
    tasks_from,
)
from stargraph.runtime._events import Event
from stargraph.runtime._interrupts import Interrupt
from stargraph.runtime._plan import Task
from stargraph.runtime._run import Run, jsonable
from stargraph.runtime._steploop import StepLoop
from stargraph.runtime._values import GOTO_KEY, describe_validation

__all__ = [
    "NO_RESPONSE",
    "Migration",
    "apply_update",
    "check_hashes",
    "fork",
    "fork_next",
    "history_writes",
    "load",
    "migrate",
    "require_store",
    "run_nested",
    "validate_update",
]

NO_RESPONSE: Any = object()
"""Sentinel: ``resume`` was called without ``response=``."""

Migration = Callable[[dict[str, Any]], Mapping[str, Any]]
"""Turns a run's state (JSON) recorded by an old graph into a state of the new graph."""


def fork(
    loop: StepLoop,
    run_id: str,
    step: int,
    *,
    update: Mapping[str, Any] | None = None,
    new_run_id: str | None = None,
    code_hash: str | None = None,
    as_node: str | None = None,
) -> str:
    """``CompiledGraph.fork`` (documented there): copy steps ``0..step`` of ``run_id`` into
    a new run linked to it, ``update`` committed as the step after (routed from ``as_node``
    if given); the new run's id. The fork is ``pending`` until ``resume`` starts it, or
    ``halted``/``done`` when the rules of ``as_node`` ended it at the update."""
    store, record = _fork_point(loop, run_id, step, as_node, code_hash)
    new_id = new_run_id or f"{run_id}~{uuid.uuid4().hex[:8]}"
    writes = validate_update(loop, update, new_id, as_node) if update else None
    history = store.get_steps(run_id, start=0, end=step)
    store.create_run(
        record.model_copy(
            update={
                "run_id": new_id,
                "status": "running",
                "last_step": 0,
                "parent_run_id": run_id,
                "parent_step": step,
                "error": None,
                "stopped_by": None,
                "stop_reason": None,
                "interrupt": None,
                "owner": None,  # the parent's lease, if any, is not the fork's
                # A fork of a thread's turn is a branch beside the thread, not a turn.
                "thread_id": None,
                "turn": None,
                "lease_expires": None,
                "created_at": "",
                "updated_at": "",
            }
        ),
        history[0],
    )
    for past in history[1:]:
        store.commit_step(new_id, past)
    status: RunStatus = "pending"
    stopped_by = stop_reason = None
    if writes or as_node is not None:
        values, at = load_values(store, loop.plan.channels, new_id, step)
        run = _run_at(loop, new_id, values, at, step, rules=as_node is not None)
        run.persistence = Persistence(loop.plan, store, snapshot_every=loop.options.snapshot_every)
        try:
            apply_update(loop, run, update or {}, as_node=as_node)
        finally:
            if run.rules is not None:
                run.rules.close()
                run.rules = None
        if run.stopped_by is not None and not run.tasks:
            # The rules of as_node ended the run at the update: it is over, not pending.
            status = "halted" if run.halted else "done"
            stopped_by, stop_reason = run.stopped_by, run.stop_reason
    # Nobody runs the fork until resume(new_id): it must not look like a run in progress.
    store.set_status(new_id, status, stopped_by=stopped_by, stop_reason=stop_reason)
    return new_id


def fork_next(
    loop: StepLoop,
    run_id: str,
    step: int,
    *,
    update: Mapping[str, Any] | None = None,
    as_node: str | None = None,
    code_hash: str | None = None,
) -> tuple[str, ...]:
    """``CompiledGraph.fork_next`` (documented there): the nodes a fork of ``run_id`` at
    ``step`` with ``update`` (routed from ``as_node``) would run next; nothing is written."""
    store, _ = _fork_point(loop, run_id, step, as_node, code_hash)
    writes = validate_update(loop, update, run_id, as_node) if update else {}
    values, at = load_values(store, loop.plan.channels, run_id, step)
    if as_node is None:
        return tuple(t.node for t in at.next)
    run = _run_at(loop, run_id, values, at, step + 1, rules=True)
    try:
        run.merge([(Task("__update__"), writes)])
        _route_as(loop, run, as_node)
    finally:
        if run.rules is not None:
            run.rules.close()
    return tuple(t.node for t in run.tasks)


def _fork_point(
    loop: StepLoop, run_id: str, step: int, as_node: str | None, code_hash: str | None
) -> tuple[CheckpointStore, RunRecord]:
    """The store and record of a run to fork at ``step``, refusing an unknown ``as_node``,
    changed hashes and a step the run does not have."""
    store = require_store(loop)
    check_as_node(loop, as_node, run_id)
    record = check_hashes(loop, store.get_run(run_id), code_hash)
    if not 0 <= step <= record.last_step:
        raise CheckpointError(
            f"run {run_id!r} has steps 0..{record.last_step}; cannot fork from step {step}",
            run_id=run_id,
            step=step,
        )
    return store, record


def _run_at(
    loop: StepLoop, run_id: str, values: dict[str, Any], at: StepRecord, step: int, *, rules: bool
) -> Run:
    """A run standing at stored step ``at`` (its tasks and joins), at ``step``; with
    ``rules``, an engine holding the facts of that step, so a re-routed step asks the rules
    as a step of its node would."""
    run = loop.make_run(run_id, values)
    run.step = step
    run.tasks = tasks_from(at.next)
    run.joins_seen = joins_from(at)
    if rules and loop.plan.rules is not None:
        run.rules = loop.plan.rules()
        run.rules.restore(at.facts)
    return run


def _route_as(loop: StepLoop, run: Run, as_node: str) -> None:
    """Schedule the run's next tasks as if ``as_node`` had just written the merged state."""
    ran = [Task(as_node)]
    run.schedule_next(ran)
    if run.rules is not None:
        loop.apply_rules(run, ran)


def check_as_node(loop: StepLoop, as_node: str | None, run_id: str) -> None:
    """Refuse an ``as_node`` that is not a node of this graph, naming the ones it has."""
    if as_node is not None and as_node not in loop.plan.specs:
        raise InvalidInputError(
            f"update of run {run_id!r} is given as_node={as_node!r}, which is not a node of "
            f"graph {loop.plan.ir.name!r} (nodes: {sorted(loop.plan.specs)}); name the "
            "node whose write the update stands for, or leave as_node out to keep the "
            "run's scheduled tasks",
            run_id=run_id,
            node=as_node,
        )


def run_nested(
    loop: StepLoop,
    input: Mapping[str, Any],
    *,
    run_id: str,
    path: tuple[str, ...],
    emit: Callable[[Event], None] | None,
    parent: Any,
    code_hash: str | None = None,
    valid: bool = False,
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """Run this graph as the child of a subgraph node; return its final values and the raw
    writes of all its steps (for projection into the parent). ``valid``: ``input`` holds
    every channel's value, valid already (see ``StepLoop.new_run``).

    With a store the child is durable under ``run_id``: an existing child run is resumed
    (or, when done, read back) instead of started again. An interrupt inside the child
    interrupts the parent through ``parent.interrupt`` (the parent's run context); the answer
    given to the parent is handed down when the child resumes.
    """
    raw: list[tuple[str, dict[str, Any]]] = []
    record = None
    if loop.store is not None:
        try:
            record = loop.store.get_run(run_id)
        except LookupError:
            record = None
    # The parent's live stream (if any) gets the child's custom events and model tokens
    # as they happen; the child's typed events go to ``emit``, in task order.
    feed = getattr(parent, "_feed", None)
    if record is None:
        run = loop.new_run(input, run_id, None, emit, valid=valid)
        run.path, run.collect, run.feed = path, raw, feed
        run.thread = getattr(parent, "thread_id", None)
        loop.run_to_end(run, fresh=True)
    else:
        store = require_store(loop)
        raw.extend(history_writes(loop, run_id, record.last_step))
        if record.status in ENDED_STATUSES:
            values, _ = load_values(store, loop.plan.channels, run_id, record.last_step)
            return values, raw
        response = NO_RESPONSE
        if record.status == "interrupted":
            answer = parent.interrupt(record.interrupt)
            waiting = Interrupt.read(record.interrupt)
            if waiting is not None and waiting.kind == "node":
                response = answer
        run = load(
            loop,
            run_id,
            response=response,
            update=None,
            max_steps=None,
            emit=emit,
            code_hash=code_hash,
        )
        run.path, run.collect, run.feed = path, raw, feed
        run.thread = getattr(parent, "thread_id", None)
        loop.run_to_end(run, fresh=False)
    if run.interrupt is not None:
        # The child was interrupted (only a run with a store can be): the parent stops with the
        # interrupt as the store keeps it. A child that was not interrupted is done, and its
        # record need not be read back.
        after = require_store(loop).get_run(run_id)
        if after.status == "interrupted":
            parent.interrupt(after.interrupt)
    return run.values, raw


def history_writes(loop: StepLoop, run_id: str, last: int) -> list[tuple[str, dict[str, Any]]]:
    """The raw writes of steps ``1..last`` of ``run_id``, in merge order, by node."""
    store = require_store(loop)
    out: list[tuple[str, dict[str, Any]]] = []
    for step in store.get_steps(run_id, start=1, end=last):
        for write in step.writes:
            writes = decode_writes(loop.plan.channels, run_id, step.step, write.writes)
            writes.pop(GOTO_KEY, None)  # routing: what the parent projects is the writes
            out.append((write.node, writes))
    return out


def require_store(loop: StepLoop) -> CheckpointStore:
    """The graph's store, or the error saying how to give it one."""
    if loop.store is None:
        raise CheckpointError(
            "this graph was compiled without a checkpoint store; compile it with "
            "store=SqliteStore('.stargraph/stargraph.db') (or MemoryStore()) to keep runs"
        )
    return loop.store


def validate_update(
    loop: StepLoop, update: Mapping[str, Any], run_id: str, as_node: str | None = None
) -> dict[str, Any]:
    """``update`` (channel values to write into ``run_id``) validated by the channels. An
    update ``as_node`` may also say where that node's ``Command`` went, as its recorded
    writes do (under ``GOTO_KEY``: a fork with what a node wrote routes as it did)."""
    check_run_id(run_id)
    out: dict[str, Any] = {}
    for key, value in update.items():
        channel = loop.plan.channels.get(key)
        if key == GOTO_KEY:
            out[key] = _checked_goto(loop, value, run_id, as_node)
            continue
        if channel is None:
            raise InvalidInputError(
                f"update of run {run_id!r} names {key!r}, which is not a field of "
                f"{loop.plan.state_model.__name__} (fields: {sorted(loop.plan.channels)})",
                run_id=run_id,
            )
        try:
            out[key] = channel.validate(value)
        except ValidationError as exc:
            raise InvalidInputError(
                f"update of run {run_id!r}: {key}: {describe_validation(exc)}", run_id=run_id
            ) from exc
    checked = out if GOTO_KEY not in out else {k: v for k, v in out.items() if k != GOTO_KEY}
    check_values(loop.plan.channels, checked, run_id=run_id, what="the update")
    return out


def check_hashes(loop: StepLoop, record: RunRecord, code_hash: str | None = None) -> RunRecord:
    """``record``, once its graph hash is this graph's and its code hash is ``code_hash``
    (default: the plan's) too, or a changed code hash is allowed, with a warning."""
    code_hash = code_hash or loop.plan.code_hash
    if record.graph_hash != loop.plan.graph_hash:
        raise GraphHashMismatch(
            run_id=record.run_id, stored=record.graph_hash, current=loop.plan.graph_hash
        )
    if record.code_hash != code_hash:
        message = (
            f"run {record.run_id!r} was checkpointed by different node code "
            f"({record.code_hash} -> {code_hash}); nodes will run the new code"
        )
        if loop.options.on_code_change == "error":
            raise CodeHashMismatch(
                message + "; compile with on_code_change='warn' to allow it",
                run_id=record.run_id,
            )
        warnings.warn(message, CodeHashWarning, stacklevel=4)
    return record


def load(
    loop: StepLoop,
    run_id: str,
    *,
    response: Any,
    update: Mapping[str, Any] | None,
    max_steps: int | None,
    emit: Callable[[Event], None] | None,
    migration: Migration | None = None,
    wait: bool | float = False,
    taken: tuple[Lease, RunRecord] | None = None,
    code_hash: str | None = None,
    as_node: str | None = None,
) -> Run:
    """Stored run ``run_id``, leased to this process and ready for the loop's drivers to
    continue (``fresh=False``); see ``CompiledGraph.resume`` for the arguments."""
    store = require_store(loop)
    check_run_id(run_id)
    check_as_node(loop, as_node, run_id)
    # The lease first: nothing below (the interrupt's answer, the status, a node) may
    # be written by a second resumer while another process runs the run. ``taken``: the
    # caller took it already (aresume, waiting on its event loop).
    lease, record = take_lease(store, run_id, wait=wait) if taken is None else taken
    try:
        if migration is not None and record.graph_hash != loop.plan.graph_hash:
            migrate(loop, record, migration, owner=lease.token, code_hash=code_hash)
            record = store.get_run(run_id)
        record = check_hashes(loop, record, code_hash)
        waiting = (
            Interrupt.read(record.interrupt, run_id=run_id)
            if record.status == "interrupted"
            else None
        )
        # The node that asked (ctx.interrupt) and waits for a response, if that is why.
        asked = waiting if waiting is not None and waiting.kind == "node" else None
        _check_resumable(record, asked, response)
        run = _restored(loop, store, record, lease, max_steps=max_steps, emit=emit)
        if asked is not None:
            for question, answer in _answers(record, asked, response):
                _answer(store, run, question, answer)
        for entry in load_journal(store, run_id, run.step + 1):
            run.journals.setdefault((entry.node, entry.index), []).append(entry)
        if waiting is not None and waiting.kind == "before":
            run.skip_interrupt_before = True
        if update or as_node is not None:
            _check_update(record, asked, run)
            apply_update(loop, run, update or {}, as_node=as_node)
        store.set_status(run_id, "running", owner=lease.token)
        return run
    except BaseException:
        lease.release()
        raise


def _check_resumable(record: RunRecord, asked: Interrupt | None, response: Any) -> None:
    """Refuse a run that is done, or a ``response`` given to a run that waits for none (or
    missing for one that does: ``asked``, the node interrupt it waits on)."""
    run_id = record.run_id
    if record.status in ENDED_STATUSES:
        how = (
            f"was halted by rule {record.stopped_by}"
            + (f" ({record.stop_reason})" if record.stop_reason else "")
            + f" at step {record.last_step}, which ends it like done"
            if record.status == "halted"
            else f"finished at step {record.last_step}"
        )
        raise RunNotResumableError(
            f"run {run_id!r} {how}; there is nothing to resume (use fork({run_id!r}, step) "
            "to continue from an earlier step)",
            run_id=run_id,
            step=record.last_step,
        )
    if asked is not None and response is NO_RESPONSE and asked.also:
        raise RunNotResumableError(
            f"run {run_id!r} is waiting for responses to {len(asked.pending)} interrupts at "
            f"step {asked.step} ("
            + ", ".join(f"{q.id!r}: node {q.node!r}, payload {q.payload!r}" for q in asked.pending)
            + f"); pass {asked.hint()}",
            run_id=run_id,
            step=record.last_step,
            node=asked.node,
        )
    if asked is not None and response is NO_RESPONSE:
        raise RunNotResumableError(
            f"run {run_id!r} is waiting for a response to the interrupt of node "
            f"{asked.node!r} at step {asked.step} (payload "
            f"{asked.payload!r}); pass resume(..., response=...)",
            run_id=run_id,
            step=record.last_step,
            node=asked.node,
        )
    if asked is None and response is not NO_RESPONSE:
        raise RunNotResumableError(
            f"run {run_id!r} is not waiting for a response (status {record.status!r}); "
            "call resume() without response=",
            run_id=run_id,
            step=record.last_step,
        )


def _answers(record: RunRecord, asked: Interrupt, response: Any) -> list[tuple[Interrupt, Any]]:
    """Each interrupt the run waits on with its answer: ``response`` itself for a lone one
    (unless it is a mapping from exactly that interrupt's id), else ``response[id]`` for
    each, refusing a mapping that misses a pending id or names one that is not pending."""
    pending = asked.pending
    ids = [question.id for question in pending]
    keyed = isinstance(response, Mapping) and all(isinstance(k, str) for k in response)
    if len(pending) == 1 and not (keyed and set(response) == set(ids)):
        return [(asked, response)]
    if not keyed:
        raise InvalidInputError(
            f"run {record.run_id!r} waits on {len(pending)} interrupts ("
            + ", ".join(f"{q.id!r} of node {q.node!r}" for q in pending)
            + f"); answer them all at once with response={{interrupt_id: answer, ...}}, not "
            f"{response!r}",
            run_id=record.run_id,
            step=record.last_step,
        )
    missing = [i for i in ids if i not in response]
    unknown = sorted(k for k in response if k not in ids)
    if missing or unknown:
        problems = []
        if missing:
            problems.append(f"no answer for {missing}")
        if unknown:
            problems.append(f"{unknown} not pending")
        raise InvalidInputError(
            f"resume of run {record.run_id!r}: " + " and ".join(problems) + "; the pending "
            "interrupts are "
            + ", ".join(f"{q.id!r} (node {q.node!r}, payload {q.payload!r})" for q in pending)
            + "; give one answer per pending id",
            run_id=record.run_id,
            step=record.last_step,
        )
    return [(question, response[question.id]) for question in pending]


def _restored(
    loop: StepLoop,
    store: CheckpointStore,
    record: RunRecord,
    lease: Lease,
    *,
    max_steps: int | None,
    emit: Callable[[Event], None] | None,
) -> Run:
    """The run as its last committed step left it, with the writes of the tasks of the next
    step that finished already (``run.done``), persisting under ``lease``."""
    run_id = record.run_id
    values, last = load_values(store, loop.plan.channels, run_id, record.last_step)
    run = loop.make_run(run_id, values, max_steps=max_steps, emit=loop.observed(emit))
    run.thread = record.thread_id
    run.step = last.step
    if loop.plan.sited:
        # The child run ids of the next steps count on from the committed history.
        run.restore_activations(store.get_steps(run_id, end=last.step))
    run.tasks = tasks_from(last.next)
    run.joins_seen = joins_from(last)
    if loop.plan.rules is not None:
        run.rules = loop.plan.rules()
        run.rules.restore(last.facts)
    run.persistence = Persistence(
        loop.plan, store, snapshot_every=loop.options.snapshot_every, lease=lease
    )
    nxt = last.step + 1
    pending = store.get_pending(run_id, nxt)
    run.done = {
        (p.node, p.index): decode_writes(loop.plan.channels, run_id, nxt, p.writes) for p in pending
    }
    return run


def _answer(store: CheckpointStore, run: Run, asked: Interrupt, response: Any) -> None:
    """Journal ``response`` as the answer the node that ``asked`` reads when it runs again."""
    answer = JournalEntry(
        step=run.step + 1,
        node=asked.node,
        index=asked.index,
        seq=asked.seq,
        kind="interrupt",
        value={"response": response},
    )
    # Replace, not insert-or-ignore: the run is still interrupted, so no node has
    # read an answer at this position (a resume that journaled one and crashed
    # before the status changed left it unread), and this answer is the operator's
    # latest word.
    store.append_journal(run.run_id, answer, replace=True)


def _check_update(record: RunRecord, asked: Interrupt | None, run: Run) -> None:
    """Refuse an update to a run whose node waits for a response, or whose next step is
    partly done."""
    run_id = record.run_id
    if asked is not None:
        raise RunNotResumableError(
            f"run {run_id!r} is waiting inside node {asked.node!r}; answer it with "
            "response= alone (an update would commit a step and drop what the node "
            "recorded before it asked), then update at the next interrupt",
            run_id=run_id,
            step=record.last_step,
            node=asked.node,
        )
    if run.done:
        raise RunNotResumableError(
            f"run {run_id!r} has a partly finished step {run.step + 1}; resume it without "
            f"update=, or fork it from step {run.step} with the update",
            run_id=run_id,
            step=run.step + 1,
        )


def migrate(
    loop: StepLoop,
    record: RunRecord,
    migration: Migration,
    *,
    owner: str | None,
    code_hash: str | None = None,
) -> None:
    """Commit ``migration(state)`` as a step of the run, then adopt this graph's hash."""
    store = require_store(loop)
    run_id = record.run_id
    last = store.get_steps(run_id, start=record.last_step, end=record.last_step)[-1]
    if store.get_pending(run_id, record.last_step + 1):
        raise RunNotResumableError(
            f"run {run_id!r} has a partly finished step {record.last_step + 1}; finish it "
            "with the graph that made it before migrating",
            run_id=run_id,
            step=record.last_step + 1,
        )
    # The stored steps are read through this graph's channels: a migration is for graphs
    # whose state still reads the old data (new nodes, changed edges or prompts). A state
    # that no longer reads it is reported as such; fork with the old graph instead.
    values, _ = load_values(store, loop.plan.channels, run_id, record.last_step)
    migrated = migration(jsonable(loop.plan.channels, values))
    state = loop.plan.state_model.model_validate(migrated)
    unknown = sorted({t.node for t in last.next} - set(loop.plan.specs))
    if unknown:
        raise RunNotResumableError(
            f"run {run_id!r} has scheduled nodes {unknown} that this graph lacks; the "
            "migration cannot continue it",
            run_id=run_id,
            step=record.last_step,
        )
    store.commit_step(
        run_id,
        StepRecord(
            step=record.last_step + 1,
            writes=(WriteRecord(node="__migration__", writes={}),),
            # The fields as they are: jsonable encodes them by channel, as a step's values.
            snapshot=jsonable(loop.plan.channels, dict(state.__dict__)),
            next=last.next,
            joins=last.joins,
            created_ms=last.created_ms,
        ),
        status="running" if record.status == "orphaned" else record.status,
        error=record.error,
        interrupt=record.interrupt,
        owner=owner,
    )
    store.set_graph(
        run_id, graph_hash=loop.plan.graph_hash, code_hash=code_hash or loop.plan.code_hash
    )


def _checked_goto(loop: StepLoop, goto: Any, run_id: str, as_node: str | None) -> list[Any]:
    """The ``GOTO_KEY`` of an update routed ``as_node``: node ids and ``{"node", "payload"}``
    sends among that node's declared destinations, or the error saying what is wrong."""
    allowed = frozenset() if as_node is None else loop.plan.specs[as_node].destinations

    def fits(item: Any) -> bool:
        if type(item) is str:
            return item in allowed
        return (
            type(item) is dict
            and set(item) == {"node", "payload"}
            and item["node"] in allowed
            and type(item["payload"]) is dict
        )

    if as_node is not None and type(goto) is list and all(fits(item) for item in goto):
        return goto
    raise InvalidInputError(
        f"update of run {run_id!r} names {GOTO_KEY!r} = {goto!r:.200}: where a Command went "
        "can only be given with as_node=<the node>, as a list of that node's declared "
        f"destinations ({sorted(allowed)}) or {{'node': ..., 'payload': {{...}}}} sends",
        run_id=run_id,
        node=as_node,
    )


def apply_update(
    loop: StepLoop, run: Run, update: Mapping[str, Any], *, as_node: str | None = None
) -> None:
    """Commit ``update`` as a step of its own, written by ``__update__``.

    With ``as_node`` the step is routed as if that node had written ``update``: its edges,
    routers (``Send``s included), joins and rules schedule the next tasks from the edited
    state. Without it the run keeps the tasks it had scheduled. The record still names
    ``__update__`` as the writer, so history, diff and replay tell the edit from a node's run.
    """
    writes = validate_update(loop, update, run.run_id, as_node)
    run.step += 1
    run.merge([(Task("__update__"), writes)])
    if as_node is not None:
        _route_as(loop, run, as_node)
    assert run.persistence is not None
    run.persistence.commit(run, [(Task("__update__"), writes)], as_node=as_node)
    run.committed()
