"""Every way out of the ReAct loop is a rule (seed 004: "termination is rule-driven:
max_steps, done flag in tool result, error_budget; model self-termination is never relied
on"): the success rules of the ``exit`` pack and the budgets of ``termination``, side by
side, each checked on a SQLite store, and one of them resumed after a crash and replayed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph import fathom
from stargraph.checkpoint import SqliteStore
from stargraph.errors import NodeError, SkillValidationError
from stargraph.llm import ChatMessage, ChatRequest, ChatResponse, ScriptedChatModel, ToolCall
from stargraph.runtime import RuleDecided
from stargraph.skills.react import ReactState, exit_pack, react_graph, termination_pack
from stargraph.tools import Arbiter, ToolRegistry, llm_name_for, tool

ADD = "demo.add@1.0.0"
FINISH = "demo.finish@1.0.0"


@tool(id=ADD)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(id=FINISH)
def finish(answer: str, flag: str = "true") -> dict[str, Any]:
    """Hand in the answer; ``flag`` is what the result's ``done`` field holds."""
    done: Any = {"true": True, "false": False}.get(flag, flag)
    return {"done": done, "answer": answer}


@pytest.fixture
def arbiter(tmp_path: Path) -> Iterator[Arbiter]:
    registry = ToolRegistry.build(builtins=[add, finish])
    with Arbiter(registry, workspace=tmp_path / "ws") as arb:
        yield arb


def call(tool_id: str, arguments: str, call_id: str = "c0") -> ChatResponse:
    """A reply calling one tool."""
    name = llm_name_for(tool_id) if "@" in tool_id else tool_id
    return ChatResponse(
        message=ChatMessage.assistant(
            tool_calls=[ToolCall(id=call_id, name=name, arguments=arguments)]
        ),
        finish_reason="tool_calls",
    )


ADD_CALL = call(ADD, '{"a": 1, "b": 2}')
FINISH_CALL = call(FINISH, '{"answer": "three"}', "c1")
UNKNOWN_CALL = call("no_such_tool", "{}")

# Each way out: the graph's options, the script, and the rule that must end the run.
WAYS_OUT: dict[str, tuple[dict[str, Any], list[Any], str]] = {
    "final_answer": ({}, [ADD_CALL, "three"], "exit/final_answer"),
    "done_flag": ({"done_field": "done"}, [ADD_CALL, FINISH_CALL], "exit/done_flag"),
    "error_budget": ({"error_budget": 2}, [UNKNOWN_CALL, UNKNOWN_CALL], "termination/error_budget"),
    "max_steps": ({"max_steps": 2}, [ADD_CALL, ADD_CALL], "termination/max_steps"),
}


def compiled(
    arbiter: Arbiter, store: SqliteStore, script: Any, **options: Any
) -> tuple[Any, ScriptedChatModel]:
    model = ScriptedChatModel(script)
    graph = react_graph(tools=[ADD, FINISH], **options)
    return graph.compile(store=store, services={"model": model, "arbiter": arbiter}), model


@pytest.mark.parametrize("way", list(WAYS_OUT))
def test_issue44_each_way_out_is_a_rule_named_on_the_stored_run(
    tmp_path: Path, arbiter: Arbiter, way: str
) -> None:
    options, script, rule = WAYS_OUT[way]
    with SqliteStore(tmp_path / "runs.db") as store:
        app, model = compiled(arbiter, store, script, **options)
        final = app.invoke({"task": "add 1 and 2"}, run_id=way)
        record = store.get_run(way)
    assert record.stopped_by == rule
    # A success rule finishes the run (done); a budget halts it (halted, with its reason).
    success = rule.startswith("exit/")
    assert record.status == ("done" if success else "halted")
    reasons = {"error_budget": "error_budget_exhausted", "max_steps": "max_steps_exceeded"}
    assert record.stop_reason == reasons.get(way, way)
    # The script holds exactly the replies the loop may ask for: a loop that went on past
    # its rule would run out of replies and fail.
    assert len(model.requests) == len(script)
    assert final.llm_steps == len(script)
    assert final.done is (rule.startswith("exit/"))


