"""Invariant 9: one exception tree. Every error stargraph raises on purpose is a
``StargraphError`` subclass (each also subclassing the builtin it resembles).

The source walk below fails on a bare ``raise ValueError/KeyError/RuntimeError/TypeError/
TimeoutError`` (and the equally generic ``LookupError``, ``IndexError``, ``Exception``)
anywhere in ``src/stargraph``, except:

* inside a pydantic validator or serializer (``@field_validator``, ``@model_validator``
  ...), where ``ValueError`` is pydantic's protocol -- the public constructors wrap the
  resulting ``ValidationError`` (tests below pin the ones that matter);
* inside a ``try`` of the same function whose handler catches it and does not re-raise
  (local control flow: it never leaves the function);
* entries of :data:`ALLOWED`, each saying why the builtin is right there (an entry that
  no longer matches fails the test, so the list cannot go stale).

``ImportError``, ``AttributeError``, ``NotImplementedError``, ``StopIteration`` and
``AssertionError`` are protocol exceptions (imports, module ``__getattr__``, abstract
methods, iterators, conformance suites run under pytest) and are not scanned.
"""

from __future__ import annotations

import ast
import builtins
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import stargraph
from stargraph import errors
from stargraph.errors import (
    ArtifactNotFoundError,
    CompileError,
    RuleCompileError,
    ServiceNotStartedError,
    StargraphError,
    ToolArgumentError,
    ToolError,
    ToolSpecError,
    UnknownNodeError,
    WaitTimeoutError,
)
from stargraph.graph import END, START, Graph

SRC = Path(stargraph.__file__).resolve().parent
SCANNED = frozenset(
    {
        "ValueError",
        "KeyError",
        "RuntimeError",
        "TypeError",
        "TimeoutError",
        "LookupError",
        "IndexError",
        "Exception",
    }
)
VALIDATORS = frozenset(
    {"field_validator", "model_validator", "validator", "root_validator", "field_serializer"}
)

Site = tuple[str, str, str]
"""(path below src/stargraph, qualified name of the enclosing function, exception)."""

ALLOWED: dict[Site, str] = {
    ("ir/_models.py", "_check_hashable_json", "ValueError"): (
        "a helper of GraphIR's pydantic field validators only (it recurses into itself): "
        "ValueError is pydantic's protocol there"
    ),
    ("errors.py", "RunError.__init__", "TypeError"): (
        "the run location comes as **at (one TypedDict for every RunError): an unknown "
        "keyword gets the TypeError Python gives any call with one, as the explicit keyword "
        "list did"
    ),
    ("fathom/_engine.py", "_wrap.call", "TypeError"): (
        "raised inside a CLIPS callback: the engine keeps it and fails the step with a "
        "RuleRuntimeError chaining it, whose message names it ('TypeError: function ... "
        "returned object'); the user never catches the TypeError itself"
    ),
    ("runtime/_daemon.py", "DaemonThreads.__init__", "ValueError"): (
        "the engine's own thread pool, a concurrent.futures.Executor: a bound below one is "
        "the ValueError ThreadPoolExecutor raises; no user input reaches it"
    ),
    ("runtime/_daemon.py", "DaemonThreads.submit", "RuntimeError"): (
        "the Executor contract after shutdown (ThreadPoolExecutor raises the same): "
        "_Batch.spawn catches exactly this and lets the runners at work finish the step"
    ),
    ("runtime/_tasks.py", "_call_with_timeout", "TimeoutError"): (
        "private signal of the node timeout thread: its only caller's retry decision "
        "(_retry_delay) turns it into NodeTimeoutError naming run, step and node"
    ),
    ("tools/_workers.py", "call_with_alarm", "TimeoutError"): (
        "private signal of the interval-timer runner: its only caller, Arbiter._run_sync, "
        "catches TimeoutError and raises ToolTimeoutError"
    ),
}


def _decorators(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = set()
    for decorator in fn.decorator_list:
        node = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Name):
            names.add(node.id)
    return names


