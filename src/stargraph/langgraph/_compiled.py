"""``CompiledStateGraph``: LangGraph's run API (threads in ``config``) over a native app."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from stargraph.errors import UsageError
from stargraph.langgraph._types import Command
from stargraph.runtime._stream import CustomEvent

_SAVERS = ("InMemorySaver", "MemorySaver")


def store_of(checkpointer: Any) -> Any:
    """The stargraph store for a LangGraph ``checkpointer=`` argument."""
    from stargraph.checkpoint import CheckpointStore, MemoryStore

    if checkpointer is None or checkpointer is False:
        return None
    if checkpointer is True or type(checkpointer).__name__ in _SAVERS:
        return MemoryStore()
    if isinstance(checkpointer, CheckpointStore):
        return checkpointer
    raise UsageError(
        f"checkpointer={checkpointer!r} is not a stargraph store: pass SqliteStore(path), "
        "MemoryStore(), True (a MemoryStore) or None; LangGraph's own savers hold "
        "LangGraph checkpoints, which stargraph does not read"
    )


@dataclass(frozen=True)
class Interrupt:
    """LangGraph's ``Interrupt``: the ``value`` a node passed to ``interrupt()``."""

    value: Any
    id: str = ""


@dataclass(frozen=True)
class PregelTask:
    """LangGraph's ``PregelTask``: a task a thread's next step runs (``name`` is its node),
    with the ``interrupts`` it waits on."""

    id: str
    name: str
    path: tuple[Any, ...] = ()
    error: Any = None
    interrupts: tuple[Interrupt, ...] = ()
    state: Any = None
    result: Any = None


@dataclass(frozen=True)
class StateSnapshot:
    """What ``get_state`` returns, as LangGraph's: ``values``, the ``next`` nodes, the
    ``config`` naming the checkpoint (thread and run), its ``metadata``, the pending
    ``tasks`` (each with its interrupts) and every ``interrupts`` it waits on."""

    values: dict[str, Any]
    next: tuple[str, ...]
    config: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: str | None = None
    parent_config: dict[str, Any] | None = None
    tasks: tuple[Any, ...] = ()
    interrupts: tuple[Interrupt, ...] = ()


def _thread(config: Mapping[str, Any] | None) -> str | None:
    if not config:
        return None
    thread = (config.get("configurable") or {}).get("thread_id")
    return None if thread is None else str(thread)


