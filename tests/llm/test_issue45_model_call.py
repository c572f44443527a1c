"""The model call's own cost: set-up done at compile time, the request posted as built.

``OpenAIChatModel`` posts the body its endpoint profile built instead of going through
``chat.completions.create``; these tests hold it to what ``create`` would have sent and
returned, and pin where the client's set-up is paid.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import openai
import pytest

from stargraph.errors import LLMError
from stargraph.llm import ChatMessage, ChatRequest, ChatResponse, OpenAIChatModel, Usage
from stargraph.testing import Reply, ScriptedOpenAIServer

TOOL = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
    },
}
REPLIES = (
    Reply.text("Four, and ünïcode.", usage=Usage(prompt_tokens=7, completion_tokens=3)),
    Reply.tool_calls([("calc", {"expr": "2+2"}), ("calc", {"expr": "3*3"})], content="Let me."),
)


def _request() -> ChatRequest:
    return ChatRequest(
        messages=(ChatMessage.system("Be brief."), ChatMessage.user("What is 2+2?")),
        tools=(TOOL,),
        temperature=0.25,
        max_tokens=64,
        tool_choice="auto",
        extra={"seed": 7, "stop": ["\n\n"]},
    )


@contextlib.contextmanager
def _model_on(reply: Reply) -> Iterator[tuple[OpenAIChatModel, ScriptedOpenAIServer]]:
    """A model on a server of its own, so that every call sees the same ids."""
    with (
        ScriptedOpenAIServer([reply]) as server,
        OpenAIChatModel("gpt-test", base_url=server.base_url, api_key="sk-test") as model,
    ):
        yield model, server


@pytest.mark.parametrize("reply", REPLIES, ids=["text", "tool_calls"])
def test_issue45_posted_request_and_reply_equal_what_create_sends_and_returns(
    reply: Reply,
) -> None:
    request = _request()
    with _model_on(reply) as (model, server):
        ours = model.complete(request)
        (sent,) = server.chat_requests
    with ScriptedOpenAIServer([reply]) as server:
        body = model.profile.body(request, model.model)
        with openai.OpenAI(api_key="sk-test", base_url=server.base_url, max_retries=0) as client:
            completion = client.chat.completions.create(
                model=body.pop("model"), messages=body.pop("messages"), extra_body=body
            )
        (via_create,) = server.chat_requests
    theirs = ChatResponse.from_openai(completion.model_dump(mode="json"))

    assert ours == theirs
    assert sent.body == via_create.body
    for header in ("authorization", "content-type", "accept"):
        assert sent.headers[header] == via_create.headers[header]


@pytest.mark.parametrize("reply", REPLIES, ids=["text", "tool_calls"])
def test_issue45_streamed_reply_assembles_to_the_unstreamed_one(reply: Reply) -> None:
    request = ChatRequest(messages=(ChatMessage.user("What is 2+2?"),), tools=(TOOL,))
    with _model_on(reply) as (model, _):
        whole = model.complete(request)
    tokens: list[str] = []
    with _model_on(reply) as (model, _):
        streamed = model.complete_streaming(request, tokens.append)
    with _model_on(reply) as (model, _), model.stream(request) as stream:
        deltas = list(stream)
        assembled = stream.response
    assert streamed == whole == assembled
    assert "".join(tokens) == "".join(d.content for d in deltas) == (whole.message.content or "")


class _NotJson(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        payload = b"<html>not an API</html>"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def not_json_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotJson)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_issue45_a_reply_that_is_not_json_is_an_llm_error_naming_the_endpoint(
    not_json_url: str,
) -> None:
    with (
        OpenAIChatModel("m", base_url=not_json_url, api_key="k", timeout=10) as model,
        pytest.raises(LLMError, match="not a JSON object") as caught,
    ):
        model.complete(ChatRequest(messages=(ChatMessage.user("hi"),)))
    assert not_json_url in str(caught.value)
    assert "<html>not an API</html>" in str(caught.value)


def test_issue45_warm_without_a_key_leaves_the_complaint_to_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with OpenAIChatModel("gpt-test") as model:
        model.warm()
        model.warm()
        with pytest.raises(LLMError, match="has no API key"):
            model.complete(ChatRequest(messages=(ChatMessage.user("hi"),)))


_COMPILE_WITH_A_MODEL = """
import json, sys
from pydantic import BaseModel
from stargraph import END, START, Graph
from stargraph.llm import OpenAIChatModel

class S(BaseModel):
    a: str = ""

def ask(state: S) -> dict[str, str]:
    return {"a": "never run"}

model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1")
seen = {"built": "openai" in sys.modules}
graph = Graph("one", state=S).with_node("ask", ask).with_edge(START, "ask").with_edge("ask", END)
graph.compile(services={"model": model})
seen["compiled"] = "openai" in sys.modules
print(json.dumps(seen))
"""


def test_issue45_compile_does_the_model_client_set_up_not_the_first_call() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _COMPILE_WITH_A_MODEL],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert json.loads(done.stdout) == {"built": False, "compiled": True}
