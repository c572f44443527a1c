"""ReAct loop overhead: stargraph's ``react_graph`` vs LangGraph's prebuilt ReAct agent.

Run: ``.venv/bin/python benchmarks/bench_react.py [invocations]`` (default 100).

Both agents run the same task in the same process: the fake model asks for one tool call per
reply, ten times (``add(i, 1)``), then answers; so a run is 11 model calls and 10 tool calls.
Both models are in-process fakes answering from precomputed replies (stargraph:
``ScriptedChatModel``; LangGraph: a minimal ``BaseChatModel`` returning scripted
``AIMessage`` s with ``tool_calls``), both tools are the same trivial function, and neither
agent has a checkpointer, so what is measured is the engine: state handling, routing, rule
decisions, tool dispatch (the arbiter's validation, allowlist, locks, commit log on
stargraph's side; ToolNode's on LangGraph's).

The unit is a ReAct step (one model call and the tool calls of its reply): stargraph runs a
step as three graph nodes (think, act, observe), LangGraph as two (agent, tools), so graph
node counts are not comparable while ReAct steps are. Figures are medians over the
invocations, after a warm-up.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from stargraph.graph import Graph
from stargraph.llm import ChatMessage, ChatRequest, ChatResponse, ScriptedChatModel, ToolCall
from stargraph.skills.react import ReactState, react_graph
from stargraph.tools import Arbiter, ToolRegistry, llm_name_for, tool

TOOL_CALLS = 10
REACT_STEPS = TOOL_CALLS + 1  # ten replies with a tool call, then the answer
ADD = "bench.add@1.0.0"
ADD_NAME = llm_name_for(ADD)


@tool(id=ADD)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# --------------------------------------------------------------------------- stargraph

_REPLIES = [
    ChatResponse(
        message=ChatMessage.assistant(
            tool_calls=[ToolCall(id=f"call_{i}", name=ADD_NAME, arguments=f'{{"a": {i}, "b": 1}}')]
        ),
        finish_reason="tool_calls",
    )
    for i in range(TOOL_CALLS)
]
_ANSWER = ChatResponse(message=ChatMessage.assistant("done"), finish_reason="stop")


def _stargraph_script(request: ChatRequest) -> ChatResponse:
    answered = sum(1 for m in request.messages if m.role == "tool")
    return _REPLIES[answered] if answered < TOOL_CALLS else _ANSWER


def end_on_done(state: ReactState) -> str:
    """The rule-free variant's exit: ``END`` once the step signalled success (what the
    ``exit`` pack's rules decide in the real loop)."""
    return "__end__" if state.done else "think"


def stargraph_runner(
    workspace: str, *, rules: bool = True
) -> tuple[Callable[[], Any], Callable[[], None]]:
    """The ReAct run; ``rules=False`` drops the rule packs and ends the run through an
    observe -> END edge on the answer instead, to show what the rule engine costs."""
    arbiter = Arbiter(ToolRegistry.build(builtins=[add]), workspace=workspace)
    model = ScriptedChatModel(_stargraph_script)
    graph = react_graph(tools=[ADD], max_steps=REACT_STEPS + 1)
    if not rules:
        ir = graph.to_ir()
        bare = ir.model_copy(
            update={
                "rule_packs": (),
                "nodes": tuple(n.model_copy(update={"rules": ()}) for n in ir.nodes),
                "edges": tuple(
                    e.model_copy(update={"router": f"{__name__}:end_on_done"})
                    if getattr(e, "source", None) == "observe"
                    else e
                    for e in ir.edges
                ),
            }
        )
        graph = Graph(bare, state=ReactState)
    app = graph.compile(services={"model": model, "arbiter": arbiter})

    def run() -> Any:
        model.requests.clear()
        final = app.invoke({"task": "add one ten times"})
        assert final.final_answer == "done"
        assert len(final.tool_calls) == TOOL_CALLS
        return final

    return run, arbiter.close


# --------------------------------------------------------------------------- LangGraph


def langgraph_runner() -> Callable[[], Any]:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool as lc_tool

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in langgraph 1.x
        from langgraph.prebuilt import create_react_agent

    @lc_tool
    def bench_add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    class FakeToolCallingModel(BaseChatModel):
        """Answers like the stargraph fake: one tool call per reply, ten times, then text."""

        @property
        def _llm_type(self) -> str:
            return "fake-tool-calling"

        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, **kwargs: Any
        ) -> ChatResult:
            answered = sum(1 for m in messages if isinstance(m, ToolMessage))
            if answered < TOOL_CALLS:
                message = AIMessage(
                    content="",
                    tool_calls=[
                        {
                            "id": f"call_{answered}",
                            "name": "bench_add",
                            "args": {"a": answered, "b": 1},
                        }
                    ],
                )
            else:
                message = AIMessage(content="done")
            return ChatResult(generations=[ChatGeneration(message=message)])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(FakeToolCallingModel(), [bench_add])

    def run() -> Any:
        out = agent.invoke({"messages": [("user", "add one ten times")]}, {"recursion_limit": 100})
        assert out["messages"][-1].content == "done"
        assert sum(1 for m in out["messages"] if isinstance(m, ToolMessage)) == TOOL_CALLS
        return out

    return run


# --------------------------------------------------------------------------- measuring


def median_us_per_step(run: Callable[[], Any], invocations: int) -> float:
    for _ in range(5):
        run()  # warm-up: imports, caches, first CLIPS environment
    samples = []
    for _ in range(invocations):
        started = time.perf_counter()
        run()
        samples.append((time.perf_counter() - started) / REACT_STEPS * 1e6)
    return statistics.median(samples)


def main(argv: Sequence[str]) -> None:
    invocations = int(argv[0]) if argv else 100
    with tempfile.TemporaryDirectory() as workspace:
        run, close = stargraph_runner(workspace)
        try:
            ours = median_us_per_step(run, invocations)
        finally:
            close()
        run, close = stargraph_runner(workspace, rules=False)
        try:
            unruled = median_us_per_step(run, invocations)
        finally:
            close()
    theirs = median_us_per_step(langgraph_runner(), invocations)
    print(
        f"ReAct, {TOOL_CALLS} tool calls + answer ({REACT_STEPS} model calls), "
        f"{invocations} invocations, median per ReAct step:"
    )
    for label, figure in (("stargraph react_graph", ours), ("langgraph react agent", theirs)):
        print(f"  {label:32}{figure:9.1f} us/step  ({figure * REACT_STEPS:8.0f} us/run)")
    print(f"  ratio (langgraph / stargraph)   {theirs / ours:9.1f}x  (target >= 10x)")
    print(
        f"  (stargraph without the termination pack: {unruled:.1f} us/step, "
        f"{theirs / unruled:.1f}x; the rule engine's share is {ours - unruled:.1f} us/step)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
