"""Authoring: an immutable ``Graph`` builder that produces IR.

Every ``with_*`` call returns a new ``Graph``; nothing is mutated, so a graph can be shared,
extended in two directions, and compared by hash::

    graph = (Graph("demo", state=State)
             .with_node("a", bump).with_node("b", bump)
             .with_edge(START, "a").with_edge("a", "b").with_edge("b", END))
    app = graph.compile()

Callables are referenced in the IR by import path (``module:qualname``); a callable without
one (lambda, closure) needs an explicit ``ref="ns.name"`` id.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import types
import typing
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel

from stargraph._closures import closure_ref, module_global_ref, unhashable_capture
from stargraph.errors import CompileError, Problem, UnreferenceableNodeError
from stargraph.ir import (
    END,
    START,
    CachePolicyIR,
    ClosureIR,
    ConditionalEdgeIR,
    FunctionNodeIR,
    GraphIR,
    NodeId,
    RetryPolicyIR,
    RulePackIR,
    StateSchemaIR,
    StaticEdgeIR,
)
from stargraph.refs import resolve_ref, try_ref_of
from stargraph.runtime._context import Entropy, SystemEntropy
from stargraph.runtime._executor import DEFAULT_MAX_STEPS
from stargraph.runtime._plan import Send
from stargraph.runtime._schemas import Private, RemainingSteps
from stargraph.state import schema_ir

if TYPE_CHECKING:
    import pluggy

    from stargraph.checkpoint import CheckpointStore
    from stargraph.runtime import CompiledGraph
    from stargraph.skills import NestingProfile

__all__ = ["END", "Graph", "Private", "RemainingSteps", "START", "Send"]

StateT = TypeVar("StateT", bound=BaseModel)


class _Mountable(typing.Protocol):
    """Anything ``with_node`` accepts besides a callable (e.g. ``SubgraphNode``)."""

    def mount(
        self, graph: Graph[Any]
    ) -> tuple[Any, Mapping[str, GraphIR], Mapping[str, Callable[..., Any]]]:
        """Return the node IR, the child IRs (hash -> GraphIR) it needs embedded, and the
        callables the child graphs name by registry id."""
        ...


def _router_targets(router: Callable[..., Any]) -> dict[str, str] | None:
    """Targets from a router's ``Literal[...]`` return annotation, if it has one."""
    try:
        hints = typing.get_type_hints(router)
    except Exception:
        return None
    ret = hints.get("return")
    if ret is None:
        return None
    options: list[Any] = []
    stack = [ret]
    while stack:
        tp = stack.pop()
        if get_origin(tp) is Literal:
            options.extend(get_args(tp))
        elif get_args(tp):
            stack.extend(get_args(tp))
    names = [o for o in options if isinstance(o, str)]
    return {n: n for n in names} or None


