"""``stargraph.client`` against a real ``stargraph serve`` (uvicorn on a free loopback port):
the same scenario as LangGraph's client drives, sync and async, its stream reconnecting by
itself, and refusals as ``ApiError`` with the server's message and status."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stargraph.client import AsyncClient, Client, StreamEvent
from stargraph.errors import ApiError
from stargraph.serve import ServeSettings
from tests.serve import graphs
from tests.serve.support import InThread


@pytest.fixture
def server(tmp_path: Path) -> Iterator[InThread]:
    s = InThread(
        [graphs.review, graphs.counter], tmp_path / "runs.db", settings=ServeSettings(token="t")
    )
    yield s
    s.close()


def test_issue50_client_runs_a_thread_through_an_interrupt(server: InThread) -> None:
    with Client(server.url, token="t") as client:
        assert [a["assistant_id"] for a in client.assistants()] == ["review", "counter"]
        tid = client.create_thread(metadata={"user": "ada"})
        events = list(client.stream(tid, "review", {"topic": "tides"}))
        assert events[0].event == "metadata"
        assert "__interrupt__" in events[-1].data
        assert client.thread(tid)["status"] == "interrupted"
        assert client.state(tid)["next"] == ["approve"]
        done = client.resume(tid, "review", "yes")
        assert done["published"] is True
        run = client.start(tid, "review", {"topic": "moons"})
        assert client.join(tid, run["run_id"])["topic"] == "moons"
        assert client.run(tid, run["run_id"])["status"] == "interrupted"
        assert len(client.list_runs(tid)) == 3
        again = list(client.join_stream(tid, run["run_id"], last_event_id=events[1].id))
        assert all(e.id > events[1].id for e in again)
        with pytest.raises(ApiError) as refused:
            client.start(tid, "review", {"topic": "suns"})
        assert refused.value.status == 409
        assert "command={'resume': ...}" in str(refused.value)
    with Client(server.url) as anonymous, pytest.raises(ApiError) as denied:
        anonymous.create_thread()
    assert denied.value.status == 401


def test_issue50_async_client_streams_and_waits(server: InThread) -> None:
    async def main() -> tuple[list[StreamEvent], dict[str, object], dict[str, object], int]:
        async with AsyncClient(server.url, token="t") as client:
            counted = await client.create_thread()
            events = [e async for e in client.stream(counted, "counter", {}, stream_mode="values")]
            reviewed = await client.create_thread()
            asked = await client.wait(reviewed, "review", {"topic": "tides"})
            answered = await client.resume(reviewed, "review", "yes")
            return events, asked, answered, len(await client.list_runs(reviewed))

    events, asked, answered, runs = asyncio.run(main())
    assert [e.data["n"] for e in events if e.event == "values"][-1] == 5
    assert [e.id for e in events] == sorted({e.id for e in events})
    assert "__interrupt__" in asked
    assert answered["published"] is True
    assert runs == 2


class _DropOnce(httpx.BaseTransport):
    """A transport that cuts the first stream of a run after ``after`` lines: the client
    must reconnect to the Location the server sent, with Last-Event-ID."""

    def __init__(self, after: int) -> None:
        self.inner = httpx.HTTPTransport()
        self.after = after
        self.dropped = False
        self.reconnects: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "GET" and request.url.path.endswith("/stream"):
            self.reconnects.append(request.headers.get("last-event-id"))
        if self.dropped or not request.url.path.endswith("/runs/stream"):
            return response
        self.dropped = True
        stream = response.stream
        limit = self.after

        class Cut(httpx.SyncByteStream):
            def __iter__(self) -> Iterator[bytes]:
                sent = 0
                for chunk in stream:  # type: ignore[union-attr]
                    yield chunk
                    sent += chunk.count(b"\n\n")
                    if sent >= limit:
                        raise httpx.ReadError("connection dropped by the test")

            def close(self) -> None:
                stream.close()  # type: ignore[union-attr]

        return httpx.Response(response.status_code, headers=response.headers, stream=Cut())

    def close(self) -> None:
        self.inner.close()


def test_issue50_client_stream_reconnects_from_its_last_event(server: InThread) -> None:
    transport = _DropOnce(after=3)
    with Client(server.url, token="t", transport=transport) as client:
        tid = client.create_thread()
        events = list(client.stream(tid, "counter", {}, stream_mode=["values", "updates"]))
        with Client(server.url, token="t") as plain:
            run_id = client.list_runs(tid)[0]["run_id"]
            whole = [e for e in plain.join_stream(tid, run_id) if e.event != "messages"]
    assert transport.dropped
    assert len(transport.reconnects) == 1
    assert transport.reconnects[0] is not None
    assert events == whole, "the reconnected stream lost or repeated an event"
