"""``StateGraph``: LangGraph's mutable builder, compiled into a native :class:`Graph`."""

from __future__ import annotations

import inspect
import itertools
import typing
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

from stargraph.errors import CompileError, UsageError
from stargraph.graph import END, START, Graph
from stargraph.langgraph._state import build_state_model, is_typeddict
from stargraph.langgraph._types import Command, current_ctx

_LG_NODE_KWARGS = ("retry_policy", "cache_policy", "destinations", "input_schema", "defer")


def _first_param_schema(fn: Callable[..., Any]) -> Any:
    # LangGraph reads a node's input schema from the annotation of its first parameter.
    try:
        hints = typing.get_type_hints(fn)
        params = list(inspect.signature(fn).parameters)
    except Exception:
        return None
    ann = hints.get(params[0]) if params else None
    if is_typeddict(ann) or (isinstance(ann, type) and issubclass(ann, BaseModel)):
        return ann
    return None


def _wants_config(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.name == "config" for p in params)


def _command_destinations(fn: Callable[..., Any]) -> list[str]:
    # ``-> Command[Literal["a", "b"]]`` declares where the node's Command may go.
    try:
        ret = typing.get_type_hints(fn).get("return")
    except Exception:
        return []
    if get_origin(ret) is Command:
        (targets,) = get_args(ret) or (None,)
        if get_origin(targets) is Literal:
            return [str(t) for t in get_args(targets)]
    return []


def _literal_targets(fn: Callable[..., Any]) -> list[str] | None:
    try:
        ret = typing.get_type_hints(fn).get("return")
    except Exception:
        return None
    if get_origin(ret) is Literal:
        return [str(t) for t in get_args(ret)]
    return None


class _View:
    """How a node or router sees the state: a dict of its schema's keys (TypedDict), or
    the schema's model built from them (pydantic)."""

    def __init__(self, schema: Any, state_model: type[BaseModel]) -> None:
        self.keys = tuple(typing.get_type_hints(schema) if is_typeddict(schema) else ())
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            self.keys = tuple(schema.model_fields)
        self.model = schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None
        self.defaults = {k: f.default for k, f in state_model.model_fields.items()}

    def __stargraph_identity__(self) -> dict[str, Any]:
        # What the view shows is its keys and the model it builds: that is its identity.
        model = None if self.model is None else f"{self.model.__module__}:{self.model.__qualname__}"
        return {"keys": list(self.keys), "model": model}

    def __call__(self, state: BaseModel) -> Any:
        values = {k: getattr(state, k) for k in self.keys}
        if self.model is not None:
            return self.model.model_validate(
                {
                    k: v
                    for k, v in values.items()
                    if not (v is None and self.defaults.get(k) is None)
                }
            )
        # An unset channel (None, its default) is absent, as LangGraph's state dict has it.
        return {k: v for k, v in values.items() if not (v is None and self.defaults.get(k) is None)}


def _config_of(ctx: Any) -> dict[str, Any]:
    # LangGraph's RunnableConfig as a node reads it: the thread from the run context (the
    # run's own, its parent's in a subgraph), and the run id.
    configurable: dict[str, Any] = {"run_id": ctx.run_id}
    if ctx.thread_id is not None:
        configurable["thread_id"] = ctx.thread_id
    return {"configurable": configurable}


def _node(fn: Callable[..., Any], view: _View, wants_config: bool) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):

        async def anode(state: Any, ctx: Any) -> Any:
            token = current_ctx.set(ctx)
            try:
                arg = view(state)
                return await (fn(arg, _config_of(ctx)) if wants_config else fn(arg))
            finally:
                current_ctx.reset(token)

        return anode

    def node(state: Any, ctx: Any) -> Any:
        token = current_ctx.set(ctx)
        try:
            arg = view(state)
            return fn(arg, _config_of(ctx)) if wants_config else fn(arg)
        finally:
            current_ctx.reset(token)

    return node