class Graph(Generic[StateT]):
    """An immutable graph under construction; ``to_ir()`` gives its IR, ``compile()`` runs it.

    ``Graph(name, state=Model)`` starts an empty graph; ``Graph(ir)`` continues from an IR
    (its callables are imported by reference, or taken from ``impls``). ``input=In`` and
    ``output=Out`` (module-level pydantic models whose fields are state fields) are the
    graph's boundary: a run's input must fit ``In``, and ``invoke``/``resume`` return an
    ``Out`` built from the final state. A state field annotated ``Annotated[T, Private]`` is
    a private channel (see :data:`Private`); one annotated ``Annotated[int, RemainingSteps]``
    shows every node the step budget left (see :data:`RemainingSteps`).
    """

    __slots__ = (
        "_edges",
        "_entry",
        "_impls",
        "_io",
        "_meta",
        "_name",
        "_nodes",
        "_rules",
        "_state",
        "_state_ir",
        "_state_ref",
        "_subgraphs",
    )

    def __init__(
        self,
        name_or_ir: str | GraphIR,
        *,
        state: type[StateT] | None = None,
        impls: Mapping[str, Callable[..., Any]] | None = None,
        metadata: Mapping[str, Any] | None = None,
        input: type[BaseModel] | None = None,
        output: type[BaseModel] | None = None,
    ) -> None:
        self._impls: dict[str, Callable[..., Any]] = dict(impls or {})
        # The refs of the input and output models (Graph(..., input=, output=)).
        self._io: tuple[str | None, str | None] = (
            _model_ref("input", input, name_or_ir),
            _model_ref("output", output, name_or_ir),
        )
        if isinstance(name_or_ir, GraphIR):
            ir = name_or_ir
            self._name = ir.name
            self._state_ref = ir.state.ref
            # Keep the IR's own state description: if the model changed since, compile()
            # must notice instead of silently hashing the new model.
            self._state_ir: StateSchemaIR | None = ir.state
            self._state: type[StateT] | None = state or _import_state(ir.state)
            self._nodes: tuple[Any, ...] = tuple(ir.nodes)
            self._edges: tuple[Any, ...] = tuple(ir.edges)
            self._entry: tuple[str, ...] = tuple(ir.entry)
            self._rules: tuple[RulePackIR, ...] = tuple(ir.rule_packs)
            self._subgraphs: dict[str, GraphIR] = dict(ir.subgraphs)
            self._meta: dict[str, Any] = dict(metadata or ir.metadata)
            self._io = (self._io[0] or ir.input_model, self._io[1] or ir.output_model)
            return
        if state is None or not (isinstance(state, type) and issubclass(state, BaseModel)):
            raise CompileError.at(
                "/state",
                f"state must be a pydantic BaseModel subclass, got {state!r}",
                "pass state=YourModel where YourModel subclasses pydantic.BaseModel",
                subject=f"graph {name_or_ir!r}",
            )
        self._name = name_or_ir
        self._state = state
        self._state_ir = None
        ref = try_ref_of(state)
        self._state_ref = (
            ref if isinstance(ref, str) else f"{state.__module__}:{state.__qualname__}"
        )
        self._nodes = ()
        self._edges = ()
        self._entry = ()
        self._rules = ()
        self._subgraphs = {}
        self._meta = dict(metadata or {})

    # ------------------------------------------------------------------ copy-on-write

    def _replace(self, **changes: Any) -> Graph[StateT]:
        new = object.__new__(type(self))
        for slot in Graph.__slots__:
            setattr(new, slot, changes.get(slot, getattr(self, slot)))
        return new

    @property
    def name(self) -> str:
        """The graph's name."""
        return self._name

    @property
    def state(self) -> type[StateT]:
        """The state model."""
        assert self._state is not None  # set in __init__ or imported from the IR
        return self._state

    @property
    def impls(self) -> Mapping[str, Callable[..., Any]]:
        """Callables known by ref (import path or registry id) in this graph."""
        return dict(self._impls)

    # ------------------------------------------------------------------ authoring

    def with_node(
        self,
        node: str | _Mountable,
        fn: Callable[..., Any] | None = None,
        *,
        ref: str | None = None,
        config: Mapping[str, Any] | None = None,
        writes: Sequence[str] | None = None,
        retry: RetryPolicyIR | None = None,
        timeout_s: float | None = None,
        blocking: bool = False,
        inline: bool = False,
        interrupt_before: bool = False,
        interrupt_after: bool = False,
        must_stub: bool = False,
        rules: Sequence[Any] = (),
        metadata: Mapping[str, Any] | None = None,
        input: type[BaseModel] | None = None,
        destinations: Sequence[str] = (),
        factory: tuple[Callable[..., Any] | str, Mapping[str, Any]] | None = None,
        cache: CachePolicyIR | None = None,
    ) -> Graph[StateT]:
        """Add a node: ``with_node("id", fn)`` for a callable, or ``with_node(SubgraphNode...)``.

        ``fn(state)`` or ``fn(state, ctx)`` returns a mapping of channel writes (or ``None``);
        it may be ``async``. ``writes`` declares the channels it may write (checked at
        compile and run time). The tasks of a step with several tasks run concurrently:
        sync nodes on the graph's worker threads, async nodes on the run's event loop.
        ``inline=True`` keeps a tiny pure sync node on the driver's thread instead (no thread
        hop); ``blocking=True`` marks a sync node that blocks (I/O, a lock, a sleep, heavy
        CPU), which is what ``compile(executor=...)`` ships to its executor. Mark every such
        node: under ``ainvoke``/``astream`` a step whose tasks are all sync and not
        ``blocking`` (nor timed) runs on the event loop's thread, as ``invoke`` runs it on
        the caller's, holding the loop until the step is over; a ``blocking`` node's step
        runs its sync tasks on worker threads instead, the loop free meanwhile.

        ``input=Model`` (a pydantic model defined at module level) gives the node a private
        input: it receives a ``Model`` instance instead of the state, validated from the
        ``Send`` payload of its task (which may carry keys that are not state fields) or, when
        it is reached without one, from the state's fields that ``Model`` declares. The
        model's import path is part of the graph hash.

        ``destinations=[...]`` lists the nodes (or ``END``) a :class:`~stargraph.Command`
        the node returns may ``goto``: edges of the graph, validated, drawn and hashed like
        any other. A node with no outgoing edge at all ends the run after it.

        ``fn`` may be a closure or a lambda (``make_agent("bob")``): the graph hash then
        covers its code and captured values (see ``docs/concepts`` on closures), and the run
        works in this process. ``factory=(make_agent, {"name": "bob"})`` builds the node by
        calling ``make_agent(name="bob")`` and records that call in the IR, so that another
        process (a worker, ``stargraph resume``) builds the same closure again.

        ``cache=CachePolicy(...)`` serves the node's writes from a cache when it runs again
        on the same input (see :class:`~stargraph.ir.CachePolicyIR`).
        """
        if not isinstance(node, str):
            node_ir, children, child_impls = node.mount(self)
            return self._replace(
                _nodes=(*self._nodes, node_ir),
                _subgraphs={**self._subgraphs, **children},
                _impls={**child_impls, **self._impls},
            )
        closure = None
        if factory is not None:
            fn, ref, closure = _factory_product(node, factory, fn, ref, self._name)
        if fn is None:
            raise CompileError.at(
                f"/nodes/{node}",
                "no callable given",
                "call with_node(id, fn) with the node's function",
                subject=f"graph {self._name!r}",
            )
        if ref is None and closure is None:
            ref, closure = _closure_of(node, fn, self._name)
        ref, impls = self._referenced(
            fn, ref, f"/nodes/{node}", f"node {node!r} of graph {self._name!r}"
        )
        input_ref = None if input is None else _input_ref(node, input, self._name)
        node_ir = FunctionNodeIR(
            id=NodeId(node),
            ref=ref,
            input=input_ref,
            destinations=tuple(destinations),
            closure=closure,
            cache=None if cache is None else _cache_ir(node, cache, self._name),
            config=dict(config or {}),
            writes=tuple(writes) if writes is not None else None,
            retry=retry,
            timeout_s=timeout_s,
            blocking=blocking,
            inline=inline,
            interrupt_before=interrupt_before,
            interrupt_after=interrupt_after,
            must_stub=must_stub,
            rules=tuple(_pack_ir(p) for p in rules),
            metadata=dict(metadata or {}),
        )
        return self._replace(_nodes=(*self._nodes, node_ir), _impls=impls)

    def _referenced(
        self, fn: Callable[..., Any], ref: str | None, pointer: str, subject: str
    ) -> tuple[str, dict[str, Callable[..., Any]]]:
        """How the IR names ``fn``, and the impls that resolve it: its import path, or the
        registry id ``ref`` given for it (the callable then travels in the impls)."""
        if ref is not None:
            return ref, {**self._impls, ref: fn}
        found = try_ref_of(fn)
        if isinstance(found, Problem):
            raise UnreferenceableNodeError(
                [Problem(pointer, found.message, found.hint)], subject=subject
            )
        return found, self._impls

    def with_edge(self, source: str | Sequence[str], target: str) -> Graph[StateT]:
        """``source -> target``; a list of sources is a join (target runs once after all)."""
        sources = (source,) if isinstance(source, str) else tuple(source)
        if sources == (START,):
            return self._replace(_entry=(*self._entry, target))
        edge = StaticEdgeIR(sources=sources, target=target)
        return self._replace(_edges=(*self._edges, edge))

    def with_entry(self, node: str) -> Graph[StateT]:
        """Same as ``with_edge(START, node)``."""
        return self.with_edge(START, node)

    def with_conditional_edges(
        self,
        source: str,
        router: Callable[..., Any] | None = None,
        mapping: Mapping[Hashable, str] | Sequence[str] | None = None,
        *,
        ref: str | None = None,
        factory: tuple[Callable[..., Any] | str, Mapping[str, Any]] | None = None,
    ) -> Graph[StateT]:
        """After ``source``, call ``router(state)`` to choose what runs next.

        The router returns a key of ``mapping`` (or several), ``END``, or ``Send`` objects.
        ``mapping`` may be a dict, a list of node ids, or omitted when the router's return
        annotation is a ``Literal[...]`` of node ids. The router may be a closure or a lambda,
        and ``factory=(make_router, {json args})`` builds it, as for ``with_node``.
        """
        closure = None
        if factory is not None:
            router, ref, closure = _factory_product((source,), factory, router, ref, self._name)
        elif ref is None and router is not None:
            ref, closure = _closure_of((source,), router, self._name)
        if router is None:
            raise CompileError.at(
                f"/edges/{source}",
                "no router given",
                "pass with_conditional_edges(source, router, ...) or factory=(make_router, {...})",
                subject=f"graph {self._name!r}",
            )
        ref, impls = self._referenced(
            router, ref, f"/edges/{source}", f"router of {source!r} in graph {self._name!r}"
        )
        if mapping is None:
            targets = _router_targets(router)
            if targets is None:
                raise CompileError.at(
                    f"/edges/{source}",
                    f"router {ref!r} has no mapping and no Literal return annotation",
                    "pass mapping={result: node_id} (or a list of node ids), or "
                    "annotate the router as returning Literal['a', 'b']",
                    subject=f"graph {self._name!r}",
                )
        elif isinstance(mapping, Mapping):
            targets = {str(k): v for k, v in mapping.items()}
        else:
            targets = {t: t for t in mapping}
        edge = ConditionalEdgeIR(source=source, router=ref, mapping=targets, closure=closure)
        return self._replace(_edges=(*self._edges, edge), _impls=impls)

    def with_rules(self, *packs: Any) -> Graph[StateT]:
        """Mount rule packs (``fathom.RulePack`` or ``RulePackIR``) on the whole graph.

        After every step the packs decide continue / goto / halt / interrupt; their source
        text is part of the graph hash.
        """
        return self._replace(_rules=(*self._rules, *(_pack_ir(p) for p in packs)))

    def with_metadata(self, **metadata: Any) -> Graph[StateT]:
        """Attach cosmetic metadata (not part of the hash)."""
        return self._replace(_meta={**self._meta, **metadata})

    # ------------------------------------------------------------------ output

    def to_ir(self) -> GraphIR:
        """The IR of this graph (not validated: ``compile()`` reports every problem)."""
        return GraphIR(
            name=self._name,
            state=self._state_ir or schema_ir(self.state, self._state_ref),
            nodes=self._nodes,
            edges=self._edges,
            entry=self._entry,
            rule_packs=self._rules,
            subgraphs=self._subgraphs,
            input_model=self._io[0],
            output_model=self._io[1],
            metadata=self._meta,
        )

    @property
    def graph_hash(self) -> str:
        """Shortcut for ``to_ir().graph_hash``."""
        return self.to_ir().graph_hash

    def compile(
        self,
        *,
        store: CheckpointStore | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        entropy: Callable[[], Entropy] = SystemEntropy,
        durability: Literal["sync", "exit"] = "sync",
        snapshot_every: int = 50,
        on_code_change: Literal["warn", "error"] = "warn",
        services: Mapping[str, Any] | None = None,
        plugins: pluggy.PluginManager | None = None,
        executor: concurrent.futures.Executor | None = None,
        nesting: NestingProfile | None = None,
    ) -> CompiledGraph[StateT]:
        """Validate the graph (every problem at once) and return a runnable ``CompiledGraph``.

        ``store`` makes runs durable (every step checkpointed; ``durability="exit"`` writes
        a run only when it stops, ``snapshot_every`` steps apart a full state snapshot is
        stored between per-step deltas); ``max_steps`` bounds a run's supersteps;
        ``entropy`` makes the clock, uuids and random numbers nodes draw (``SeededEntropy``
        for reproducible runs); ``on_code_change`` decides whether resuming a run made by
        different node source code warns or raises. ``services`` are live objects nodes
        reach through ``ctx.services`` (a chat model, a tool arbiter; not part of the hash);
        ``plugins`` (``stargraph.plugin.get_plugin_manager()``) observe every run event;
        ``executor`` (a ``concurrent.futures.Executor``) runs ``blocking=True`` branch work
        in other processes; ``nesting`` (a ``stargraph.skills.NestingProfile``) bounds how
        deep embedded skills nest. See :func:`stargraph.compile.compile_ir`.
        """
        from stargraph.compile import RunOptions, compile_ir

        options = RunOptions(
            store=store,
            max_steps=max_steps,
            entropy=entropy,
            durability=durability,
            snapshot_every=snapshot_every,
            on_code_change=on_code_change,
            services=services,
            plugins=plugins,
            executor=executor,
            nesting=nesting,
        )
        return compile_ir(self.to_ir(), state=self.state, impls=self.impls, options=options)

    def __repr__(self) -> str:
        return f"Graph({self._name!r}, nodes={[n.id for n in self._nodes]})"


