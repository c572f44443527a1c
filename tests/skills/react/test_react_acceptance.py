"""Issue 7 acceptance for the ReAct primitive: the real ``openai`` client over HTTP to the
scripted server, a real tool arbiter, and a SQLite store holding the run record."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import openai
import pytest
from pydantic import BaseModel

from stargraph.checkpoint import SqliteStore
from stargraph.errors import LLMError
from stargraph.llm import OpenAIChatModel
from stargraph.runtime import CompiledGraph
from stargraph.skills.react import ReactState, react_graph
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.testing.pytest_plugin import scripted_openai  # noqa: F401
from stargraph.tools import Arbiter, ToolRegistry, builtin_tools, llm_name_for, tool
from tests.support import finished

CALC = "demo.calc@1.0.0"
FORBIDDEN = "demo.forbidden@1.0.0"
FS_READ = "choir.fs.read@1.0.0"
HTTP_FETCH = "choir.http.fetch@1.0.0"
ALLOWED = (CALC, FS_READ, HTTP_FETCH)

CALLS: list[dict[str, Any]] = []
"""Every time the calc body is entered, its arguments."""
ENTERED_FORBIDDEN: list[dict[str, Any]] = []
"""Every time the forbidden body is entered; must stay empty."""


@tool(id=CALC)
def calc(a: int, b: int, op: Literal["add", "mul"] = "add") -> int:
    """Add or multiply two integers."""
    CALLS.append({"a": a, "b": b, "op": op})
    return a + b if op == "add" else a * b


@tool(id=FORBIDDEN, side_effect="external")
def forbidden(target: str) -> str:
    """A tool registered but never allowlisted: its body must never run."""
    ENTERED_FORBIDDEN.append({"target": target})
    raise AssertionError("the forbidden tool body was entered")


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    CALLS.clear()
    ENTERED_FORBIDDEN.clear()
    yield
    assert ENTERED_FORBIDDEN == [], "a refused call reached the tool body"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("the secret number is 17\n", encoding="utf-8")
    return root


@pytest.fixture
def arbiter(workspace: Path) -> Iterator[Arbiter]:
    registry = ToolRegistry.build(builtins=[calc, forbidden, *builtin_tools()])
    with Arbiter(registry, workspace=workspace) as arb:
        yield arb


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def chat(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    sleeps: list[float],
) -> Iterator[OpenAIChatModel]:
    model = OpenAIChatModel(
        "gpt-test",
        base_url=scripted_openai.base_url,
        api_key="sk-test",
        timeout=5.0,
        max_retries=3,
        backoff=0.01,
        sleep=sleeps.append,
    )
    yield model
    model.close()


@pytest.fixture
def page_url() -> Iterator[str]:
    """A local HTTP page on 127.0.0.1 for ``choir.http.fetch``."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><body>The capital of France is Paris.</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/page.html"
    server.shutdown()
    server.server_close()
    thread.join()


def compiled(
    chat: OpenAIChatModel,
    arbiter: Arbiter,
    store: SqliteStore | None = None,
    **options: Any,
) -> CompiledGraph[ReactState]:
    options.setdefault("tools", ALLOWED)
    return react_graph(**options).compile(store=store, services={"model": chat, "arbiter": arbiter})


def tool_messages(request: RecordedRequest) -> list[dict[str, Any]]:
    return [m for m in request.messages if m["role"] == "tool"]


def last_tool_content(request: RecordedRequest) -> str:
    """What the model read of the last tool result: the tool's payload as text."""
    content: str = tool_messages(request)[-1]["content"]
    return content


def short(tool_id: str) -> str:
    """The name the model is offered for ``tool_id`` (no two allowed tools share it)."""
    return tool_id.partition("@")[0].rsplit(".", 1)[-1]


def name(tool_id: str) -> str:
    return llm_name_for(tool_id)


# --------------------------------------------------------------------------- happy path


