"""A small Python client for ``stargraph serve``, sync (:class:`Client`) and async
(:class:`AsyncClient`), over httpx.

>>> from stargraph.client import Client
>>> Client("http://127.0.0.1:2024").url
'http://127.0.0.1:2024'

The calls name what they do: ``create_thread``, ``stream`` (a run, as it happens),
``resume`` (answer the interrupt a thread waits on), ``wait``, ``join``, ``cancel``,
``list_runs``, ``state``. A stream yields :class:`StreamEvent` s, and reconnects by itself
when the connection drops, from the last event it got (``Last-Event-ID``), so it never sees
an event twice nor misses one. A refusal raises :class:`~stargraph.errors.ApiError` with the
server's message and HTTP status. ``langgraph-sdk``'s client speaks the same API; this one
is for code that wants stargraph's names and no extra dependency.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import httpx

from stargraph.errors import ApiError

__all__ = ["AsyncClient", "Client", "StreamEvent"]

RECONNECTS: Final = 5
"""How many times in a row a stream reconnects after its connection dropped."""

_NO_ANSWER: Final = object()


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One server-sent event of a run: ``id`` (its number in the run's stream), ``event``
    (``metadata``, ``values``, ``updates``, ``messages``, ``custom`` or ``error``) and its
    ``data``, decoded from JSON."""

    id: int
    event: str
    data: Any


