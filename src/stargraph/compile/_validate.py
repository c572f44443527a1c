"""Static validation of a graph IR: every problem, each with a JSON pointer and a hint.

The validator never stops at the first problem (STYLE 5): users fix a graph in one pass.
Structural checks use networkx; it is imported here, lazily, because it is slow to import.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel

from stargraph._closures import node_closure
from stargraph.errors import Problem, UntrustedRefError
from stargraph.ir import END, START, ConditionalEdgeIR, FunctionNodeIR, GraphIR, StaticEdgeIR
from stargraph.ir._models import ended_implicitly
from stargraph.refs import resolve_ref
from stargraph.runtime._plan import accepts_ctx
from stargraph.state import schema_ir, schema_problems

__all__ = ["RESERVED_IDS", "Resolved", "validate_ir"]

# \Z, not $: "$" also matches before a trailing newline, which let "a\n" through.
_ID_RE: Final = re.compile(r"\A[A-Za-z_][A-Za-z0-9_.\-]*\Z")

RESERVED_IDS: Final = frozenset({START, END, "__update__", "__migration__"})
"""Names the runtime writes into run records itself: the virtual start and end nodes, and the
writers of ``update=`` steps and of migrations. Every other ``__name__`` is reserved too."""


def _id_problem(node_id: str) -> str | None:
    if not _ID_RE.match(node_id):
        return f"malformed node id {node_id!r}"
    if node_id in RESERVED_IDS or (
        len(node_id) > 4 and node_id.startswith("__") and node_id.endswith("__")
    ):
        return (
            f"node id {node_id!r} is reserved: the runtime uses names of the form '__name__' "
            f"for its own records ({', '.join(sorted(RESERVED_IDS))})"
        )
    return None


@dataclass
class Resolved:
    """Callables found while validating, by ref, so compiling does not resolve them twice."""

    callables: dict[str, Callable[..., Any]] = field(default_factory=dict)


def _resolve(
    ref: str, impls: Mapping[str, Callable[..., Any]], where: str, what: str
) -> Callable[..., Any] | Problem:
    if ref in impls:
        return impls[ref]
    if ":" not in ref:
        return Problem(
            where,
            f"{what} ref {ref!r} is a registry id that nothing registered",
            f"supply it with Graph(ir, impls={{{ref!r}: fn}}) or register it through a plugin",
        )
    try:
        found = resolve_ref(ref)
    except UntrustedRefError as exc:  # outside trusted_modules(): say so, not "importable"
        refused = exc.problems[0]
        return Problem(where, f"{what} ref {refused.pointer}: {refused.message}", refused.hint)
    except (ImportError, AttributeError) as exc:
        return Problem(
            where,
            f"{what} ref {ref!r} cannot be imported: {exc}",
            "check the module path and name, and that the module is importable",
        )
    if not callable(found):
        return Problem(where, f"{what} ref {ref!r} is not callable", "point it at a function")
    return found  # type: ignore[no-any-return]


def validate_ir(
    ir: GraphIR,
    impls: Mapping[str, Callable[..., Any]],
    state_model: type[BaseModel],
) -> tuple[list[Problem], Resolved]:
    """All problems of ``ir`` (empty when valid) and the callables resolved on the way."""
    problems: list[Problem] = list(schema_problems(state_model))
    resolved = Resolved()

    # The IR's state must still describe the model it names: a changed model means the IR is
    # stale and its hash no longer describes what would run.
    if not problems:
        current = schema_ir(state_model, ir.state.ref)
        if current.fields != ir.state.fields:
            problems.append(
                Problem(
                    "/state/fields",
                    f"state model {ir.state.ref!r} no longer matches the IR's state fields",
                    "rebuild the IR from the current model (Graph(...).to_ir()) or restore "
                    "the model",
                )
            )

    fields = set(state_model.model_fields)
    ids: dict[str, int] = {}
    for i, node in enumerate(ir.nodes):
        where = f"/nodes/{i}"
        if node.id in ids:
            problems.append(
                Problem(
                    f"{where}/id", f"duplicate node id {node.id!r}", "give each node its own id"
                )
            )
        ids.setdefault(node.id, i)
        id_problem = _id_problem(node.id)
        if id_problem is not None:
            problems.append(
                Problem(
                    f"{where}/id",
                    id_problem,
                    "use letters, digits, '_', '-', '.', starting with a letter or '_', and not "
                    "of the form '__name__'",
                )
            )
        if node.writes is not None:
            for key in node.writes:
                if key not in fields:
                    problems.append(
                        Problem(
                            f"{where}/writes",
                            f"node {node.id!r} declares a write to {key!r}, which is not a "
                            f"channel of the state (channels: {sorted(fields)})",
                            "add the field to the state model or remove it from writes",
                        )
                    )
        if node.retry is not None:
            for j, ref in enumerate(node.retry.retry_on):
                try:
                    cls = resolve_ref(ref)
                except (ImportError, AttributeError) as exc:
                    problems.append(
                        Problem(
                            f"{where}/retry/retry_on/{j}",
                            f"exception class {ref!r} cannot be imported: {exc}",
                            "use 'module:qualname' of an exception class",
                        )
                    )
                    continue
                if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                    problems.append(
                        Problem(
                            f"{where}/retry/retry_on/{j}",
                            f"{ref!r} is not an exception class",
                            "name an exception class",
                        )
                    )
        if isinstance(node, FunctionNodeIR):
            if node.closure is not None:
                fn = node_closure(
                    node.ref,
                    node.closure,
                    f"node {node.id!r}",
                    impls=impls,
                    where=f"{where}/closure",
                    resolve=functools.partial(
                        _resolve, node.ref, impls, f"{where}/ref", f"node {node.id!r}"
                    ),
                )
            else:
                fn = _resolve(node.ref, impls, f"{where}/ref", f"node {node.id!r}")
            if isinstance(fn, Problem):
                problems.append(fn)
                continue
            if accepts_ctx(fn) is None:
                problems.append(
                    Problem(
                        f"{where}/ref",
                        f"node {node.id!r} callable {node.ref!r} must take (state) or (state, ctx)",
                        "change its signature to def fn(state) or def fn(state, ctx)",
                    )
                )
            resolved.callables[node.ref] = fn

    known = set(ids)

    def check_target(target: str, where: str) -> None:
        if target != END and target not in known:
            problems.append(
                Problem(
                    where, f"edge points at unknown node {target!r}", _did_you_mean(target, known)
                )
            )

    def check_source(source: str, where: str) -> None:
        if source not in known:
            problems.append(
                Problem(
                    where, f"edge starts at unknown node {source!r}", _did_you_mean(source, known)
                )
            )

    for i, entry in enumerate(ir.entry):
        check_target(entry, f"/entry/{i}")
    for i, node in enumerate(ir.nodes):
        for j, target in enumerate(node.destinations):
            check_target(target, f"/nodes/{i}/destinations/{j}")
    for i, edge in enumerate(ir.edges):
        where = f"/edges/{i}"
        if isinstance(edge, StaticEdgeIR):
            for source in edge.sources:
                check_source(source, f"{where}/sources")
            check_target(edge.target, f"{where}/target")
        else:
            if edge.source != START:
                check_source(edge.source, f"{where}/source")
            for key, target in edge.mapping.items():
                check_target(target, f"{where}/mapping/{key}")
            what = f"router of {edge.source!r}"
            if edge.closure is not None:
                router = node_closure(
                    edge.router,
                    edge.closure,
                    what,
                    impls=impls,
                    where=f"{where}/closure",
                    resolve=functools.partial(
                        _resolve, edge.router, impls, f"{where}/router", what
                    ),
                )
            else:
                router = _resolve(edge.router, impls, f"{where}/router", what)
            if isinstance(router, Problem):
                problems.append(router)
            else:
                resolved.callables[edge.router] = router

    if not ir.entry and not any(
        isinstance(e, ConditionalEdgeIR) and e.source == START for e in ir.edges
    ):
        problems.append(
            Problem("/entry", "the graph has no entry node", "add with_edge(START, 'first')")
        )
    problems.extend(_reachability(ir, known))
    return problems, resolved


def _did_you_mean(name: str, known: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, sorted(known), n=1)
    if close:
        return f"did you mean {close[0]!r}? add the node first or fix the edge"
    return "add the node with with_node() or fix the edge"


def _reachability(ir: GraphIR, known: set[str]) -> list[Problem]:
    import networkx as nx

    g: Any = nx.DiGraph()
    g.add_nodes_from([START, END, *known])
    g.add_edges_from((START, e) for e in ir.entry)
    for edge in ir.edges:
        if isinstance(edge, StaticEdgeIR):
            g.add_edges_from((s, edge.target) for s in edge.sources)
        else:
            g.add_edges_from((edge.source, t) for t in edge.mapping.values())
    for node in ir.nodes:
        g.add_edges_from((node.id, t) for t in node.destinations)
    for node_id in ended_implicitly(ir):
        g.add_edge(node_id, END)
    reachable = nx.descendants(g, START)
    reaches_end = nx.ancestors(g, END)
    problems: list[Problem] = []
    for i, node in enumerate(ir.nodes):
        if node.id not in reachable:
            problems.append(
                Problem(
                    f"/nodes/{i}",
                    f"node {node.id!r} is unreachable from START",
                    "add an edge into it, or remove it",
                )
            )
        elif node.id not in reaches_end:
            problems.append(
                Problem(
                    f"/nodes/{i}",
                    f"node {node.id!r} cannot reach END",
                    f"add an edge from {node.id!r} (or a node after it) to END",
                )
            )
    return problems


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """True for ``async def`` functions (and callables whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - we want the bound __call__, not callable()
    )