def _router(fn: Callable[..., Any], view: _View) -> Callable[..., Any]:
    def router(state: Any) -> Any:
        return fn(view(state))

    return router


class StateGraph:
    """LangGraph's ``StateGraph``, built on :class:`stargraph.Graph`.

    The builder is mutable as LangGraph's is; :meth:`compile` makes the native graph (its
    ``graph_hash`` names it) and returns a :class:`~stargraph.langgraph.CompiledStateGraph`.
    A ``TypedDict`` state becomes a pydantic model whose fields are every channel the
    state, input, output and node input schemas declare; ``Annotated`` reducers carry over
    (``operator.add`` is ``reducers.append`` on lists, ``reducers.add`` on numbers).
    """

    def __init__(
        self,
        state_schema: Any,
        config_schema: Any = None,
        *,
        input_schema: Any = None,
        output_schema: Any = None,
        context_schema: Any = None,
    ) -> None:
        self.state_schema = state_schema
        self.input_schema = input_schema or state_schema
        self.output_schema = output_schema or state_schema
        self.nodes: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {}
        self.edges: list[tuple[str | tuple[str, ...], str]] = []
        self.branches: list[tuple[str, Callable[..., Any], Any]] = []
        self.entry: list[str] = []
        self.finish: list[str] = []

    # --------------------------------------------------------------------- builder

    def add_node(
        self,
        node: str | Callable[..., Any],
        action: Callable[..., Any] | None = None,
        **kwargs: Any,
    ) -> StateGraph:
        """``add_node("name", fn, retry_policy=, cache_policy=, destinations=,
        input_schema=)``, or ``add_node(fn)`` named by ``fn.__name__``."""
        if not isinstance(node, str):
            action = node
            node = str(getattr(node, "__name__", repr(node)))
        if action is None:
            raise CompileError(
                f"add_node({node!r}) needs a function: add_node({node!r}, fn)",
                subject="stargraph.langgraph.StateGraph",
            )
        unknown = sorted(set(kwargs) - set(_LG_NODE_KWARGS) - {"metadata"})
        if unknown or kwargs.get("defer"):
            raise CompileError(
                f"add_node({node!r}, ...) got {unknown or ['defer']}, which stargraph.langgraph "
                "does not map; use the native Graph.with_node for these",
                subject="stargraph.langgraph.StateGraph",
            )
        if node in self.nodes:
            raise CompileError(
                f"node {node!r} was added twice; give the second one another name",
                subject="stargraph.langgraph.StateGraph",
            )
        self.nodes[node] = (action, kwargs)
        return self

    def add_edge(self, start_key: str | Sequence[str], end_key: str) -> StateGraph:
        """An edge; a list of sources is a join (``end_key`` runs once all have run)."""
        key = start_key if isinstance(start_key, str) else tuple(start_key)
        self.edges.append((key, end_key))
        return self

    def add_conditional_edges(
        self,
        source: str,
        path: Callable[..., Any],
        path_map: Mapping[Hashable, str] | Sequence[str] | None = None,
    ) -> StateGraph:
        """After ``source``, ``path(state)`` picks the next node(s), ``END`` or ``Send``s."""
        self.branches.append((source, path, path_map))
        return self

    def add_sequence(
        self, nodes: Sequence[Callable[..., Any] | tuple[str, Callable[..., Any]]]
    ) -> StateGraph:
        """Add the nodes and chain them in order."""
        names: list[str] = []
        for item in nodes:
            if isinstance(item, tuple):
                self.add_node(item[0], item[1])
                names.append(item[0])
            else:
                self.add_node(item)
                names.append(item.__name__)
        for a, b in itertools.pairwise(names):
            self.add_edge(a, b)
        return self

    def set_entry_point(self, key: str) -> StateGraph:
        """``add_edge(START, key)``."""
        return self.add_edge(START, key)

    def set_finish_point(self, key: str) -> StateGraph:
        """``add_edge(key, END)``."""
        return self.add_edge(key, END)

    def set_conditional_entry_point(
        self,
        path: Callable[..., Any],
        path_map: Mapping[Hashable, str] | Sequence[str] | None = None,
    ) -> StateGraph:
        """``add_conditional_edges(START, path, path_map)``."""
        return self.add_conditional_edges(START, path, path_map)

    # --------------------------------------------------------------------- compile

    def _schemas(self) -> list[Any]:
        schemas = [self.state_schema, self.input_schema, self.output_schema]
        for fn, kwargs in self.nodes.values():
            own = kwargs.get("input_schema") or _first_param_schema(fn)
            if own is not None:
                schemas.append(own)
        return schemas

    def to_graph(
        self,
        name: str = "LangGraph",
        *,
        interrupt_before: Sequence[str] | Literal["*"] = (),
        interrupt_after: Sequence[str] | Literal["*"] = (),
    ) -> Graph[Any]:
        """The native :class:`~stargraph.Graph` this builder describes."""
        model = self.state_model()
        graph: Graph[Any] = Graph(name, state=model)
        state_view = _View(self.state_schema, model)
        before = set(self.nodes) if interrupt_before == "*" else set(interrupt_before)
        after = set(self.nodes) if interrupt_after == "*" else set(interrupt_after)
        for node_id, (fn, kwargs) in self.nodes.items():
            own = kwargs.get("input_schema") or _first_param_schema(fn)
            view = _View(own, model) if own is not None else state_view
            dests = list(kwargs.get("destinations") or ()) or _command_destinations(fn)
            if isinstance(kwargs.get("destinations"), Mapping):
                dests = list(kwargs["destinations"])
            graph = graph.with_node(
                node_id,
                _node(fn, view, _wants_config(fn)),
                retry=kwargs.get("retry_policy"),
                cache=kwargs.get("cache_policy"),
                destinations=dests,
                interrupt_before=node_id in before,
                interrupt_after=node_id in after,
                metadata=kwargs.get("metadata"),
            )
        for source, target in self.edges:
            graph = graph.with_edge(list(source) if isinstance(source, tuple) else source, target)
        for source, path, path_map in self.branches:
            mapping = path_map
            if mapping is None:
                mapping = _literal_targets(path) or [*self.nodes, END]
            graph = graph.with_conditional_edges(source, _router(path, state_view), mapping)
        return graph

    def state_model(self) -> type[BaseModel]:
        """The pydantic model of every channel (see the class docstring)."""
        schema = self.state_schema
        return build_state_model(
            getattr(schema, "__name__", "State"),
            getattr(schema, "__module__", __name__),
            self._schemas(),
        )

    def compile(
        self,
        checkpointer: Any = None,
        *,
        interrupt_before: Sequence[str] | Literal["*"] | None = None,
        interrupt_after: Sequence[str] | Literal["*"] | None = None,
        name: str | None = None,
        store: Any = None,
        cache: Any = None,
        debug: bool = False,
    ) -> Any:
        """Compile: ``checkpointer`` is a stargraph store (``SqliteStore``,
        ``MemoryStore``), ``True`` or LangGraph's ``InMemorySaver``/``MemorySaver`` (both a
        fresh ``MemoryStore``), or ``None`` (no store: no threads, no interrupts). ``cache``
        is accepted and not needed: a node with a ``cache_policy`` is cached whatever it is
        (where the entries live follows the checkpointer); ``debug`` is ignored."""
        from stargraph.langgraph._compiled import CompiledStateGraph, store_of

        if store is not None:
            raise UsageError(
                "compile(store=...) (LangGraph's long-term memory store) is not mapped: keep "
                "such data in a service (Graph.compile(services=...) on builder.to_graph()) "
                "or in the state; checkpointer= is the run store"
            )
        graph = self.to_graph(
            name or "LangGraph",
            interrupt_before=interrupt_before or (),
            interrupt_after=interrupt_after or (),
        )
        app = graph.compile(store=store_of(checkpointer))
        return CompiledStateGraph(self, app)