def _model_ref(label: str, model: Any, graph: Any) -> str | None:
    """The import path of a graph's input or output model."""
    if model is None:
        return None
    name = graph if isinstance(graph, str) else graph.name
    if not (inspect.isclass(model) and issubclass(model, BaseModel)):
        raise CompileError.at(
            f"/{label}_model",
            f"{label}={model!r} is not a pydantic model",
            f"pass {label}=Model where Model subclasses pydantic.BaseModel",
            subject=f"graph {name!r}",
        )
    found = try_ref_of(model)
    if isinstance(found, Problem):
        raise UnreferenceableNodeError.at(
            f"/{label}_model",
            f"{label} model {model.__qualname__!r} cannot be referenced by import path",
            f"define the {label} model at module level",
            subject=f"graph {name!r}",
        )
    return found


def _site(node: str | tuple[str], graph: str) -> tuple[str, str]:
    """Pointer and subject of an error about a node, or (``(source,)``) a router."""
    if isinstance(node, tuple):
        return f"/edges/{node[0]}", f"router of {node[0]!r} in graph {graph!r}"
    return f"/nodes/{node}", f"node {node!r} of graph {graph!r}"


def _closure_of(
    node: str | tuple[str], fn: Callable[..., Any], graph: str
) -> tuple[str | None, ClosureIR | None]:
    """A node function without an import path of its own (a lambda, a closure): its registry
    id and the digest of its code and captures that the graph hash covers."""
    if isinstance(try_ref_of(fn), str) or not isinstance(fn, types.FunctionType):
        return None, None  # importable, or not a Python function (the usual error follows)
    where, subject = _site(node, graph)
    digest = unhashable_capture(fn, where, subject)
    # Bound to one global name of its module, another process imports it by that name.
    found = module_global_ref(fn)
    return found or closure_ref(fn, digest), ClosureIR(code=digest)