def test_issue44_the_default_pack_shows_its_rules_and_the_budgets_stay(arbiter: Arbiter) -> None:
    ir = react_graph(tools=[ADD], done_field="done").to_ir()
    observe = next(n for n in ir.nodes if n.id == "observe")
    packs = {p.id: p.source for p in observe.rules}
    assert sorted(packs) == ["exit", "termination"]
    assert "(defrule final_answer" in packs["exit"]
    assert "(defrule done_flag" in packs["exit"]
    assert "(defrule error_budget" in packs["termination"]
    assert "(defrule max_steps" in packs["termination"]
    # Without a declared done field there is no done-flag rule to see.
    plain = next(n for n in react_graph(tools=[ADD]).to_ir().nodes if n.id == "observe")
    assert [("done_flag" in p.source) for p in plain.rules] == [False, False]
    for pack in (exit_pack(), termination_pack()):
        fathom.validate_pack(pack, fact_fields=fathom.fact_fields(ReactState))


def test_issue44_a_done_flag_ends_the_loop_and_keeps_the_tool_result(
    tmp_path: Path, arbiter: Arbiter
) -> None:
    # The second reply is never asked for: the tool's result ended the loop.
    script = [FINISH_CALL, "never asked"]
    with SqliteStore(tmp_path / "runs.db") as store:
        app, model = compiled(arbiter, store, script, done_field="done")
        final = app.invoke({"task": "answer"}, run_id="d")
        assert store.get_run("d").stopped_by == "exit/done_flag"
    assert len(model.requests) == 1
    (record,) = final.tool_calls
    assert (record.tool, record.status) == (FINISH, "success")
    assert (final.done, final.last_event) == (True, "tool_done")
    # The final answer is the finishing result's summary (a dict result: its JSON).
    assert final.final_answer == record.summary == '{"done":true,"answer":"three"}'
    assert final.final_output is None
    last = final.trajectory[-1]
    assert (last.kind, last.message.role) == ("observation", "tool")
    assert last.message.tool_call_id == "c1"


@pytest.mark.parametrize(
    ("options", "arguments"),
    [
        ({}, '{"answer": "x"}'),  # no field declared: a done key is just data
        ({"done_field": "done"}, '{"answer": "x", "flag": "yes"}'),  # truthy is not true
        ({"done_field": "done"}, '{"answer": "x", "flag": "false"}'),
        ({"done_field": "finished"}, '{"answer": "x"}'),  # another field was declared
    ],
)
def test_issue44_only_a_declared_true_done_field_ends_the_loop(
    tmp_path: Path, arbiter: Arbiter, options: dict[str, Any], arguments: str
) -> None:
    script = [call(FINISH, arguments), "the answer"]
    with SqliteStore(tmp_path / "runs.db") as store:
        app, model = compiled(arbiter, store, script, **options)
        final = app.invoke({"task": "answer"}, run_id="n")
        assert store.get_run("n").stopped_by == "exit/final_answer"
    assert len(model.requests) == 2
    assert final.final_answer == "the answer"
    assert [r.status for r in final.tool_calls] == ["success"]


def test_issue44_without_a_final_answer_rule_an_answer_keeps_the_loop_going(
    tmp_path: Path, arbiter: Arbiter
) -> None:
    script = ["an early answer", FINISH_CALL]
    with SqliteStore(tmp_path / "runs.db") as store:
        app, model = compiled(
            arbiter,
            store,
            script,
            done_field="done",
            rules=[exit_pack(final_answer=False, done_flag=True)],
        )
        final = app.invoke({"task": "answer"}, run_id="k")
        assert store.get_run("k").stopped_by == "exit/done_flag"
    # The model is told its answer did not end the task (a note, not an error) ...
    second = model.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant", "user"]
    assert second[1].content == "an early answer"
    assert "does not end this task" in (second[2].content or "")
    assert final.error_count == 0
    # ... and the note is part of the conversation that was kept.
    kinds = [(s.llm_step, s.kind) for s in final.trajectory]
    assert kinds == [
        (0, "task"),
        (1, "reply"),
        (2, "observation"),  # the note
        (2, "reply"),
        (2, "observation"),  # the finishing tool's result
    ]