def _catches(handler: ast.ExceptHandler, name: str) -> bool:
    """Whether ``handler`` catches builtin ``name`` and does not re-raise it."""
    if any(isinstance(n, ast.Raise) and n.exc is None for n in ast.walk(handler)):
        return False
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    raised = getattr(builtins, name)
    for node in types:
        caught = getattr(builtins, node.id, None) if isinstance(node, ast.Name) else None
        if isinstance(caught, type) and issubclass(raised, caught):
            return True
    return False


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.scopes: list[ast.AST] = []
        self.found: list[tuple[Site, int]] = []

    def _scoped(self, node: ast.AST) -> None:
        self.scopes.append(node)
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = _scoped  # noqa: N815 -- ast.NodeVisitor's naming
    visit_AsyncFunctionDef = _scoped  # noqa: N815
    visit_ClassDef = _scoped  # noqa: N815

    def visit_Try(self, node: ast.Try) -> None:
        self.scopes.append(node)
        for statement in node.body:
            self.visit(statement)
        self.scopes.pop()
        for part in [*node.handlers, *node.orelse, *node.finalbody]:
            self.visit(part)

    def visit_Raise(self, node: ast.Raise) -> None:
        target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if not (isinstance(target, ast.Name) and target.id in SCANNED):
            return
        functions = [
            s for s in self.scopes if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        if functions and _decorators(functions[-1]) & VALIDATORS:
            return  # pydantic's protocol
        for scope in reversed(self.scopes):
            if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
                break
            if isinstance(scope, ast.Try) and any(_catches(h, target.id) for h in scope.handlers):
                return  # caught right here, never leaves the function
        qualname = ".".join(
            s.name
            for s in self.scopes
            if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        )
        self.found.append(((self.path, qualname, target.id), node.lineno))


def bare_raises() -> list[tuple[Site, int]]:
    found = []
    for file in sorted(SRC.rglob("*.py")):
        finder = _Finder(file.relative_to(SRC).as_posix())
        finder.visit(ast.parse(file.read_text(encoding="utf-8"), filename=str(file)))
        found += finder.found
    return found


def test_invariant9_no_bare_builtin_raise_outside_the_allowlist() -> None:
    offenders = [
        f"src/stargraph/{path}:{line} ({where}) raises bare {name}"
        for (path, where, name), line in bare_raises()
        if (path, where, name) not in ALLOWED
    ]
    assert offenders == [], (
        "raise a stargraph.errors class instead (add one there, subclassing the builtin it "
        "resembles), or add the site to ALLOWED with the reason the builtin is required:\n"
        + "\n".join(offenders)
    )


def test_invariant9_allowlists_hold_no_stale_entries() -> None:
    sites = {site for site, _ in bare_raises()}
    stale = sorted(set(ALLOWED) - sites)
    assert stale == [], f"remove these entries, their raise is gone: {stale}"


def test_invariant9_the_walk_finds_what_it_must() -> None:
    """The scanner itself: a bare raise is found, a validator's and a locally caught one
    are not, and a handler that re-raises does not hide one."""
    source = """
from pydantic import field_validator
def bad():
    raise KeyError("x")
class M:
    @field_validator("a")
    def check(cls, v):
        raise ValueError("pydantic protocol")
def local():
    try:
        raise TypeError("control flow")
    except TypeError:
        return None
def reraised():
    try:
        raise RuntimeError("escapes")
    except RuntimeError:
        raise
"""
    finder = _Finder("probe.py")
    finder.visit(ast.parse(source))
    assert [site for site, _ in finder.found] == [
        ("probe.py", "bad", "KeyError"),
        ("probe.py", "reraised", "RuntimeError"),
    ]


def test_invariant9_every_error_class_is_in_the_tree() -> None:
    for name in errors.__all__:
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert issubclass(obj, StargraphError | Warning), name


# --------------------------------------------------------------------------- public APIs


def test_invariant9_lock_request_parse_raises_a_tool_spec_error() -> None:
    from stargraph.tools import LockRequest

    with pytest.raises(ToolSpecError, match=r"lock 'file:a\.txt:Q'") as caught:
        LockRequest.parse("file:a.txt:Q")
    assert isinstance(caught.value, ValueError)  # the builtin it resembles
    assert LockRequest.parse("file:a.txt:S") == LockRequest("file:a.txt", "S")


def test_invariant9_releasing_a_lease_twice_raises_a_tool_error() -> None:
    from stargraph.tools import LockManager, LockRequest

    manager = LockManager()
    lease = manager.acquire([LockRequest("gate", "X")], owner="o")
    manager.release(lease)
    with pytest.raises(ToolError, match="lease 1 of 'o' is not held"):
        manager.release(lease)


def test_invariant9_a_missing_artifact_is_an_artifact_not_found_error(tmp_path: Path) -> None:
    from stargraph.tools import DirectoryArtifactStore, InMemoryArtifactStore, content_ref

    missing = content_ref(b"never stored")
    for store in (InMemoryArtifactStore(), DirectoryArtifactStore(tmp_path)):
        with pytest.raises(ArtifactNotFoundError, match="no artifact") as caught:
            store.get(missing)
        assert isinstance(caught.value, LookupError)
    with pytest.raises(ArtifactNotFoundError, match="is not an artifact ref"):
        DirectoryArtifactStore(tmp_path).get("sha1:abc")
    assert "sha1:abc" not in DirectoryArtifactStore(tmp_path)


def test_invariant9_rule_engine_budgets_raise_one_rule_compile_error() -> None:
    from stargraph.fathom import RuleEngine, default_termination_pack

    pack = default_termination_pack(max_steps=3, error_budget=2)
    with pytest.raises(RuleCompileError) as caught:
        RuleEngine([pack], run_limit=0, decide_timeout_s=-1, memory_limit=True)
    assert [p.pointer for p in caught.value.problems] == [
        "RuleEngine/run_limit",
        "RuleEngine/decide_timeout_s",
        "RuleEngine/memory_limit",
    ]
    assert "run_limit must be an int >= 1, got 0" in str(caught.value)


class S(BaseModel):
    x: int = 0


def step(state: S) -> dict[str, Any]:
    return {"x": 1}


def small_graph() -> Graph[S]:
    return Graph("g", state=S).with_node("a", step).with_edge(START, "a").with_edge("a", END)


def test_invariant9_graph_ir_node_lookup_raises_unknown_node_error() -> None:
    ir = small_graph().to_ir()
    assert ir.node("a").id == "a"
    with pytest.raises(UnknownNodeError, match=r"no node 'b'.*use one of \['a'\]") as caught:
        ir.node("b")
    assert isinstance(caught.value, LookupError)


def test_invariant9_local_servers_not_started_raise_service_not_started() -> None:
    from stargraph.testing import ScriptedOpenAIServer
    from stargraph.tools.builtins import LocalSite

    with pytest.raises(ServiceNotStartedError, match="not started"):
        _ = ScriptedOpenAIServer().base_url
    with pytest.raises(ServiceNotStartedError, match="LocalSite is not started"):
        _ = LocalSite([]).url


def test_invariant9_replay_helper_and_trusted_modules_raise_compile_errors() -> None:
    from stargraph.refs import trusted_modules
    from stargraph.testing import assert_replays_every_step

    with pytest.raises(CompileError, match="needs module prefixes"), trusted_modules():
        pass
    with pytest.raises(CompileError, match="needs a graph compiled with a checkpoint store"):
        assert_replays_every_step(small_graph().compile(), {}, run_id="r")


def test_invariant9_a_malformed_tool_call_raises_a_tool_argument_error() -> None:
    from stargraph.tools import ToolCall, failure_of

    with pytest.raises(ToolArgumentError) as caught:
        ToolCall(tool="demo.x", args={"when": object()}, lane=3)
    failure = failure_of(caught.value)
    assert failure.code == "invalid_arguments"
    assert [f.field for f in failure.fields] == ["args.when", "lane"]
    assert "(got 3)" in str(caught.value)


# --------------------------------------------------------------------------- waiting


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[Any, threading.Event]]:
    """A SkillSpec runtime whose scripted model answers only once the gate opens."""
    from stargraph.llm import OpenAIChatModel
    from stargraph.skills.machine import LaneSession, parse_skillspec
    from stargraph.testing import Reply, ScriptedOpenAIServer

    gate = threading.Event()
    spec = parse_skillspec(
        {
            "name": "wait",
            "description": "Wait for the model.",
            "initial_state": "work",
            "input_schema": {"type": "object"},
            "output_schema": {"type": "object"},
            "states": {
                "work": {"objective": "Finish.", "transitions": [{"on": "go", "to": "done"}]},
                "done": {"objective": "Done.", "terminal": True},
            },
            "max_steps": 4,
            "interruptible": True,
        }
    )

    def script(request: Any) -> Reply:
        gate.wait(30)
        last = request.messages[-1]["content"]
        name = "finish" if '"state":"done"' in last.replace(" ", "") else "go"
        return Reply.tool_calls([(name, {})])

    from stargraph.tools import Arbiter, ToolRegistry

    with (
        ScriptedOpenAIServer(script) as server,
        OpenAIChatModel("m", base_url=server.base_url, api_key="k", max_retries=0) as chat,
        Arbiter(ToolRegistry.build(), workspace=tmp_path) as arbiter,
    ):
        lanes = LaneSession(model=chat, arbiter=arbiter, skills=[spec], session="s")
        try:
            yield lanes, gate
        finally:
            gate.set()
            lanes.close()


def test_invariant9_waiting_too_long_raises_wait_timeout_error(
    gated: tuple[Any, threading.Event],
) -> None:
    lanes, gate = gated
    run = lanes.start("edge", "wait")
    # The model cannot answer before the gate opens, so both waits must give up.
    with pytest.raises(WaitTimeoutError, match="skill 'wait' on lane 'edge' still runs"):
        run.result(timeout=0.05)
    with pytest.raises(WaitTimeoutError, match=r"still runs after 0\.05s") as caught:
        lanes.wait(timeout=0.05)
    assert isinstance(caught.value, TimeoutError)
    gate.set()
    assert run.result(timeout=30).status == "done"
    lanes.wait(timeout=30)
