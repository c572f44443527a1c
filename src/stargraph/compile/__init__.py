"""The compiler: validate a graph's IR and build the executor's plan.

:func:`compile_ir` compiles an IR with its state model and callables: ``Graph.compile()``
hands it the graph's, and an IR loaded from JSON comes with its own. It collects every
problem into one :class:`~stargraph.errors.CompileError`. It never imports the authoring API
(``stargraph.graph``), which imports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from stargraph.checkpoint._node_cache import NodeCache, node_cache_of
from stargraph.compile._boundary import boundary_of
from stargraph.compile._inputs import input_models
from stargraph.compile._options import RunOptions
from stargraph.compile._requires import unmet_requires
from stargraph.compile._subgraphs import site_of, subgraph_problems
from stargraph.compile._validate import is_async_callable, validate_ir
from stargraph.errors import CompileError, Problem, SkillValidationError, UndeclaredOutputError
from stargraph.ir import (
    START,
    ConditionalEdgeIR,
    FunctionNodeIR,
    GraphIR,
    RulePackIR,
    StaticEdgeIR,
    SubgraphNodeIR,
)
from stargraph.refs import resolve_ref
from stargraph.runtime import CompiledGraph
from stargraph.runtime._cache import cache_problems, cached
from stargraph.runtime._context import ServiceMap
from stargraph.runtime._plan import JoinSpec, NodeSpec, Plan, RouterSpec, accepts_ctx
from stargraph.runtime._protocols import Warmable
from stargraph.runtime._rules import DecisionMaker, RuleSet
from stargraph.runtime._run import MAX_STEPS_BOUND, max_steps_problem
from stargraph.runtime._schemas import fill_managed, fill_managed_router, hide_private
from stargraph.state import build_channels

if TYPE_CHECKING:
    import pluggy

    from stargraph.checkpoint import CheckpointStore
    from stargraph.runtime import Event

__all__ = ["RunOptions", "compile_ir"]

StateT = TypeVar("StateT", bound=BaseModel)

_DEFAULTS = RunOptions()


def compile_ir(
    ir: GraphIR,
    *,
    state: type[StateT],
    impls: Mapping[str, Callable[..., Any]] | None = None,
    options: RunOptions = _DEFAULTS,
) -> CompiledGraph[StateT]:
    """Validate ``ir`` against ``state`` and the callables it references; build the plan.

    ``options`` (a :class:`RunOptions`, what ``Graph.compile(...)`` takes) are checked with
    the graph: every problem is reported at once. ``store`` makes runs durable (every step
    checkpointed; ``durability="exit"`` writes a run only when it stops); ``snapshot_every``
    sets how often a full state snapshot is stored between per-step deltas;
    ``on_code_change`` decides whether resuming a run made by different node source code
    warns or raises. ``services`` are live objects nodes reach through ``ctx.services`` (a
    chat model, a tool arbiter); they are not part of the hash. ``plugins`` (a pluggy manager
    from ``stargraph.plugin.get_plugin_manager``) receives every run event through its
    ``on_event`` hook. ``executor`` (any ``concurrent.futures.Executor``: a process pool,
    ``stargraph.runtime.ray.RayExecutor``, Dask's) runs the tasks of sync ``blocking=True``
    nodes of steps with several tasks in other processes; such nodes must be importable by
    path and pure functions of state and config (see ``runtime._remote``). ``nesting`` (a
    :class:`~stargraph.skills.NestingProfile`) sets how deep embedded subgraphs may nest
    (default: ``stargraph.skills.DEFAULT_NESTING``'s 16 levels).
    """
    max_steps, services, executor = options.max_steps, options.services, options.executor
    nesting = options.nesting
    impls = dict(impls or {})
    problems, resolved = validate_ir(ir, impls, state)
    inputs = input_models(ir, impls, problems, remote=executor is not None)
    if options.store is None:
        for i, node in enumerate(ir.nodes):
            if node.interrupt_before or node.interrupt_after:
                problems.append(
                    Problem(
                        f"/nodes/{i}",
                        f"node {node.id!r} interrupts the run, which needs a checkpoint store "
                        "to keep it in while it waits",
                        "compile(store=SqliteStore('.stargraph/stargraph.db')) or "
                        "compile(store=MemoryStore())",
                    )
                )
    rules = _rules_factory(ir, state, problems)
    cache_issues, cache_keys = cache_problems(ir)
    problems.extend(cache_issues)
    boundary_issues, boundary = boundary_of(ir, state, impls)
    problems.extend(boundary_issues)
    if nesting is not None and type(getattr(nesting, "max_depth", None)) is not int:
        problems.append(
            Problem(
                "/",
                f"nesting={nesting!r} is not a nesting profile",
                "pass nesting=stargraph.skills.NestingProfile(max_depth=...)",
            )
        )
        nesting = None
    nested = subgraph_problems(ir, set(state.model_fields), nesting)
    problems.extend(nested.problems)
    skill_rules = _mounted_skill_problems(ir, services)
    # Not a compile error: a graph compiled to be inspected, or to replay a run (whose record
    # answers every service call), rightly lacks services. Live runs refuse to start.
    unmet = unmet_requires(ir, services or {})
    if executor is not None:
        from stargraph.runtime._remote import remote_problems

        problems.extend(remote_problems(ir, resolved.callables))
    if options.snapshot_every < 1:
        problems.append(
            Problem("/", f"snapshot_every={options.snapshot_every} must be >= 1", "pass 1 or more")
        )
    steps_problem = max_steps_problem(max_steps)
    if steps_problem is not None:
        problems.append(
            Problem("/", steps_problem, f"pass compile(max_steps=...) from 1 to {MAX_STEPS_BOUND}")
        )
    if skill_rules:
        raise SkillValidationError(
            [*skill_rules, *nested.undeclared, *problems], subject=f"graph {ir.name!r}"
        )
    if nested.undeclared:
        raise UndeclaredOutputError([*nested.undeclared, *problems], subject=f"graph {ir.name!r}")
    if problems:
        raise CompileError(problems, subject=f"graph {ir.name!r}")
    fns = resolved.callables
    channels = build_channels(state, ir.state)
    if nesting is not options.nesting:  # a bad profile was reported: children ignore it too
        options = dataclasses.replace(options, nesting=nesting)

    def router_spec(edge: ConditionalEdgeIR) -> RouterSpec:
        fn = fns[edge.router]
        takes_ctx = bool(accepts_ctx(fn))
        if boundary.managed:
            # A router sees the managed values as the node it follows saw them.
            fn, takes_ctx = fill_managed_router(fn, boundary.managed, takes_ctx), True
        return RouterSpec(
            ref=edge.router,
            fn=fn,
            mapping=dict(edge.mapping),
            takes_ctx=takes_ctx,
            is_async=is_async_callable(fn),
        )

    static_next: dict[str, list[str]] = {n.id: [] for n in ir.nodes}
    routers: dict[str, list[RouterSpec]] = {n.id: [] for n in ir.nodes}
    joins: dict[str, list[JoinSpec]] = {n.id: [] for n in ir.nodes}
    start_routers: list[RouterSpec] = []
    for index, edge in enumerate(ir.edges):
        if isinstance(edge, StaticEdgeIR):
            if len(edge.sources) == 1:
                static_next[edge.sources[0]].append(edge.target)
            else:
                join = JoinSpec(index, frozenset(edge.sources), edge.target)
                for source in edge.sources:
                    joins[source].append(join)
        elif edge.source == START:
            start_routers.append(router_spec(edge))
        else:
            routers[edge.source].append(router_spec(edge))

    specs: dict[str, NodeSpec] = {}
    # One cache for the graph's cached nodes: the store's (entries shared with every graph on
    # it), or, from a store that keeps none, this compiled graph's own.
    node_cache: NodeCache | None = None
    for node in ir.nodes:
        if isinstance(node, FunctionNodeIR):
            fn = fns[node.ref]
            ref = node.ref
            takes_ctx = bool(accepts_ctx(fn))
            is_async = is_async_callable(fn)
            config = dict(node.config)
            if node.cache is not None:
                if node_cache is None:
                    node_cache = node_cache_of(options.store)
                fn = cached(node, fn, takes_ctx, cache_keys.get(node.id), node_cache)
                takes_ctx = True
            hidden = {
                k: v
                for k, v in boundary.private.items()
                if k not in set(node.writes or ()) and k not in boundary.managed
            }
            if hidden and node.input is None:  # an input model shows only what it declares
                fn = hide_private(fn, hidden, takes_ctx)
            if boundary.managed and node.input is None:
                fn = fill_managed(fn, boundary.managed, takes_ctx)
                takes_ctx = True
        else:
            fn = _subgraph_runner(ir, node, impls, channels, options)
            ref, takes_ctx, is_async, config = f"subgraph:{node.graph}", True, False, {}
        specs[node.id] = NodeSpec(
            kind="function" if isinstance(node, FunctionNodeIR) else "subgraph",
            id=node.id,
            fn=fn,
            ref=ref,
            takes_ctx=takes_ctx,
            is_async=is_async,
            blocking=node.blocking,
            inline=node.inline,
            writes=frozenset(node.writes) if node.writes is not None else None,
            timeout_s=node.timeout_s,
            retry=node.retry,
            config=config,
            interrupt_before=node.interrupt_before,
            interrupt_after=node.interrupt_after,
            # Replay serves a cached node's recorded writes, whether they came from the cache.
            must_stub=node.must_stub or getattr(node, "cache", None) is not None,
            static_next=tuple(sorted(set(static_next[node.id]))),
            routers=tuple(routers[node.id]),
            joins=tuple(joins[node.id]),
            destinations=frozenset(node.destinations),
            input=inputs.get(node.id),
        )
    # Set-up a service can do ahead (a chat model's client) is done here, where the user
    # already waits, not in the middle of the first run's first call.
    for service in (services or {}).values():
        if isinstance(service, Warmable):
            service.warm()
    plan = Plan(
        ir=ir,
        state_model=state,
        channels=channels,
        specs=specs,
        start_routers=tuple(start_routers),
        rules=rules,
        services=ServiceMap(services or {}),
        unmet_requires=tuple(unmet),
        input_model=boundary.input_model,
        output_model=boundary.output_model,
        private=boundary.private,
        managed=boundary.managed,
    )
    return CompiledGraph(
        plan,
        options,
        on_event=_event_hook(options.plugins),
        executor=executor,
        rebuild=_rebuilder(ir, state, impls, options),
    )


def _rebuilder(
    ir: GraphIR,
    state: type[StateT],
    impls: Mapping[str, Callable[..., Any]] | None,
    options: RunOptions,
) -> Callable[[CheckpointStore | None, int], CompiledGraph[StateT]]:
    """What ``CompiledGraph.with_store`` calls: this compilation again, from the same
    callables and options but for the store and the step limit."""

    def rebuild(store: CheckpointStore | None, max_steps: int) -> CompiledGraph[StateT]:
        changed = dataclasses.replace(options, store=store, max_steps=max_steps)
        return compile_ir(ir, state=state, impls=impls, options=changed)

    return rebuild


def _mounted_skill_problems(ir: GraphIR, services: Mapping[str, Any] | None) -> list[Problem]:
    """The kind's tool rule again for every skill mounted in ``ir`` whose node records its
    kind and tools: tools are judged by the built-in tools and those of the arbiter in
    ``services``."""
    mounted = [
        (i, node)
        for i, node in enumerate(ir.nodes)
        if isinstance(node, SubgraphNodeIR) and "skill_kind" in node.metadata
    ]
    if not mounted:
        return []  # the common case costs no import of the skills package
    from stargraph.skills import builtin_side_effects, mounted_skill_problems

    registry = getattr((services or {}).get("arbiter"), "registry", None)
    side_effects = builtin_side_effects(registry)
    problems: list[Problem] = []
    for i, node in mounted:
        child = ir.subgraphs.get(node.graph)
        if child is not None:  # a missing child is reported by subgraph_problems
            problems += mounted_skill_problems(node, child, side_effects, pointer=f"/nodes/{i}")
    return problems


def _event_hook(plugins: pluggy.PluginManager | None) -> Callable[[Event], None] | None:
    """``plugins.hook.on_event`` when some plugin implements it."""
    if plugins is None or not plugins.hook.on_event.get_hookimpls():
        return None
    hook = plugins.hook.on_event
    return lambda event: hook(event=event)


def _subgraph_runner(
    ir: GraphIR,
    node: SubgraphNodeIR,
    impls: Mapping[str, Callable[..., Any]],
    channels: Mapping[str, Any],
    options: RunOptions,
) -> Callable[..., Any]:
    """Compile the embedded child and wrap it as the node's callable."""
    from stargraph.nodes._runner import SubgraphRunner

    child_ir = ir.subgraphs[node.graph]
    try:
        child_state = resolve_ref(child_ir.state.ref)
        child = compile_ir(
            child_ir,
            state=child_state,
            impls=impls,
            options=options.for_child(max_steps=node.max_steps),
        )
    except (ImportError, AttributeError) as exc:
        raise CompileError.at(
            f"/subgraphs/{node.graph}/state/ref",
            f"cannot import the state model {child_ir.state.ref!r} of subgraph "
            f"{child_ir.name!r}: {exc}",
            "make the module importable",
            subject=f"graph {ir.name!r}",
        ) from exc
    except CompileError as exc:
        raise type(exc)(
            [
                Problem(f"/subgraphs/{node.graph}{p.pointer}", p.message, p.hint)
                for p in exc.problems
            ],
            subject=f"graph {ir.name!r}",
        ) from exc
    return SubgraphRunner(
        child,
        node_id=node.id,
        site=site_of(node),
        inputs=node.inputs,
        outputs=node.outputs,
        parent_channels=channels,
        bubble_events=node.bubble_events,
    )


def _successors(ir: GraphIR) -> dict[str, frozenset[str]]:
    """Every node a node may hand over to: static edges, router targets, join targets."""
    out: dict[str, set[str]] = {n.id: set() for n in ir.nodes}
    for edge in ir.edges:
        if isinstance(edge, StaticEdgeIR):
            for source in edge.sources:
                out.setdefault(source, set()).add(edge.target)
        else:
            out.setdefault(edge.source, set()).update(edge.mapping.values())
    return {k: frozenset(v) for k, v in out.items()}


def _rules_factory(
    ir: GraphIR, state: type[BaseModel], problems: list[Problem]
) -> Callable[[], RuleSet] | None:
    """Validate the rule packs mounted on the graph and its nodes; build the engine factory.

    Only here, and only when a graph mounts packs, is ``stargraph.fathom`` (and so clipspy)
    imported: graphs without rules never pay for it.
    """
    # Keyed by node id, with the node's index in the IR (its JSON pointer slot).
    node_packs = {n.id: (i, n.rules) for i, n in enumerate(ir.nodes) if n.rules}
    if not ir.rule_packs and not node_packs:
        return None
    from stargraph import fathom
    from stargraph.errors import RuleCompileError

    try:
        facts = fathom.fact_fields(state)
    except RuleCompileError as exc:
        problems.extend(exc.problems)
        return None
    successors = _successors(ir)

    def packs_of(irs: tuple[RulePackIR, ...], where: str) -> list[fathom.RulePack]:
        out = []
        for i, pack_ir in enumerate(irs):
            pack = fathom.RulePack(id=pack_ir.id, version=pack_ir.version, source=pack_ir.source)
            try:
                fathom.validate_pack(pack, fact_fields=facts, successors=successors)
            except RuleCompileError as exc:
                problems.extend(
                    Problem(f"{where}/{i}: {p.pointer}", p.message, p.hint) for p in exc.problems
                )
            out.append(pack)
        return out

    graph_packs = packs_of(ir.rule_packs, "/rule_packs")
    per_node = {
        node: packs_of(packs, f"/nodes/{i}/rules") for node, (i, packs) in node_packs.items()
    }

    def engine(packs: list[fathom.RulePack]) -> Callable[[], DecisionMaker]:
        pool = fathom.EnginePool(
            lambda: fathom.RuleEngine(packs, fact_fields=facts, successors=successors)
        )
        return pool.acquire

    graph_engine = engine(graph_packs) if graph_packs else None
    node_engines: dict[str, Callable[[], DecisionMaker]] = {
        node: engine(packs) for node, packs in per_node.items()
    }

    def factory() -> RuleSet:
        return RuleSet(graph_engine() if graph_engine else None, node_engines)

    return factory