def test_three_tool_run_ends_with_the_right_final_answer(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
    store: SqliteStore,
    page_url: str,
) -> None:
    """calc, fs.read and http.fetch in turn; the answer is built from what the tools said."""
    seen: dict[str, Any] = {}

    def script(request: RecordedRequest) -> Reply:
        turn = len(tool_messages(request))
        assert request.body is not None
        if turn == 0:
            # The user's order, under names a model reads.
            assert [t["function"]["name"] for t in request.body["tools"]] == [
                short(t) for t in ALLOWED
            ]
            return Reply.tool_calls([(short(CALC), {"a": 6, "b": 7, "op": "mul"})])
        if turn == 1:
            seen["product"] = json.loads(last_tool_content(request))
            return Reply.tool_calls([(short(FS_READ), {"path": "notes.txt"})])
        if turn == 2:
            seen["notes"] = last_tool_content(request)
            return Reply.tool_calls([(short(HTTP_FETCH), {"url": page_url})])
        seen["page"] = json.loads(last_tool_content(request))["body"]
        number = seen["notes"].split()[-1]
        city = seen["page"].split("is ")[1].split(".")[0]
        return Reply.text(f"{seen['product']}, {number}, {city}")

    scripted_openai.set_script(script)
    app = compiled(chat, arbiter, store, system_prompt="Use the tools.")
    final = app.invoke({"task": "Compute 6*7, read notes.txt, fetch the page."}, run_id="r3")

    assert final.final_answer == "42, 17, Paris"
    assert final.done is True
    assert [r.tool for r in final.tool_calls] == [CALC, FS_READ, HTTP_FETCH]
    assert [r.status for r in final.tool_calls] == ["success"] * 3
    assert final.llm_steps == 4
    assert final.error_count == 0
    assert final.error_budget == 3
    assert final.usage.total_tokens > 0
    record = app.get_run("r3")
    assert (record.status, record.stopped_by) == ("done", "exit/final_answer")
    # think, act, observe three times, then the answering think and its observe (where the
    # termination pack decides).
    assert record.last_step == 11
    first = scripted_openai.chat_requests[0]
    assert first.messages[0] == {"role": "system", "content": "Use the tools."}
    assert first.body is not None
    assert first.body["model"] == "gpt-test"


def test_parallel_tool_calls_all_run_and_their_ids_round_trip(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
) -> None:
    scripted_openai.set_script(
        [
            Reply.tool_calls(
                [
                    ("call_a", name(CALC), {"a": 1, "b": 2}),
                    ("call_b", name(CALC), {"a": 3, "b": 4, "op": "mul"}),
                    ("call_c", name(FS_READ), {"path": "notes.txt"}),
                ]
            ),
            Reply.text("done"),
        ]
    )
    final = compiled(chat, arbiter).invoke({"task": "three at once"})

    assert CALLS == [{"a": 1, "b": 2, "op": "add"}, {"a": 3, "b": 4, "op": "mul"}]
    assert [r.call_id for r in final.tool_calls] == ["call_a", "call_b", "call_c"]
    assert [r.status for r in final.tool_calls] == ["success"] * 3
    second = scripted_openai.chat_requests[1]
    assistant = next(m for m in second.messages if m["role"] == "assistant")
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_a", "call_b", "call_c"]
    answers = tool_messages(second)
    # Every call answered, in order, right after the assistant message that made them.
    assert [m["tool_call_id"] for m in answers] == ["call_a", "call_b", "call_c"]
    index = second.messages.index(assistant)
    assert second.messages[index + 1 : index + 4] == answers
    # The payloads themselves: the envelope (status, summary, ref) stays in the record.
    assert [json.loads(m["content"]) for m in answers[:2]] == [3, 12]
    assert all(r.artifact_ref for r in final.tool_calls)
    assert final.final_answer == "done"


# --------------------------------------------------------------------------- termination


