"""The curated public surface, pinned (STYLE 3), and the import-time budget."""

from __future__ import annotations

import subprocess
import sys

import stargraph
import stargraph.graph
import stargraph.ir
import stargraph.runtime


def test_top_level_all_is_sorted_and_pinned() -> None:
    assert stargraph.__all__ == sorted(stargraph.__all__)
    assert stargraph.__all__ == [
        "CachePolicy",
        "Command",
        "CompileError",
        "CompiledGraph",
        "END",
        "Graph",
        "Interrupt",
        "RetryPolicy",
        "RunContext",
        "RunError",
        "START",
        "Send",
        "StargraphError",
        "UsageError",
        "__version__",
        "interrupt_of",
        "reducers",
    ]


def test_graph_module_surface() -> None:
    assert stargraph.graph.__all__ == ["END", "Graph", "Private", "RemainingSteps", "START", "Send"]


def test_runtime_module_surface_is_user_facing() -> None:
    # What a user of a compiled graph meets; the compiler's side (plan specs, the rule
    # engine seam) is imported from runtime._plan and runtime._rules (see CHANGELOG.md).
    assert stargraph.runtime.__all__ == [
        "CompiledGraph",
        "CustomEvent",
        "DEFAULT_MAX_STEPS",
        "Entropy",
        "Event",
        "Interrupt",
        "MessageChunk",
        "NodeFinished",
        "NodeStarted",
        "RuleDecided",
        "RunCancelled",
        "RunContext",
        "RunFailed",
        "RunFinished",
        "RunInterrupted",
        "RunStarted",
        "SeededEntropy",
        "SignalScope",
        "StepCompleted",
        "Superstep",
        "SystemEntropy",
        "cancel_on_signals",
        "interrupt_of",
    ]


def test_issue46_langgraph_layer_surface() -> None:
    import stargraph.langgraph

    assert stargraph.langgraph.__all__ == [
        "CachePolicy",
        "Command",
        "CompiledStateGraph",
        "END",
        "InMemoryCache",
        "InMemorySaver",
        "Interrupt",
        "MemorySaver",
        "MessagesState",
        "PregelTask",
        "REMOVE_ALL_MESSAGES",
        "RemainingSteps",
        "RemoveMessage",
        "RetryPolicy",
        "START",
        "Send",
        "StateGraph",
        "StateSnapshot",
        "add_messages",
        "get_stream_writer",
        "interrupt",
    ]


def test_issue50_serve_and_client_surfaces() -> None:
    import stargraph.client
    import stargraph.serve

    assert stargraph.serve.__all__ == ["ServeSettings", "create_app"]
    assert stargraph.client.__all__ == ["AsyncClient", "Client", "StreamEvent"]


def test_every_exported_name_exists_and_is_documented() -> None:
    for module in (stargraph, stargraph.graph, stargraph.ir, stargraph.runtime):
        assert module.__all__ == sorted(module.__all__), module.__name__
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not name.isupper():
                assert obj.__doc__, f"{module.__name__}.{name} has no docstring"


def test_import_is_light() -> None:
    """``import stargraph`` pulls in no heavy dependency and a bounded number of modules.

    Its time is measured by ``python -m benchmarks`` (the 300 ms budget lives there): a timed
    assertion here would fail whenever the CI machine is busy, which says nothing about us.
    """
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import stargraph\n"
        "new = set(sys.modules) - before\n"
        "heavy = [m for m in ('networkx', 'openai', 'clips', 'httpx', 'starlette', 'numpy',\n"
        "                     'psycopg', 'rich', 'click', 'yaml') if m in sys.modules]\n"
        "print(len(new), ','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split(" ")
    # Heavy dependencies are imported lazily, where they are used.
    assert out[1].strip() == ""
    # 275 modules today (pydantic, asyncio and our own 29); a budget that catches an eager
    # import of a large package without pinning the exact count.
    assert int(out[0]) < 400


PUBLIC_PACKAGES = [
    "stargraph",
    "stargraph.client",
    "stargraph.serve",
    "stargraph.checkpoint",
    "stargraph.compile",
    "stargraph.errors",
    "stargraph.fathom",
    "stargraph.graph",
    "stargraph.ir",
    "stargraph.llm",
    "stargraph.llm.langchain",
    "stargraph.messages",
    "stargraph.langgraph",
    "stargraph.nodes",
    "stargraph.plugin",
    "stargraph.reducers",
    "stargraph.replay",
    "stargraph.runtime",
    "stargraph.skills",
    "stargraph.skills.markdown",
    "stargraph.skills.react",
    "stargraph.skills.agent",
    "stargraph.skills.refs",
    "stargraph.agents",
    "stargraph.skills.machine",
    "stargraph.workers",
    "stargraph.viz",
    "stargraph.testing",
    "stargraph.tools",
    "stargraph.tools.builtins",
]


def _public_members(obj: object) -> list[tuple[str, object]]:
    import inspect

    out: list[tuple[str, object]] = []
    for name, member in vars(obj).items():
        if name.startswith("_"):
            continue
        if inspect.isfunction(member) or isinstance(member, property):
            out.append((name, member))
    return out


def test_every_public_name_and_method_has_a_docstring() -> None:
    import importlib
    import inspect

    missing = []
    for package in PUBLIC_PACKAGES:
        module = importlib.import_module(package)
        names = getattr(module, "__all__", [])
        assert names == sorted(names), f"{package}.__all__ is not sorted"
        for name in names:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                if not (obj.__doc__ or "").strip():
                    missing.append(f"{package}.{name}")
                if inspect.isclass(obj) and obj.__module__.startswith("stargraph"):
                    for member_name, member in _public_members(obj):
                        if not (getattr(member, "__doc__", None) or "").strip():
                            missing.append(f"{package}.{name}.{member_name}")
    assert missing == [], missing