def _factory_product(
    node: str | tuple[str],
    factory: tuple[Callable[..., Any] | str, Mapping[str, Any]],
    fn: Callable[..., Any] | None,
    ref: str | None,
    graph: str,
) -> tuple[Callable[..., Any], str, ClosureIR]:
    """Build a node with ``factory``: the product, its registry id, and the IR's record of
    the call (factory import path, JSON arguments, product digest)."""
    where, subject = _site(node, graph)
    where = f"{where}/factory"
    if fn is not None or ref is not None:
        raise CompileError.at(
            where,
            "factory= builds the node's callable, so fn and ref= must not be given too",
            "pass either with_node(id, fn) or with_node(id, factory=(make_fn, {...}))",
            subject=subject,
        )
    if not (isinstance(factory, tuple) and len(factory) == 2 and isinstance(factory[1], Mapping)):
        raise CompileError.at(
            where,
            f"factory={factory!r} is not a (factory, {{keyword: JSON}}) pair",
            "pass factory=(make_agent, {'name': 'bob'})",
            subject=subject,
        )
    make, args = factory
    if isinstance(make, str):
        factory_ref = make
        make = resolve_ref(make)
    else:
        found = try_ref_of(make)
        if isinstance(found, Problem):
            raise UnreferenceableNodeError.at(
                where,
                f"the factory {found.message}",
                "define the factory at module level, so that another process can import it",
                subject=subject,
            )
        factory_ref = found
    product = make(**args)
    if not callable(product):
        raise CompileError.at(
            where,
            f"factory {factory_ref!r} returned {type(product).__name__}, not a callable",
            "make the factory return the node's function",
            subject=subject,
        )
    digest = unhashable_capture(product, where, subject)
    try:
        closure = ClosureIR(code=digest, factory=factory_ref, args=dict(args))
    except CompileError as exc:
        raise CompileError.at(
            f"{where}/args",
            f"the factory's arguments are not JSON: {exc.problems[0].message}",
            "pass JSON arguments (strings, numbers, lists, dicts); build other objects "
            "inside the factory",
            subject=subject,
        ) from exc
    return product, closure_ref(product, digest), closure


