"""``stargraph serve`` driven by LangGraph's own client (``langgraph-sdk``, unmodified), on
a SQLite run database (``tests/postgres/test_pg_serve.py``: the same on PostgreSQL).

A real uvicorn server on a free loopback port, started by each test; the client speaks HTTP
to it. Threads, a run that stops at an interrupt, its stream, the answer with
``Command(resume=...)``, a second run on the thread, listing, joining and cancelling runs,
tokens from a real ``openai`` client against the scripted server, SSE reconnect with
``Last-Event-ID``, the token, the body limit, the OpenAPI document and the store.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client, get_sync_client
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError

from stargraph.errors import ApiError, UsageError
from stargraph.llm import OpenAIChatModel
from stargraph.serve import ServeSettings, create_app
from stargraph.testing import Reply, ScriptedOpenAIServer
from tests.serve import graphs
from tests.serve.support import DEADLINE_S, InThread, sse

ANSWER = "Paris is the capital of France, and it sits on the Seine."


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[Any]:
    started: list[InThread] = []

    def start(graph_list: list[Any] | None = None, **options: Any) -> InThread:
        server = InThread(
            graph_list or [graphs.review, graphs.counter, graphs.held],
            options.pop("db", tmp_path / "runs.db"),
            **options,
        )
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def sdk() -> Iterator[Any]:
    """``get_sync_client(url=..., **options)``, each closed after the test."""
    made: list[Any] = []

    def make(url: str, **options: Any) -> Any:
        client = get_sync_client(url=url, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


async def drive_review(url: str) -> dict[str, Any]:
    """The acceptance scenario with the async client; what it saw, for the assertions."""
    async with get_client(url=url) as client:
        return await _drive_review(client)


async def _drive_review(client: Any) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    thread = await client.threads.create(metadata={"user": "ada"})
    tid = thread["thread_id"]
    seen["first"] = [
        (part.event, part.data)
        async for part in client.runs.stream(
            tid, "review", input={"topic": "tides"}, stream_mode=["updates", "values"]
        )
    ]
    seen["state"] = await client.threads.get_state(tid)
    seen["thread"] = await client.threads.get(tid)
    seen["answer"] = [
        (part.event, part.data)
        async for part in client.runs.stream(
            tid, "review", command={"resume": "yes"}, stream_mode="updates"
        )
    ]
    second = await client.runs.create(tid, "review", input={"topic": "moons"})
    seen["joined"] = await client.runs.join(tid, second["run_id"])
    seen["runs"] = await client.runs.list(tid)
    seen["second"] = await client.runs.get(tid, second["run_id"])
    seen["history"] = await client.threads.get_history(tid, limit=100)
    return seen


def check_review(seen: dict[str, Any]) -> None:
    updates = [data for event, data in seen["first"] if event == "updates"]
    assert updates[0] == {"draft": {"draft": "a note on tides", "log": ["draft"]}}
    [asked] = updates[-1]["__interrupt__"]
    assert asked["value"] == {"question": "publish 'a note on tides'?"}
    assert seen["first"][0][0] == "metadata"
    assert any(event == "values" for event, _ in seen["first"])
    assert seen["state"]["next"] == ["approve"]
    assert seen["state"]["interrupts"][0]["id"] == asked["id"]
    assert seen["thread"]["status"] == "interrupted"
    assert seen["thread"]["metadata"]["user"] == "ada"
    answered = [data for event, data in seen["answer"] if event == "updates"]
    assert answered == [
        {"approve": {"verdict": "yes", "log": ["approve"]}},
        {"publish": {"published": True, "log": ["publish"]}},
    ]
    # The second run continued the thread: it starts from the first run's state.
    assert seen["joined"]["log"] == ["draft", "approve", "publish", "draft"]
    assert seen["joined"]["topic"] == "moons"
    assert seen["joined"]["__interrupt__"][0]["value"] == {"question": "publish 'a note on moons'?"}
    statuses = [(r["status"], r["stargraph"]["kind"]) for r in seen["runs"]]
    assert statuses == [("interrupted", "start"), ("success", "resume"), ("interrupted", "start")]
    assert seen["second"]["status"] == "interrupted"
    assert seen["history"][0]["values"]["topic"] == "moons"
    # The second turn's steps 1 and 0 (it waits at approve), then the first turn's 3..0.
    assert [h["metadata"]["step"] for h in seen["history"]] == [1, 0, 3, 2, 1, 0]


def test_issue50_langgraph_client_drives_a_thread_through_an_interrupt(serving: Any) -> None:
    server = serving()
    check_review(asyncio.run(drive_review(server.url)))


def test_issue50_tokens_stream_from_a_real_model_in_messages_mode(
    serving: Any, tmp_path: Path, sdk: Any
) -> None:
    with ScriptedOpenAIServer([Reply.text(ANSWER)]) as llm:
        model = OpenAIChatModel("scripted", base_url=llm.base_url, api_key="k", backoff=0)
        from stargraph.checkpoint import MemoryStore

        app = graphs.chat.compile(store=MemoryStore(), services={"model": model})
        server = serving([app])
        client = sdk(server.url)
        thread = client.threads.create()
        parts = list(
            client.runs.stream(
                thread["thread_id"],
                "chat",
                input={"question": "Capital of France?"},
                stream_mode=["messages-tuple", "values"],
            )
        )
    chunks = [p.data for p in parts if p.event == "messages"]
    assert len(chunks) > 1, "the answer came in one piece: nothing was streamed"
    assert "".join(chunk["content"] for chunk, _ in chunks) == ANSWER
    assert {meta["langgraph_node"] for _, meta in chunks} == {"ask"}
    assert [p.data for p in parts if p.event == "values"][-1]["answer"] == ANSWER


def test_issue50_sync_client_cancels_a_running_run_at_its_step_boundary(
    serving: Any, tmp_path: Path, sdk: Any
) -> None:
    server = serving()
    client = sdk(server.url)
    tid = client.threads.create()["thread_id"]
    gate = tmp_path / "gate"
    run = client.runs.create(tid, "held", input={"gate": str(gate)}, stream_mode="updates")
    for part in client.runs.join_stream(tid, run["run_id"], stream_mode="updates"):
        if part.event == "updates" and "first" in part.data:
            break  # step 1 committed; `hold` now waits for the gate
    assert client.runs.get(tid, run["run_id"])["status"] == "running"
    client.runs.cancel(tid, run["run_id"])
    gate.touch()  # `hold` finishes, its step commits, and the run stops there
    client.runs.join(tid, run["run_id"])
    ended = client.runs.get(tid, run["run_id"])
    assert ended["status"] == "interrupted"
    assert ended["error"].startswith("cancelled")
    assert client.threads.get_state(tid)["values"]["log"] == ["first", "hold"]
    assert [r["run_id"] for r in client.runs.list(tid)] == [run["run_id"]]
    # A pending run cancelled before any worker took it never starts.
    tid2 = client.threads.create()["thread_id"]
    quiet = serving(workers=0, db=tmp_path / "other.db")
    other = sdk(quiet.url)
    other.threads.create(thread_id=tid2)
    pending = other.runs.create(tid2, "counter", input={})
    other.runs.cancel(tid2, pending["run_id"])
    assert other.runs.get(tid2, pending["run_id"])["status"] == "interrupted"


def test_issue50_sse_reconnect_with_last_event_id_loses_nothing(serving: Any, sdk: Any) -> None:
    server = serving()
    with httpx.Client(base_url=server.url, timeout=DEADLINE_S) as http:
        tid = http.post("/threads", json={}).json()["thread_id"]
        body = {"assistant_id": "counter", "input": {}, "stream_mode": ["updates", "values"]}
        first: list[str] = []
        with http.stream("POST", f"/threads/{tid}/runs/stream", json=body) as res:
            location = res.headers["location"]
            for line in res.iter_lines():
                first.append(line)
                if len(sse(first)) == 4:
                    break  # the client drops the connection mid-run
        got = sse(first)
        last = got[-1][0]
        with http.stream("GET", location, headers={"Last-Event-ID": str(last)}) as res:
            rest = sse([*res.iter_lines(), ""])
        with http.stream("GET", location) as res:
            whole = sse([*res.iter_lines(), ""])
    ids = [i for i, _, _ in got + rest]
    assert ids == list(range(len(ids))), "an event was lost or sent twice"
    assert got + rest == whole
    values = [json.loads(d) for _, e, d in whole if e == "values"]
    assert values[-1]["steps"] == [1, 2, 3, 4, 5]
    # The SDK's join_stream resumes the same way.
    client = sdk(server.url)
    run_id = location.partition("?")[0].split("/")[-2]
    again = list(client.runs.join_stream(tid, run_id, last_event_id=str(last)))
    assert [int(p.id) for p in again] == [i for i, _, _ in rest]


def test_issue50_token_is_required_off_loopback_and_checked(
    serving: Any, sdk: Any, tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match=r"host 0\.0\.0\.0 .*set a token"):
        create_app([graphs.counter], tmp_path / "x.db", settings=ServeSettings(host="0.0.0.0"))
    server = serving(settings=ServeSettings(token="s3cret"))
    with pytest.raises(httpx.HTTPStatusError) as refused:
        sdk(server.url, api_key=None).threads.create()
    assert refused.value.response.status_code == 401
    assert "Bearer" in refused.value.response.json()["detail"]
    assert httpx.get(f"{server.url}/ok").status_code == 200  # liveness stays open
    client = sdk(server.url, api_key="s3cret")  # x-api-key
    assert client.threads.create()["status"] == "idle"
    bearer = httpx.post(
        f"{server.url}/threads", json={}, headers={"Authorization": "Bearer s3cret"}
    )
    assert bearer.status_code == 200
    wrong = httpx.post(f"{server.url}/threads", json={}, headers={"Authorization": "Bearer no"})
    assert wrong.status_code == 401


def test_issue50_bodies_are_checked_and_refusals_name_the_culprit(serving: Any, sdk: Any) -> None:
    server = serving(settings=ServeSettings(max_body=2048))
    client = sdk(server.url)
    tid = client.threads.create()["thread_id"]
    with pytest.raises(UnprocessableEntityError) as bad:
        client.runs.create(tid, "counter", input={"n": "many"})
    assert "n:" in bad.value.response.json()["detail"]
    with pytest.raises(UnprocessableEntityError) as unknown:
        client.runs.create(tid, "counter", input={"bogus": 1})
    assert "bogus" in unknown.value.response.json()["detail"]
    with pytest.raises(NotFoundError, match="this server serves: counter, held, review"):
        client.runs.create(tid, "nope", input={})
    with pytest.raises(NotFoundError):
        client.runs.create("no-such-thread", "counter", input={})
    with pytest.raises(ConflictError) as nothing:
        client.runs.create(tid, "counter", command={"resume": 1})
    assert "answers an interrupt" in nothing.value.response.json()["detail"]
    with pytest.raises(UnprocessableEntityError) as modes:
        client.runs.create(tid, "counter", input={}, stream_mode="debug")
    assert "'debug'" in modes.value.response.json()["detail"]
    with pytest.raises(UnprocessableEntityError):
        client.runs.create(tid, "counter", input={}, interrupt_before=["tick"])
    big = httpx.post(f"{server.url}/threads", content=b"{" + b" " * 4096 + b"}")
    assert big.status_code == 413
    # Interrupted thread: a new input is refused until the interrupt is answered.
    client.runs.wait(tid, "review", input={"topic": "x"})
    with pytest.raises(ConflictError) as waiting:
        client.runs.create(tid, "review", input={"topic": "y"})
    assert "command={'resume': ...}" in waiting.value.response.json()["detail"]
    assert isinstance(ApiError("x", status=409), UsageError)


def test_issue50_openapi_document_describes_every_route(serving: Any, sdk: Any) -> None:
    server = serving()
    doc = httpx.get(f"{server.url}/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    assert set(doc["paths"]) >= {
        "/threads",
        "/threads/{thread_id}/runs/stream",
        "/threads/{thread_id}/runs/{run_id}/join",
        "/threads/{thread_id}/runs/{run_id}/cancel",
        "/store/items",
        "/assistants/search",
    }
    create = doc["paths"]["/threads/{thread_id}/runs"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "RunBody"
    )
    assert "assistant_id" in doc["components"]["schemas"]["RunBody"]["properties"]
    assistants = sdk(server.url).assistants.search()
    assert sorted(a["assistant_id"] for a in assistants) == ["counter", "held", "review"]
    drawn = sdk(server.url).assistants.get_graph("review")
    assert {"source": "draft", "target": "approve"} in drawn["edges"]


def test_issue50_agent_protocol_store_items(serving: Any, sdk: Any) -> None:
    server = serving()
    store = sdk(server.url).store
    store.put_item(["users", "ada"], "prefs", {"theme": "dark"})
    store.put_item(["users", "bob"], "prefs", {"theme": "light"})
    store.put_item(["users", "ada"], "prefs", {"theme": "solar"})  # replaces
    assert store.get_item(["users", "ada"], "prefs")["value"] == {"theme": "solar"}
    found = store.search_items(["users"], filter={"theme": "light"})["items"]
    assert [(i["namespace"], i["key"]) for i in found] == [(["users", "bob"], "prefs")]
    spaces = store.list_namespaces(prefix=["users"])["namespaces"]
    assert spaces == [["users", "ada"], ["users", "bob"]]
    store.delete_item(["users", "bob"], "prefs")
    with pytest.raises(NotFoundError):
        store.get_item(["users", "bob"], "prefs")