@pytest.mark.parametrize("max_steps", [1, 3, 10])
def test_a_model_that_never_stops_halts_at_max_steps(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
    store: SqliteStore,
    max_steps: int,
) -> None:
    scripted_openai.set_script(lambda _: Reply.tool_calls([(name(CALC), {"a": 1, "b": 1})]))
    options: dict[str, Any] = {} if max_steps == 10 else {"max_steps": max_steps}
    app = compiled(chat, arbiter, store, **options)
    final = app.invoke({"task": "loop forever"}, run_id="forever")

    assert len(scripted_openai.chat_requests) == max_steps  # never one call more
    assert len(CALLS) == max_steps  # the last reply's call ran before the stop
    assert final.llm_steps == max_steps
    assert final.done is False
    assert final.final_answer is None
    assert final.trajectory[-1].kind == "observation"  # the last call was observed
    record = app.get_run("forever")
    assert (record.status, record.stopped_by) == ("halted", "termination/max_steps")
    assert record.last_step == 3 * max_steps


def test_done_stops_the_loop_and_is_named_in_the_run_record(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
    store: SqliteStore,
) -> None:
    scripted_openai.set_script([Reply.text("no tools needed")])
    app = compiled(chat, arbiter, store)
    events = list(app.stream({"task": "hi"}, run_id="d"))
    assert events[-1].kind == "run_finished"
    assert finished(events).stopped_by == "exit/final_answer"
    decided = [(e.step, e.decision, e.rule) for e in events if e.kind == "rule_decided"]
    # The answer goes think -> observe; the pack decides once, after observe.
    assert decided == [(2, "finish", "exit/final_answer")]
    assert app.get_run("d").stopped_by == "exit/final_answer"
    assert app.get_run("d").last_step == 2


def test_error_budget_stops_the_loop_and_is_named_in_the_run_record(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
    store: SqliteStore,
) -> None:
    """Each failed call spends one unit: the third failure halts, after it was observed."""
    scripted_openai.set_script(lambda _: Reply.tool_calls([(name(FORBIDDEN), {"target": "x"})]))
    app = compiled(chat, arbiter, store, error_budget=3)
    final = app.invoke({"task": "misbehave"}, run_id="e")

    assert len(scripted_openai.chat_requests) == 3
    assert (final.error_count, final.error_budget) == (3, 0)
    assert [r.status for r in final.tool_calls] == ["denied"] * 3
    assert final.trajectory[-1].kind == "observation"
    record = app.get_run("e")
    assert (record.status, record.stopped_by) == ("halted", "termination/error_budget")


def test_error_budget_counts_every_failed_call_of_a_parallel_reply(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
) -> None:
    scripted_openai.set_script(
        [Reply.tool_calls([(name(CALC), "{bad"), (name(CALC), {"a": "x", "b": 1})])]
    )
    events = list(compiled(chat, arbiter, error_budget=2).stream({"task": "t"}))
    assert finished(events).stopped_by == "termination/error_budget"
    assert finished(events).state["error_count"] == 2
    assert len(scripted_openai.chat_requests) == 1


# --------------------------------------------------------------------------- bad calls