def test_issue44_budgets_stop_a_loop_whose_rules_never_end_it(
    tmp_path: Path, arbiter: Arbiter
) -> None:
    def answers(request: ChatRequest) -> ChatResponse:
        return ChatResponse(message=ChatMessage.assistant(f"answer {len(request.messages)}"))

    with SqliteStore(tmp_path / "runs.db") as store:
        app, model = compiled(arbiter, store, answers, rules=[], max_steps=3)
        final = app.invoke({"task": "answer"}, run_id="b")
        assert store.get_run("b").stopped_by == "termination/max_steps"
    assert len(model.requests) == 3
    # Every request after an answer ends with the note that it did not end the task.
    assert [r.messages[-1].role for r in model.requests] == ["user", "user", "user"]
    assert [len(r.messages) for r in model.requests] == [1, 3, 5]
    assert final.final_answer == "answer 5"  # the last answer given
    assert final.error_count == 0


def test_issue44_a_success_rule_outranks_a_budget_at_the_same_step(
    tmp_path: Path, arbiter: Arbiter
) -> None:
    with SqliteStore(tmp_path / "runs.db") as store:
        app, _ = compiled(arbiter, store, [FINISH_CALL], done_field="done", max_steps=1)
        app.invoke({"task": "answer"}, run_id="p")
        assert store.get_run("p").stopped_by == "exit/done_flag"


def test_issue44_bad_done_field_and_rules_are_reported_together() -> None:
    with pytest.raises(SkillValidationError) as caught:
        react_graph(tools=[ADD], done_field="", rules=exit_pack(), max_steps=0)  # type: ignore[arg-type]
    pointers = sorted(p.pointer for p in caught.value.problems)
    assert pointers == ["/done_field", "/max_steps", "/rules"]


def _crashing(script: list[Any], at: int) -> Callable[[ChatRequest], ChatResponse]:
    """The script's replies, raising at reply ``at`` (0-based) like an endpoint that died."""

    def reply(request: ChatRequest) -> ChatResponse:
        steps = sum(1 for m in request.messages if m.role == "assistant")
        if steps == at:
            raise RuntimeError("the model endpoint is down")
        item = script[steps]
        return item if isinstance(item, ChatResponse) else ChatResponse(message=item)

    return reply


def test_issue44_the_done_flag_decision_resumes_and_replays(
    tmp_path: Path, arbiter: Arbiter
) -> None:
    script = [ADD_CALL, FINISH_CALL]
    with SqliteStore(tmp_path / "runs.db") as store:
        broken, _ = compiled(arbiter, store, _crashing(script, at=1), done_field="done")
        with pytest.raises(NodeError):
            broken.invoke({"task": "add, then finish"}, run_id="r")
        assert store.get_run("r").status == "failed"
        app, model = compiled(arbiter, store, script[1:], done_field="done")
        events = list(app.resume_stream("r"))
        final = app.get_state("r")
        assert store.get_run("r").stopped_by == "exit/done_flag"
        assert len(model.requests) == 1  # the first reply came from the record
        live = [(e.rule, e.decision, e.reason) for e in events if isinstance(e, RuleDecided)]
        assert live == [("exit/done_flag", "finish", "done_flag")]
        # Offline, from the record alone: no model, no arbiter.
        offline = react_graph(tools=[ADD, FINISH], done_field="done").compile(store=store)
        replayed = list(offline.replay_stream("r"))
        decided = [(e.rule, e.decision, e.reason) for e in replayed if isinstance(e, RuleDecided)]
        assert decided[-1] == ("exit/done_flag", "finish", "done_flag")
        assert offline.replay("r") == final
    assert final.final_answer == '{"done":true,"answer":"three"}'
