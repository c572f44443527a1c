"""Threads: a conversation as a sequence of runs.

``invoke(input, thread_id="chat-7")`` starts a *new run* - its own run id, resumable,
replayable, immutable once done - as the next turn of the thread. Its step 0 is the state
the thread's last turn finished with, with ``input`` applied through the channels' reducers:
an ``append`` channel gets the new message appended, a plain channel is overwritten, a
channel the input does not name keeps its value. A thread is nothing but the runs that carry
its id (``RunRecord.thread_id``, ``RunRecord.turn``), so everything that works on runs
(resume, fork, replay, cassettes) works on each turn.

One turn at a time: a turn starts only after the previous one finished (``done``). A
previous turn that is running, interrupted, failed, cancelled or orphaned is a
:class:`~stargraph.errors.ThreadBusyError` saying how to finish it. Two callers starting the
same turn at the same moment are fenced by the store, which keeps one run per thread and
turn: the second gets ``ThreadBusyError`` before any node runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from stargraph.checkpoint import CheckpointStore, RunRecord
from stargraph.checkpoint._records import ENDED_STATUSES, unicode_problem
from stargraph.errors import (
    CheckpointError,
    InvalidInputError,
    ThreadBusyError,
    ThreadNotFoundError,
)
from stargraph.runtime._durable import load_values
from stargraph.runtime._plan import Plan
from stargraph.runtime._run import initial_values
from stargraph.runtime._values import reduce_writes

__all__ = ["Turn", "get_thread", "list_threads", "start_turn"]


@dataclass(frozen=True, slots=True)
class Turn:
    """A run about to start as turn ``number`` of thread ``thread_id``, from ``values``."""

    thread_id: str
    number: int
    values: dict[str, Any]


def _store(store: CheckpointStore | None, what: str) -> CheckpointStore:
    if store is None:
        raise CheckpointError(
            f"{what} needs a checkpoint store: a thread is the runs kept in it, and each turn "
            "starts from the state the last one left there; compile the graph with "
            "store=SqliteStore('.stargraph/stargraph.db') (or MemoryStore())"
        )
    return store


def _check_thread_id(thread_id: object, run_id: str | None) -> str:
    if type(thread_id) is not str or not thread_id:
        raise InvalidInputError(
            f"thread_id={thread_id!r} is not a thread id; pass a non-empty string such as "
            "'chat-42'",
            run_id=run_id,
        )
    problem = unicode_problem(thread_id)
    if problem is not None:
        raise InvalidInputError(
            f"thread id {thread_id!r} cannot be stored: {problem}; pass a plain string",
            run_id=run_id,
        )
    return thread_id


def _busy(thread_id: str, last: RunRecord) -> ThreadBusyError:
    """Why the next turn cannot start while ``last`` has not finished, and what to do."""
    rid = last.run_id
    if last.status == "interrupted":
        wait = last.interrupt if isinstance(last.interrupt, dict) else {}
        answer = ", response=..." if wait.get("kind") == "node" else ""
        todo = f"it waits at an interrupt: resume({rid!r}{answer}) first"
    elif last.status == "running":
        holder = last.owner.describe() if last.owner is not None else "another caller"
        todo = f"it is still running in {holder}: wait for it to finish"
    elif last.status == "orphaned":
        todo = f"the process running it is gone: resume({rid!r}) first"
    elif last.status == "failed":
        todo = f"it failed ({last.error}): fix the cause, then resume({rid!r}) first"
    elif last.status == "pending":
        todo = f"it was never started: resume({rid!r}) first"
    else:  # cancelled
        todo = f"it was cancelled ({last.stopped_by}): resume({rid!r}) first"
    return ThreadBusyError(
        f"thread {thread_id!r} cannot start turn {(last.turn or 0) + 1}: its turn {last.turn} "
        f"(run {rid!r}) is {last.status}, not done; {todo}",
        run_id=rid,
        step=last.last_step,
    )


def _input_items(input: Mapping[str, Any] | BaseModel | None) -> Mapping[str, Any]:
    if input is None:
        return {}
    if isinstance(input, BaseModel):
        # Only what the caller set: a model's defaults would overwrite the conversation.
        return input.model_dump(exclude_unset=True)
    return input


def _apply(
    graph: Plan,
    values: dict[str, Any],
    input: Mapping[str, Any],
    *,
    run_id: str,
    thread_id: str,
) -> dict[str, Any]:
    """``values`` with each input key written through its channel's reducer."""
    fields = graph.state_model.model_fields
    by_alias = {f.alias: name for name, f in fields.items() if f.alias}
    out = dict(values)
    for key, value in input.items():
        name = key if key in graph.channels else by_alias.get(key, key)
        channel = graph.channels.get(name)
        if channel is None:
            raise InvalidInputError(
                f"input of run {run_id!r} (turn of thread {thread_id!r}) names {key!r}, which "
                f"is not a field of {graph.state_model.__name__} (fields: "
                f"{sorted(graph.channels)})",
                run_id=run_id,
                step=0,
            )
        try:
            valid = channel.validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in (name, *first["loc"]))
            raise InvalidInputError(
                f"input of run {run_id!r} (turn of thread {thread_id!r}): {where}: {first['msg']}",
                run_id=run_id,
                step=0,
            ) from exc
        reduce_writes(graph.channels, out, {name: valid})
    return out


def start_turn(
    graph: Plan,
    store: CheckpointStore | None,
    input: Mapping[str, Any] | BaseModel | None,
    thread_id: object,
    run_id: str,
) -> Turn:
    """The next turn of ``thread_id``: its number and the values its run starts from.

    Nothing is written here; the run is created (and the turn fenced) when it starts."""
    tid = _check_thread_id(thread_id, run_id)
    store = _store(store, f"invoke(..., thread_id={tid!r})")
    turns = store.get_thread(tid)
    if not turns:
        return Turn(tid, 1, initial_values(graph.state_model, input, run_id))
    last = turns[-1]
    if last.status not in ENDED_STATUSES:  # a halted turn ended as surely as a done one
        raise _busy(tid, last)
    values, _ = load_values(store, graph.channels, last.run_id, last.last_step)
    values = _apply(graph, values, _input_items(input), run_id=run_id, thread_id=tid)
    return Turn(tid, (last.turn or 0) + 1, values)


def get_thread(store: CheckpointStore | None, thread_id: str) -> list[RunRecord]:
    """The runs of a thread in turn order; :class:`ThreadNotFoundError` for none."""
    tid = _check_thread_id(thread_id, None)
    runs = _store(store, "get_thread()").get_thread(tid)
    if not runs:
        raise ThreadNotFoundError(
            f"no thread {tid!r} in this graph's store; start it with "
            f"invoke(input, thread_id={tid!r}), or list threads with threads()"
        )
    return runs


def list_threads(store: CheckpointStore | None, limit: int = 100) -> list[RunRecord]:
    """The latest turn of each thread in the store, newest first."""
    return _store(store, "threads()").list_threads(limit=limit)