def test_bad_calls_get_structured_observations_and_never_enter_the_body(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
) -> None:
    """Outside the allowlist, invalid JSON, schema-violating, unknown: refused before any
    body runs; each answer is a tool message for its id with a machine-readable reason."""
    scripted_openai.set_script(
        [
            Reply.tool_calls(
                [
                    ("c_forbidden", name(FORBIDDEN), {"target": "prod"}),
                    ("c_json", name(CALC), '{"a": 1, "b": '),
                    ("c_schema", name(CALC), {"a": "one", "b": 2, "op": "pow"}),
                    ("c_array", name(CALC), "[1, 2]"),
                    ("c_unknown", "rm_rf", {}),
                ]
            ),
            Reply.text("sorry"),
        ]
    )
    final = compiled(chat, arbiter, error_budget=10).invoke({"task": "t"})

    assert CALLS == []  # not one body entered (ENTERED_FORBIDDEN is checked on teardown)
    by_id = {
        m["tool_call_id"]: m["content"] for m in tool_messages(scripted_openai.chat_requests[1])
    }
    assert list(by_id) == ["c_forbidden", "c_json", "c_schema", "c_array", "c_unknown"]
    assert all(text.startswith("Error: ") for text in by_id.values())
    assert f"tool {FORBIDDEN!r} is not allowed" in by_id["c_forbidden"]
    assert "not valid JSON" in by_id["c_json"]
    assert "a:" in by_id["c_schema"]
    assert "op:" in by_id["c_schema"]
    assert "must be a JSON object" in by_id["c_array"]
    assert "unknown tool 'rm_rf'" in by_id["c_unknown"]
    statuses = [(r.status, r.error_code) for r in final.tool_calls]
    assert statuses == [
        ("denied", "tool_not_allowed"),
        ("invalid", "invalid_arguments"),
        ("invalid", "invalid_arguments"),
        ("invalid", "invalid_arguments"),
        ("invalid", "unknown_tool"),
    ]
    assert final.error_count == 5
    assert [r.error_code for r in final.tool_calls] == [
        "tool_not_allowed",
        "invalid_arguments",
        "invalid_arguments",
        "invalid_arguments",
        "unknown_tool",
    ]
    # Every refused attempt went through the arbiter and is audited, the JSON-less ones too,
    # under the canonical tool id.
    log = arbiter.commit_log.records()
    assert [r.status for r in log] == ["denied", "invalid", "invalid", "invalid", "invalid"]
    assert [r.tool for r in log] == [FORBIDDEN, CALC, CALC, CALC, "rm_rf"]
    assert [r.tool for r in final.tool_calls] == [FORBIDDEN, CALC, CALC, CALC, "rm_rf"]
    assert final.final_answer == "sorry"


def test_a_refusal_becomes_an_observation_and_costs_budget(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
) -> None:
    scripted_openai.set_script([Reply.refusal("I can't do that."), Reply.text("ok then: 2")])
    final = compiled(chat, arbiter).invoke({"task": "1+1"})
    note = scripted_openai.chat_requests[1].messages[-1]
    assert note["role"] == "user"
    assert "You refused to continue" in note["content"]
    assert (final.error_count, final.final_answer) == (1, "ok then: 2")


def test_a_refusal_carrying_tool_calls_does_not_run_them(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
) -> None:
    """A reply that refuses is not acted on, even when it also asks for tools: think routes
    it to observe, so the calls never reach the arbiter."""
    calls = Reply.tool_calls([(name(CALC), {"a": 1, "b": 2, "op": "add"})]).calls
    scripted_openai.set_script([Reply(refusal_text="I won't.", calls=calls), Reply.text("fine: 3")])
    final = compiled(chat, arbiter).invoke({"task": "1+2"})
    assert CALLS == []
    assert final.tool_calls == []
    assert (final.error_count, final.final_answer) == (1, "fine: 3")


def test_refusals_exhaust_the_budget_after_their_notes_are_observed(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
    store: SqliteStore,
) -> None:
    """Budget spent by the model itself (refusals): the stop comes at observe, so the
    trajectory ends with the note that told the model why."""
    scripted_openai.set_script(lambda _: Reply.refusal("No."))
    app = compiled(chat, arbiter, store, error_budget=2)
    final = app.invoke({"task": "t"}, run_id="refuse")
    assert len(scripted_openai.chat_requests) == 2
    assert final.error_count == 2
    assert final.trajectory[-1].kind == "observation"
    assert "You refused to continue" in (final.trajectory[-1].message.content or "")
    record = app.get_run("refuse")
    assert (record.stopped_by, record.last_step) == ("termination/error_budget", 4)


class Verdict(BaseModel):
    answer: int
    confidence: float