def _headers(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def _raise_for(response: httpx.Response, body: bytes) -> None:
    if response.status_code < 400:
        return
    try:
        detail = json.loads(body)["detail"]
    except (ValueError, KeyError, TypeError):
        detail = body.decode(errors="replace") or response.reason_phrase
    raise ApiError(
        f"{response.request.method} {response.request.url.path}: {detail}",
        status=response.status_code,
    )


def _run_body(
    assistant_id: str, input: Mapping[str, Any] | None, answer: Any, stream_mode: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"assistant_id": assistant_id, "stream_mode": stream_mode}
    if answer is not _NO_ANSWER:
        body["command"] = {"resume": answer}
    else:
        body["input"] = dict(input or {})
    return body


class _Decoder:
    """Server-sent events out of text lines, and the last id seen."""

    def __init__(self) -> None:
        self.event = ""
        self.data: list[str] = []
        self.id: int | None = None
        self.last: int | None = None

    def line(self, line: str) -> StreamEvent | None:
        if line:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                self.event = value
            elif field == "data":
                self.data.append(value)
            elif field == "id" and value.lstrip("-").isdigit():
                self.id = int(value)
            return None
        if self.id is None:
            return None
        out = StreamEvent(self.id, self.event, json.loads("\n".join(self.data) or "null"))
        self.last = self.id
        self.event, self.data, self.id = "", [], None
        return out


class Client:
    """A client of the ``stargraph serve`` at ``url`` (``token``: its bearer token)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url
        self._http = httpx.Client(
            base_url=url, headers=_headers(token), timeout=timeout, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, path, **kwargs)
        _raise_for(response, response.content)
        return response.json() if response.content else None

    def assistants(self) -> list[dict[str, Any]]:
        """The assistants: one per served graph (its id is the graph's name)."""
        found: list[dict[str, Any]] = self._call("POST", "/assistants/search", json={"limit": 1000})
        return found

    def create_thread(
        self, thread_id: str | None = None, *, metadata: Mapping[str, Any] | None = None
    ) -> str:
        """Create a thread; its id."""
        body = {"thread_id": thread_id, "metadata": dict(metadata or {})}
        made: dict[str, Any] = self._call("POST", "/threads", json=body)
        return str(made["thread_id"])

    def thread(self, thread_id: str) -> dict[str, Any]:
        """A thread: status (``idle``, ``busy``, ``interrupted``, ``error``), values."""
        found: dict[str, Any] = self._call("GET", f"/threads/{thread_id}")
        return found

    def state(self, thread_id: str) -> dict[str, Any]:
        """The thread's state: ``values``, ``next`` nodes and pending ``interrupts``."""
        found: dict[str, Any] = self._call("GET", f"/threads/{thread_id}/state")
        return found

    def start(
        self,
        thread_id: str | None,
        assistant_id: str,
        input: Mapping[str, Any] | None = None,
        *,
        answer: Any = _NO_ANSWER,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """Start a run in the background (``answer``: resume the interrupted thread with
        it instead of starting a new turn; ``run_id``: the id of the run, by default a
        fresh one); the run. ``thread_id=None``: a run of its own, no thread's turn."""
        body = _run_body(assistant_id, input, answer, "values")
        if run_id is not None:
            body["run_id"] = run_id
        path = "/runs" if thread_id is None else f"/threads/{thread_id}/runs"
        made: dict[str, Any] = self._call("POST", path, json=body)
        return made

    def wait(
        self,
        thread_id: str,
        assistant_id: str,
        input: Mapping[str, Any] | None = None,
        *,
        answer: Any = _NO_ANSWER,
    ) -> dict[str, Any]:
        """Run and return the thread's values when the run ended (``__interrupt__``: what it
        waits on)."""
        body = _run_body(assistant_id, input, answer, "values")
        values: dict[str, Any] = self._call("POST", f"/threads/{thread_id}/runs/wait", json=body)
        return values

    def resume(self, thread_id: str, assistant_id: str, answer: Any) -> dict[str, Any]:
        """Answer the interrupt the thread waits on (``Command(resume=answer)``) and wait."""
        return self.wait(thread_id, assistant_id, answer=answer)

    def stream(
        self,
        thread_id: str,
        assistant_id: str,
        input: Mapping[str, Any] | None = None,
        *,
        answer: Any = _NO_ANSWER,
        stream_mode: str | list[str] = "updates",
    ) -> Iterator[StreamEvent]:
        """Run and yield its events as they come (reconnecting after a drop)."""
        body = _run_body(assistant_id, input, answer, stream_mode)
        return self._events("POST", f"/threads/{thread_id}/runs/stream", body, None)

    def join_stream(
        self, thread_id: str, run_id: str, *, last_event_id: int | None = None
    ) -> Iterator[StreamEvent]:
        """A run's events from its start, or after ``last_event_id`` (every mode)."""
        return self._events(
            "GET", f"/threads/{thread_id}/runs/{run_id}/stream", None, last_event_id
        )

    def _events(self, method: str, path: str, body: Any, last: int | None) -> Iterator[StreamEvent]:
        decoder, drops = _Decoder(), 0
        decoder.last = last
        while True:
            headers = {} if decoder.last is None else {"Last-Event-ID": str(decoder.last)}
            try:
                with self._http.stream(method, path, json=body, headers=headers) as res:
                    if res.status_code >= 400:
                        _raise_for(res, res.read())
                    method, path, body = "GET", res.headers.get("location", path), None
                    for line in res.iter_lines():
                        event = decoder.line(line)
                        if event is not None:
                            drops = 0
                            yield event
                return
            except httpx.TransportError:
                drops += 1
                if method == "POST" or drops > RECONNECTS:
                    raise

    def join(self, thread_id: str, run_id: str) -> dict[str, Any]:
        """Wait for the run to end; the thread's values."""
        values: dict[str, Any] = self._call("GET", f"/threads/{thread_id}/runs/{run_id}/join")
        return values

    def run(self, thread_id: str, run_id: str) -> dict[str, Any]:
        """A run: ``status`` (``pending``, ``running``, ``success``, ``error``,
        ``interrupted``), ``error``."""
        found: dict[str, Any] = self._call("GET", f"/threads/{thread_id}/runs/{run_id}")
        return found

    def list_runs(self, thread_id: str, *, limit: int = 10) -> list[dict[str, Any]]:
        """The thread's runs, newest first."""
        found: list[dict[str, Any]] = self._call(
            "GET", f"/threads/{thread_id}/runs", params={"limit": limit}
        )
        return found

    def cancel(self, thread_id: str, run_id: str, *, wait: bool = False) -> None:
        """Cancel a run at its next step boundary (``wait``: until it stopped)."""
        self._call(
            "POST",
            f"/threads/{thread_id}/runs/{run_id}/cancel",
            params={"wait": int(wait)},
        )


class AsyncClient:
    """:class:`Client` for asyncio: the same calls, awaited (streams are async iterators)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self._http = httpx.AsyncClient(
            base_url=url, headers=_headers(token), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._http.request(method, path, **kwargs)
        _raise_for(response, response.content)
        return response.json() if response.content else None

    async def assistants(self) -> list[dict[str, Any]]:
        """:meth:`Client.assistants`."""
        found: list[dict[str, Any]] = await self._call(
            "POST", "/assistants/search", json={"limit": 1000}
        )
        return found

    async def create_thread(
        self, thread_id: str | None = None, *, metadata: Mapping[str, Any] | None = None
    ) -> str:
        """:meth:`Client.create_thread`."""
        body = {"thread_id": thread_id, "metadata": dict(metadata or {})}
        made: dict[str, Any] = await self._call("POST", "/threads", json=body)
        return str(made["thread_id"])

    async def state(self, thread_id: str) -> dict[str, Any]:
        """:meth:`Client.state`."""
        found: dict[str, Any] = await self._call("GET", f"/threads/{thread_id}/state")
        return found

    async def wait(
        self,
        thread_id: str,
        assistant_id: str,
        input: Mapping[str, Any] | None = None,
        *,
        answer: Any = _NO_ANSWER,
    ) -> dict[str, Any]:
        """:meth:`Client.wait`."""
        body = _run_body(assistant_id, input, answer, "values")
        values: dict[str, Any] = await self._call(
            "POST", f"/threads/{thread_id}/runs/wait", json=body
        )
        return values

    async def resume(self, thread_id: str, assistant_id: str, answer: Any) -> dict[str, Any]:
        """:meth:`Client.resume`."""
        return await self.wait(thread_id, assistant_id, answer=answer)

    async def stream(
        self,
        thread_id: str,
        assistant_id: str,
        input: Mapping[str, Any] | None = None,
        *,
        answer: Any = _NO_ANSWER,
        stream_mode: str | list[str] = "updates",
    ) -> AsyncIterator[StreamEvent]:
        """:meth:`Client.stream`."""
        body = _run_body(assistant_id, input, answer, stream_mode)
        method, path = "POST", f"/threads/{thread_id}/runs/stream"
        decoder, drops = _Decoder(), 0
        payload: Any = body
        while True:
            headers = {} if decoder.last is None else {"Last-Event-ID": str(decoder.last)}
            try:
                async with self._http.stream(method, path, json=payload, headers=headers) as res:
                    if res.status_code >= 400:
                        _raise_for(res, await res.aread())
                    method, path, payload = "GET", res.headers.get("location", path), None
                    async for line in res.aiter_lines():
                        event = decoder.line(line)
                        if event is not None:
                            drops = 0
                            yield event
                return
            except httpx.TransportError:
                drops += 1
                if method == "POST" or drops > RECONNECTS:
                    raise

    async def join(self, thread_id: str, run_id: str) -> dict[str, Any]:
        """:meth:`Client.join`."""
        values: dict[str, Any] = await self._call("GET", f"/threads/{thread_id}/runs/{run_id}/join")
        return values

    async def list_runs(self, thread_id: str, *, limit: int = 10) -> list[dict[str, Any]]:
        """:meth:`Client.list_runs`."""
        found: list[dict[str, Any]] = await self._call(
            "GET", f"/threads/{thread_id}/runs", params={"limit": limit}
        )
        return found

    async def cancel(self, thread_id: str, run_id: str, *, wait: bool = False) -> None:
        """:meth:`Client.cancel`."""
        await self._call(
            "POST", f"/threads/{thread_id}/runs/{run_id}/cancel", params={"wait": int(wait)}
        )