def _cache_ir(node: str, cache: Any, graph: str) -> CachePolicyIR:
    """The node's cache policy, its key function named by import path."""
    if not isinstance(cache, CachePolicyIR):
        raise CompileError.at(
            f"/nodes/{node}/cache",
            f"cache={cache!r} is not a CachePolicy",
            "pass cache=CachePolicy(key=module_level_fn, ttl_s=60)",
            subject=f"node {node!r} of graph {graph!r}",
        )
    return cache


def _input_ref(node: str, model: Any, graph: str) -> str:
    """The import path of a node's input model, or the error saying why it has none."""
    where = f"/nodes/{node}/input"
    if not (inspect.isclass(model) and issubclass(model, BaseModel)):
        raise CompileError.at(
            where,
            f"input={model!r} is not a pydantic model",
            "pass a BaseModel subclass describing what the node receives",
            subject=f"node {node!r} of graph {graph!r}",
        )
    found = try_ref_of(model)
    if isinstance(found, Problem):
        raise UnreferenceableNodeError.at(
            where,
            f"input model {model.__qualname__!r} cannot be referenced by import path",
            "define the input model at module level",
            subject=f"node {node!r} of graph {graph!r}",
        )
    return found


def _pack_ir(pack: Any) -> RulePackIR:
    if isinstance(pack, RulePackIR):
        return pack
    return RulePackIR(id=pack.id, version=pack.version, source=pack.source)


def _import_state(schema: StateSchemaIR) -> Any:
    try:
        model = resolve_ref(schema.ref)
    except (ImportError, AttributeError) as exc:
        raise CompileError.at(
            "/state/ref",
            f"cannot import state model {schema.ref!r}: {exc}",
            "make the module importable, or pass Graph(ir, state=Model)",
            subject="graph IR",
        ) from exc
    if not (inspect.isclass(model) and issubclass(model, BaseModel)):
        raise CompileError.at(
            "/state/ref",
            f"{schema.ref!r} is not a pydantic model",
            "point state.ref at a pydantic BaseModel subclass",
            subject="graph IR",
        )
    return model