def test_invalid_structured_answers_go_back_as_observations_within_the_budget(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
) -> None:
    scripted_openai.set_script(
        [
            Reply.text("forty-two"),
            Reply.text('{"answer": "x", "confidence": 0.5}'),
            Reply.text('```json\n{"answer": 42, "confidence": 0.9}\n```'),
        ]
    )
    final = compiled(chat, arbiter, output_model=Verdict).invoke({"task": "answer"})
    assert final.final_output == Verdict(answer=42, confidence=0.9)
    assert Verdict.model_validate_json(final.final_answer or "") == Verdict(
        answer=42, confidence=0.9
    )
    assert final.error_count == 2
    system = scripted_openai.chat_requests[0].messages[0]["content"]
    # Field names and types, never the raw schema (small models copy a schema back).
    assert "the fields answer (integer), confidence (number)" in system
    notes = [m for m in scripted_openai.chat_requests[2].messages if m["role"] == "user"]
    assert "is not the JSON object asked for (answer: " in notes[-1]["content"]
    assert "the fields answer (integer), confidence (number)" in notes[-1]["content"]
    for request in scripted_openai.chat_requests:
        assert '"properties"' not in json.dumps(request.messages)


def test_invalid_structured_answers_exhaust_the_budget(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
) -> None:
    scripted_openai.set_script(lambda _: Reply.text("not json"))
    app = compiled(chat, arbiter, output_model=Verdict, error_budget=2)
    events = list(app.stream({"task": "answer"}))
    assert finished(events).stopped_by == "termination/error_budget"
    assert finished(events).state["done"] is False
    assert len(scripted_openai.chat_requests) == 2


# --------------------------------------------------------------------------- HTTP failures


def test_429_and_500_replies_are_retried(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
    sleeps: list[float],
) -> None:
    scripted_openai.set_script(
        [
            Reply.error(429, retry_after=0),
            Reply.error(500),
            Reply.tool_calls([(name(CALC), {"a": 2, "b": 2})]),
            Reply.error(503),
            Reply.text("4"),
        ]
    )
    final = compiled(chat, arbiter).invoke({"task": "2+2"})
    assert final.final_answer == "4"
    assert len(scripted_openai.chat_requests) == 5
    assert len(sleeps) == 3  # one backoff per failed attempt
    assert CALLS == [{"a": 2, "b": 2, "op": "add"}]  # retries did not repeat the tool


def test_persistent_failure_ends_with_a_typed_error_and_resumes_from_the_checkpoint(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    chat: OpenAIChatModel,
    arbiter: Arbiter,
    store: SqliteStore,
) -> None:
    chat.max_retries = 1
    scripted_openai.set_script(
        [
            Reply.tool_calls([(name(CALC), {"a": 20, "b": 22})]),
            Reply.error(500),
            Reply.error(500),
        ]
    )
    app = compiled(chat, arbiter, store)
    with pytest.raises(LLMError) as caught:
        app.invoke({"task": "20+22"}, run_id="p")
    assert "HTTP 500" in str(caught.value)
    assert isinstance(caught.value.__cause__, openai.InternalServerError)
    record = app.get_run("p")
    assert record.status == "failed"
    assert record.last_step == 3  # think, act, observe are checkpointed; think #2 failed
    assert "LLMError" in (record.error or "") or "HTTP 500" in (record.error or "")

    scripted_openai.enqueue(Reply.text("42"))  # the endpoint recovers
    final = app.resume("p")
    assert final.final_answer == "42"
    assert CALLS == [{"a": 20, "b": 22, "op": "add"}]  # the tool did not run again
    assert [r.call_id for r in final.tool_calls] == ["call_0001"]
    record = app.get_run("p")
    assert (record.status, record.stopped_by, record.last_step) == (
        "done",
        "exit/final_answer",
        5,
    )
    # The resumed request carries the whole conversation, tool answer included.
    resumed = scripted_openai.chat_requests[-1]
    assert [m["role"] for m in resumed.messages] == ["user", "assistant", "tool"]