class CompiledStateGraph:
    """A compiled :class:`~stargraph.langgraph.StateGraph`: ``invoke``/``stream``/
    ``get_state``/``update_state``/``get_state_history`` with LangGraph's arguments.

    A LangGraph thread is a stargraph thread: each ``invoke`` on it is one run (a turn)
    starting from the state the last turn ended with. ``Command(resume=x)`` (or ``None``
    after a breakpoint) resumes the thread's interrupted run. ``native`` is the compiled
    stargraph graph (``graph_hash``, ``replay``, ``history``...)."""

    def __init__(self, builder: Any, native: Any) -> None:
        self.builder = builder
        self.native = native
        model = native.state_model
        self._defaults = {k: f.default for k, f in model.model_fields.items()}
        out = builder.output_schema
        if isinstance(out, type) and issubclass(out, BaseModel):
            self._out_keys: tuple[str, ...] = tuple(out.model_fields)
        else:
            self._out_keys = tuple(getattr(out, "__annotations__", {}) and _hints(out))
        # As LangGraph's stream channels: every channel of every schema (the private ones
        # of node input schemas too), managed values left out. get_state shows the same.
        managed = native.plan.managed
        self._state_keys = tuple(k for k in model.model_fields if k not in managed)
        self._out_keys = tuple(k for k in self._out_keys if k not in managed)
        # The run a thread continues from, when update_state forked a new one.
        self._heads: dict[str, str] = {}

    def __stargraph_identity__(self) -> str:
        # A node that calls this graph (a subgraph inside a node) hashes by what it runs.
        return str(self.native.graph_hash)

    # ------------------------------------------------------------------ helpers

    def _values(self, state: Any, keys: Sequence[str] | None = None) -> dict[str, Any]:
        names = self._state_keys if keys is None else keys
        return {
            k: getattr(state, k)
            for k in names
            if not (getattr(state, k, None) is None and self._defaults.get(k) is None)
        }

    def _head(self, thread: str | None) -> str | None:
        if thread is None:
            return None
        if thread in self._heads:
            return self._heads[thread]
        from stargraph.errors import ThreadNotFoundError

        try:
            runs = self.native.get_thread(thread)
        except ThreadNotFoundError:
            return None
        return runs[-1].run_id if runs else None

    def _need_thread(self, config: Mapping[str, Any] | None, what: str) -> str:
        thread = _thread(config)
        if thread is None or self.native.store is None:
            raise UsageError(
                f"{what} needs a thread: compile(checkpointer=True) (or a stargraph store) and "
                'pass config={"configurable": {"thread_id": "..."}}'
            )
        return thread

    def _continuation(
        self, input: Any, config: Mapping[str, Any] | None
    ) -> tuple[str, dict[str, Any]] | None:
        """(run id, resume kwargs) when ``input`` continues the thread's stopped run."""
        if isinstance(input, Command):
            if input.update is not None or input.goto:
                raise UsageError(
                    "invoke(Command(update=/goto=)) is not mapped: call "
                    "update_state(config, values, as_node=...) and then invoke(None, config)"
                )
            thread = self._need_thread(config, "invoke(Command(resume=...))")
            run_id = self._head(thread)
            if run_id is None:
                raise UsageError(
                    f"thread {thread!r} has no run to resume; invoke it with an input first"
                )
            return run_id, {"response": input.resume}
        if input is None:
            head = self._head(_thread(config))
            if head is not None and self.native.get_run(head).status in (
                "interrupted",
                "pending",
            ):
                return head, {}
        return None

    def _max_steps(self, config: Mapping[str, Any] | None) -> int | None:
        limit = (config or {}).get("recursion_limit")
        return None if limit is None else int(limit)

    def _finish(self, state: Any, thread: str | None, run_id: str | None = None) -> dict[str, Any]:
        from stargraph.runtime import interrupt_of

        values = self._values(state, self._out_keys)
        found = interrupt_of(state)
        if found is not None:
            values["__interrupt__"] = list(_lg_pending(found))
        return values

    # ------------------------------------------------------------------ running

    def invoke(
        self, input: Any, config: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Run to the end or an interrupt; return the final state as a dict.

        ``stream_mode`` other than ``"values"`` returns the list of streamed items."""
        mode = kwargs.pop("stream_mode", "values")
        if mode != "values":
            return list(self.stream(input, config, stream_mode=mode))  # type: ignore[return-value]
        thread = _thread(config)
        cont = self._continuation(input, config)
        if cont is not None:
            run_id, extra = cont
            self._heads.pop(thread or "", None)
            state = self.native.resume(run_id, max_steps=self._max_steps(config), **extra)
            return self._finish(state, thread)
        self._heads.pop(thread or "", None)
        state = self.native.invoke(
            _plain(input),
            thread_id=thread if self.native.store is not None else None,
            max_steps=self._max_steps(config),
        )
        return self._finish(state, thread)

    async def ainvoke(
        self, input: Any, config: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Async :meth:`invoke`."""
        thread = _thread(config)
        cont = self._continuation(input, config)
        self._heads.pop(thread or "", None)
        if cont is not None:
            state = await self.native.aresume(cont[0], **cont[1])
        else:
            state = await self.native.ainvoke(
                _plain(input), thread_id=thread if self.native.store is not None else None
            )
        return self._finish(state, thread)

    def stream(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        stream_mode: str | Sequence[str] = "values",
        **kwargs: Any,
    ) -> Iterator[Any]:
        """Yield what ``stream_mode`` picks (``values``, ``updates``, ``custom``,
        ``messages``, or a list of them as ``(mode, item)`` pairs). ``values`` items hold
        every channel, as LangGraph's do, or the channels ``output_keys`` names."""
        modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
        keys = _output_keys(kwargs.pop("output_keys", None))
        thread = _thread(config)
        cont = self._continuation(input, config)
        self._heads.pop(thread or "", None)
        if cont is not None:
            items = self.native.resume_stream(
                cont[0], mode=modes if len(modes) > 1 else modes[0], **cont[1]
            )
        else:
            items = self.native.stream(
                _plain(input),
                mode=modes if len(modes) > 1 else modes[0],
                thread_id=thread if self.native.store is not None else None,
                max_steps=self._max_steps(config),
            )
        last: list[Any] = [{}]
        for pair in items:
            mode, item = (modes[0], pair) if len(modes) == 1 else pair
            out = self._item(mode, item, keys)
            if keys is not None and mode == "values" and not _changed(out, last):
                continue
            yield out if isinstance(stream_mode, str) else (mode, out)

    async def astream(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        stream_mode: str | Sequence[str] = "values",
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        """Async :meth:`stream`."""
        modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
        keys = _output_keys(kwargs.pop("output_keys", None))
        thread = _thread(config)
        cont = self._continuation(input, config)
        self._heads.pop(thread or "", None)
        if cont is not None:
            raise UsageError(
                "astream(Command(resume=...)) is not mapped; use stream() or ainvoke()"
            )
        items = self.native.astream(
            _plain(input),
            mode=modes if len(modes) > 1 else modes[0],
            thread_id=thread if self.native.store is not None else None,
        )
        last: list[Any] = [{}]
        async for pair in items:
            mode, item = (modes[0], pair) if len(modes) == 1 else pair
            out = self._item(mode, item, keys)
            if keys is not None and mode == "values" and not _changed(out, last):
                continue
            yield out if isinstance(stream_mode, str) else (mode, out)

    def _item(self, mode: str, item: Any, keys: Sequence[str] | None = None) -> Any:
        if mode == "values":
            if isinstance(item, Mapping):  # the closing {"__interrupt__": ...}
                return _lg_interrupts(item)
            return self._values(item, keys)
        if mode == "updates":
            if "__interrupt__" in item:
                return _lg_interrupts(item)
            return {node: (dict(w) if isinstance(w, Mapping) else w) for node, w in item.items()}
        if mode == "custom" and isinstance(item, CustomEvent):
            return item.payload
        if mode == "messages":
            meta = {
                "langgraph_node": getattr(item, "node", None),
                "langgraph_step": getattr(item, "step", None),
            }
            return (getattr(item, "text", item), meta)
        return item

    # ------------------------------------------------------------------ state

    def get_state(self, config: Mapping[str, Any]) -> StateSnapshot:
        """The thread's latest state: ``values``, ``next`` (the nodes a resume runs) and
        the ``interrupts`` it waits on."""
        thread = self._need_thread(config, "get_state")
        run_id = self._head(thread)
        if run_id is None:
            return StateSnapshot(values={}, next=(), config=dict(config))
        return self._snapshot(thread, run_id, None)

    def _snapshot(self, thread: str, run_id: str, step: int | None) -> StateSnapshot:
        from stargraph.runtime import Interrupt as NativeInterrupt

        record = self.native.get_run(run_id)
        at = record.last_step if step is None else step
        state = self.native.get_state(run_id, at)
        nxt: tuple[str, ...] = ()
        interrupts: tuple[Interrupt, ...] = ()
        asked: dict[str, tuple[Interrupt, ...]] = {}
        if step is None and record.status in ("interrupted", "pending"):
            nxt = tuple(dict.fromkeys(self.native.fork_next(run_id, at)))
            found = NativeInterrupt.read(record.interrupt, run_id=run_id)
            if found is not None and found.kind == "node":
                for one in found.pending:
                    mapped = Interrupt(one.payload, one.id or "")
                    asked[one.node or ""] = (*asked.get(one.node or "", ()), mapped)
                    interrupts += (mapped,)
                    if one.node and one.node not in nxt:
                        nxt = (*nxt, one.node)
        elif step is not None and at < record.last_step:
            nxt = tuple(dict.fromkeys(self.native.fork_next(run_id, at)))
        # The tasks the next step runs, a node once (as LangGraph lists a pulled node).
        tasks = tuple(
            PregelTask(
                id=f"{run_id}:{at + 1}:{node}",
                name=node,
                path=("__pregel_pull", node),
                interrupts=asked.get(node, ()),
            )
            for node in nxt
        )
        cfg = {"configurable": {"thread_id": thread, "checkpoint_id": f"{run_id}:{at}"}}
        return StateSnapshot(
            values=self._values(state),
            next=nxt,
            config=cfg,
            metadata={"step": at, "run_id": run_id},
            created_at=record.updated_at,
            tasks=tasks,
            interrupts=interrupts,
        )

    def update_state(
        self,
        config: Mapping[str, Any],
        values: Mapping[str, Any] | None,
        as_node: str | None = None,
    ) -> dict[str, Any]:
        """Write ``values`` as if ``as_node`` had (through the reducers). The thread then
        continues from a new run forked from its latest step (stargraph runs are
        append-only): ``invoke(None, config)`` runs what comes next."""
        thread = self._need_thread(config, "update_state")
        run_id = self._head(thread)
        if run_id is None:
            raise UsageError(f"thread {thread!r} has no state to update; invoke it first")
        last = self.native.get_run(run_id).last_step
        new = self.native.fork(run_id, last, update=_plain(values or {}), as_node=as_node)
        self._heads[thread] = new
        return {"configurable": {"thread_id": thread, "checkpoint_id": f"{new}:{last + 1}"}}

    def get_state_history(self, config: Mapping[str, Any]) -> Iterator[StateSnapshot]:
        """The thread's checkpoints, newest first (every step of every run on it)."""
        thread = self._need_thread(config, "get_state_history")
        run_id = self._head(thread)
        while run_id is not None:
            record = self.native.get_run(run_id)
            yield self._snapshot(thread, run_id, None)
            for step in range(record.last_step - 1, -1, -1):
                yield self._snapshot(thread, run_id, step)
            run_id = record.parent_run_id

    def get_graph(self) -> Any:
        """The native graph (draw it with ``stargraph.viz``)."""
        return self.native


def _hints(schema: Any) -> dict[str, Any]:
    import typing

    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return dict(schema.model_fields)
    return dict(typing.get_type_hints(schema))


def _plain(input: Any) -> Any:
    if isinstance(input, BaseModel):
        return {k: getattr(input, k) for k in input.model_fields_set}
    return input


def _lg_pending(found: Any) -> tuple[Interrupt, ...]:
    """A native interrupt as LangGraph's list of them: every pending node interrupt under
    its id (what ``Command(resume={id: answer})`` answers), else one without a value."""
    if found.kind != "node":
        return (Interrupt(found.payload, found.id or ""),)
    return tuple(Interrupt(one.payload, one.id or "") for one in found.pending)


def _lg_interrupts(item: Mapping[str, Any]) -> dict[str, Any]:
    found = item.get("__interrupt__") or ()
    return {
        "__interrupt__": tuple(
            Interrupt(getattr(i, "payload", None), str(getattr(i, "id", None) or "")) for i in found
        )
    }


def _changed(out: Any, last: list[Any]) -> bool:
    """Whether a values item filtered by ``output_keys`` shows something new: LangGraph
    yields one only after a step that wrote one of those channels (here: changed them)."""
    if out == last[0]:
        return False
    last[0] = out
    return True


def _output_keys(keys: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if keys is None:
        return None
    return (keys,) if isinstance(keys, str) else tuple(keys)


def InMemorySaver() -> Any:  # noqa: N802 - LangGraph's class name, so ports keep their line
    """LangGraph's in-memory checkpointer, as a fresh :class:`~stargraph.checkpoint.MemoryStore`."""
    from stargraph.checkpoint import MemoryStore

    return MemoryStore()


MemorySaver = InMemorySaver
