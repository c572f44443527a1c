"""``OpenAIChatModel``: the one real :class:`ChatModel`, over the ``openai`` package.

It speaks to any OpenAI-compatible endpoint (OpenAI, vLLM, llama.cpp, Ollama, the scripted
test server). Three choices shape it:

* ``openai`` is imported lazily, inside the methods that need it: importing it costs more
  than the whole ``import stargraph`` budget, and replay never calls a model at all. A graph
  compiled with the model (:meth:`OpenAIChatModel.warm`) imports it then, so that a run's
  first call does not stop for it.
* The client's own retries are switched off (``max_retries=0``) and this class retries
  instead, so every attempt is counted, the backoff sleep is injectable (tests stay fast and
  deterministic: no jitter), and the final :class:`~stargraph.errors.LLMError` can say how
  many attempts were made.
* A request leaves as the body the endpoint profile built, posted with the client's own
  ``post``: ``chat.completions.create`` would walk every message against its typed
  parameters (its ``maybe_transform``, milliseconds per call on a long conversation) only to
  send the same JSON. Authentication, headers, timeouts, error mapping and server-sent events
  are still the client's; replies are read as plain JSON, never built into its models.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, NoReturn, Self, TypeVar

import orjson

from stargraph._lifecycle import Closing
from stargraph.errors import LLMError
from stargraph.llm._messages import (
    ChatDelta,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from stargraph.llm._profiles import EndpointProfile, detect_profile, profile_for_url
from stargraph.llm._recorded import Journal, JournaledChatModel

if TYPE_CHECKING:
    import ssl

    import openai
    from openai import AsyncStream, RequestOptions, Stream

__all__ = ["ChatStream", "OpenAIChatModel", "StreamAssembler", "delta_from_chunk"]

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
# Local endpoints (vLLM, llama.cpp, the scripted server) ignore the key, but the openai
# client refuses to start without one.
_PLACEHOLDER_KEY: Final = "sk-no-key-needed"
# 408 request timeout, 409 conflict (lock contention), 429 rate limit: the same set the
# openai client itself treats as transient, plus every 5xx below.
_TRANSIENT_STATUSES: Final = frozenset({408, 409, 429})
# What a pydantic/FastAPI request-validation error looks like in an error message.
_VALIDATION: Final = re.compile(
    r"\d+ validation errors?\b|'loc': \('body'|\bRequestValidationError\b"
)
# Error text longer than this is cut: a server may put a whole traceback in it.
_ERROR_TEXT_LIMIT: Final = 2000
# What create() asks of the client besides the body: the API key as a bearer token.
_POST_OPTIONS: Final[RequestOptions] = {"security": {"bearer_auth": True}}
_CHAT_PATH: Final = "/chat/completions"

_T = TypeVar("_T")


class _Failure:
    """One failed attempt, classified."""

    def __init__(self, exc: Exception, timeout: float, profile: EndpointProfile) -> None:
        import openai

        self.exc = exc
        self.status: int | None = None
        self.retry_after: float | None = None
        self.advice: str | None = None
        if isinstance(exc, openai.APITimeoutError):
            self.transient = profile.retry_timeouts
            self.detail = f"timed out after {timeout:g}s"
            if not self.transient:
                self.advice = (
                    f"not re-sent: a {profile.name} server works on one request at a time and "
                    "keeps generating the answer nobody waits for, so a new attempt would only "
                    "queue behind it; raise timeout=..., lower max_tokens, or pass a profile "
                    "with retry_timeouts=True"
                )
        elif isinstance(exc, openai.APIConnectionError):
            self.transient = True
            self.detail = f"connection error ({exc.__cause__ or exc})"
        elif isinstance(exc, openai.APIStatusError):
            self.status = exc.status_code
            text = _error_text(exc)
            self.transient = exc.status_code in _TRANSIENT_STATUSES or exc.status_code >= 500
            if exc.status_code >= 500 and _VALIDATION.search(text):
                # Servers built on FastAPI/pydantic (llama-cpp-python) report a request they
                # cannot parse as HTTP 500: the same request fails the same way every time.
                self.transient = False
                self.advice = (
                    "the endpoint rejected the request as invalid (a validation error sent as "
                    "HTTP 500), so it is not retried; check the request against what the "
                    f"server accepts (endpoint profile {profile.name!r}: pass profile=... to "
                    "OpenAIChatModel to match the server)"
                )
            self.detail = f"HTTP {exc.status_code}: {text}"
            self.retry_after = _retry_after(exc.response.headers.get("retry-after"))
        else:
            self.transient = False
            self.detail = f"{type(exc).__name__}: {exc}"


class OpenAIChatModel(Closing):
    """A :class:`~stargraph.llm.ChatModel` over any OpenAI-compatible endpoint.

    ``base_url`` and ``api_key`` default to ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``
    (read when the model is built), then to OpenAI's own URL. A custom endpoint needs no key.
    Transient failures (HTTP 408/409/429/5xx, timeouts, connection errors) are retried up to
    ``max_retries`` times, sleeping ``backoff * 2**n`` seconds (capped at ``max_backoff``,
    raised to a server's ``Retry-After``) between attempts. When it gives up, or at once on
    any other failure, it raises :class:`~stargraph.errors.LLMError` naming the model, the
    URL, the status and the number of attempts; the openai exception is ``__cause__``.
    Failures that would repeat are not retried: other 4xx, and a 500 whose body is a
    request-validation error (how FastAPI-based servers answer a body they cannot parse).
    ``sleep`` / ``asleep`` perform the backoff waits (``time.sleep`` / ``asyncio.sleep`` by
    default); tests pass recorders so retries cost no wall time.

    ``profile`` says what the endpoint accepts (see :class:`~stargraph.llm.EndpointProfile`):
    a profile, a name (``"openai"``, ``"vllm"``, ``"llama.cpp"``, ``"ollama"``,
    ``"generic"``), or ``"detect"`` to ask the server's ``GET /models`` once, at the first
    call. By default it follows the URL (OpenAI's host, Ollama's port), else ``generic``.

    Timeouts: ``timeout`` bounds each attempt, so a call can take up to
    ``(max_retries + 1) * timeout`` plus the backoff sleeps. On a local server answering one
    request at a time (``llama.cpp``) a timed-out request is not re-sent, because the server
    is still busy with it: give such a server a ``timeout`` that fits its slowest answer
    (bound it with ``max_tokens``) rather than more retries.

    Close it (or use it as a context manager) to release the HTTP connection pool.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] | None = None,
        default_headers: dict[str, str] | None = None,
        profile: EndpointProfile | str | None = None,
    ) -> None:
        self.model = model
        """Model used when a request does not name one."""
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip(
            "/"
        )
        """The endpoint, ending in ``/v1`` for most servers."""
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout
        """Seconds allowed per attempt."""
        self.max_retries = max_retries
        """Retries after the first attempt; ``max_retries + 1`` attempts in all."""
        self.backoff = backoff
        """First backoff sleep in seconds; it doubles after each failed attempt."""
        self.max_backoff = max_backoff
        """Upper bound of any one sleep, ``Retry-After`` included."""
        self._sleep = sleep
        # asyncio is imported only when needed, for the import-time budget.
        self._asleep = asleep
        self._default_headers = default_headers
        self._client: openai.OpenAI | None = None
        self._client_lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None
        self._detect = profile == "detect"
        self._profile: EndpointProfile | None
        if isinstance(profile, EndpointProfile):
            self._profile = profile
        elif profile is None:
            self._profile = profile_for_url(self.base_url)
        elif self._detect:
            self._profile = None  # asked of the server at the first call
        else:
            self._profile = EndpointProfile.named(profile)

    @property
    def profile(self) -> EndpointProfile:
        """The endpoint profile in use (with ``profile="detect"``: asked of the server now,
        if no call has asked yet)."""
        if self._profile is None:
            return self._detected(self._sync_client())
        return self._profile

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r})"

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the HTTP client, if one was opened."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def warm(self) -> None:
        """Import the ``openai`` package and open the HTTP client now, so that the first call
        costs what any later one does (the import alone takes most of a second).

        ``compile(services={"model": model})`` calls it. A model that has no API key for
        OpenAI's own endpoint only imports the package: its first call says what is missing.
        """
        with contextlib.suppress(LLMError):
            self._sync_client()
        # The async calls share one TLS context; building it is the rest of their set-up.
        self._tls_context()

    # ------------------------------------------------------------------ calls

    def bind_journal(self, journal: Journal) -> JournaledChatModel:
        """This model routed through a task's journal: the executor calls it so that every
        call is recorded (and served, not repeated, on re-execution and in replay)."""
        return JournaledChatModel(self, journal)

    def complete(self, request: ChatRequest) -> ChatResponse:
        """Send ``request`` and return the first choice, retrying transient failures."""
        client, profile = self._session()
        return self._complete_with(client, profile.body(request, self.model), profile)

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        """Like :meth:`complete`, without blocking the event loop.

        An async client is opened per call: an httpx async pool is bound to the event loop
        that created it, and callers (tests, ``asyncio.run`` per invocation) switch loops.
        The TLS context, which costs ~20 ms to build, is made once and shared.
        """
        async with self._asession() as (client, profile):
            body = profile.body(request, self.model)
            return await self._acomplete_with(client, body, profile)

    def complete_streaming(
        self, request: ChatRequest, on_token: Callable[[str], None]
    ) -> ChatResponse:
        """Like :meth:`complete`, but the reply is streamed: ``on_token(text)`` is called with
        each piece of its content as it arrives, and the response returned is the one
        :meth:`complete` would have returned (assembled from the stream).

        A run that streams model tokens calls this through the task's journal, which records
        the request and this response exactly as for :meth:`complete` (``stream`` is a
        transport detail, never part of the request), so a replay, which never streams,
        serves the same record.

        Failures are those of :meth:`complete`, plus :class:`~stargraph.errors.LLMError` for
        a stream the server ends without a ``finish_reason`` (an aborted answer). A transient
        failure is retried only while no token has been delivered yet: after that a new
        attempt would deliver the start of the answer a second time, so the call fails
        instead, saying so (a node retry policy may then run the node again, whose tokens are
        delivered anew, as LangGraph does). On an endpoint that cannot stream the request
        (:attr:`EndpointProfile.stream_tools`), the call is made unstreamed and its whole
        content delivered as one piece.
        """
        client, profile = self._session()
        body = profile.body(request, self.model)
        if not _streamable(body, profile):
            return _deliver_whole(self._complete_with(client, body, profile), on_token)
        _ask_to_stream(body, profile)
        relay = _TokenRelay(on_token)

        def attempt() -> ChatResponse:
            nonlocal relay
            relay = _TokenRelay(on_token)
            chunks = _open_stream(client, body)
            try:
                for chunk in chunks:
                    relay.add(chunk)
            finally:
                chunks.close()
            return relay.response(self._subject())

        return self._retry(attempt, lambda exc: self._stream_failure(exc, profile, relay.delivered))

    async def acomplete_streaming(
        self, request: ChatRequest, on_token: Callable[[str], None]
    ) -> ChatResponse:
        """Async :meth:`complete_streaming` (an async client per call, as :meth:`acomplete`)."""
        async with self._asession() as (client, profile):
            body = profile.body(request, self.model)
            if not _streamable(body, profile):
                response = await self._acomplete_with(client, body, profile)
                return _deliver_whole(response, on_token)
            _ask_to_stream(body, profile)
            relay = _TokenRelay(on_token)

            async def attempt() -> ChatResponse:
                nonlocal relay
                relay = _TokenRelay(on_token)
                chunks = await _aopen_stream(client, body)
                try:
                    async for chunk in chunks:
                        relay.add(chunk)
                finally:
                    await chunks.close()
                return relay.response(self._subject())

            return await self._aretry(
                attempt, lambda exc: self._stream_failure(exc, profile, relay.delivered)
            )

    def stream(self, request: ChatRequest, *, include_usage: bool = True) -> ChatStream:
        """Stream the reply as :class:`ChatDelta` s; the assembled response follows.

        Opening the stream is retried like :meth:`complete`; a failure after the first
        chunk is not (half an answer cannot be un-shown), it raises ``LLMError``, and so does
        a stream the server ends without saying why the model stopped (no
        ``finish_reason``: the server aborted it)::

            with model.stream(request) as stream:
                for delta in stream:
                    print(delta.content, end="")
            response = stream.response

        ``include_usage`` asks for token counts in the stream where the endpoint profile
        says the server can send them.
        """
        client, profile = self._session()
        body = profile.body(request, self.model)
        body["stream"] = True
        if include_usage and profile.stream_usage:
            body["stream_options"] = {"include_usage": True}
        failure_of = self._failure_of(profile)
        chunks = self._retry(lambda: _open_stream(client, body), failure_of)

        def on_error(exc: Exception) -> NoReturn:
            self._give_up([failure_of(exc)])

        return ChatStream(chunks, on_error=on_error, subject=self._subject())

    # ------------------------------------------------------------------ internals
    #
    # One core, two thin shells: what an attempt sends, how a failure is classified and how
    # long to wait before the next one (the profile's body, _Failure, _after_failure) are shared;
    # _retry and _aretry differ only in calling, awaiting and sleeping.

    def _session(self) -> tuple[openai.OpenAI, EndpointProfile]:
        """The shared sync client and the endpoint profile to use with it."""
        client = self._sync_client()
        return client, self._profile or self._detected(client)

    @contextlib.asynccontextmanager
    async def _asession(self) -> AsyncIterator[tuple[openai.AsyncOpenAI, EndpointProfile]]:
        """An async client for this call (see :meth:`acomplete`) and the profile to use."""
        import openai

        http_client = openai.DefaultAsyncHttpxClient(verify=self._tls_context())
        options = self._client_options()
        async with http_client, openai.AsyncOpenAI(http_client=http_client, **options) as client:
            yield client, self._profile or await self._adetected(client)

    def _failure_of(self, profile: EndpointProfile) -> Callable[[Exception], _Failure]:
        return lambda exc: _Failure(exc, self.timeout, profile)

    def _retry(self, attempt: Callable[[], _T], failure_of: Callable[[Exception], _Failure]) -> _T:
        """``attempt()`` until it returns; an openai error is classified by ``failure_of``
        and slept on before the next attempt, or raised (:meth:`_after_failure`)."""
        failures: list[_Failure] = []
        while True:
            try:
                return attempt()
            except Exception as exc:
                if not _is_openai_error(exc):
                    raise
                self._sleep(self._after_failure(failures, failure_of(exc)))

    async def _aretry(
        self, attempt: Callable[[], Awaitable[_T]], failure_of: Callable[[Exception], _Failure]
    ) -> _T:
        """Async :meth:`_retry`: awaits each attempt and sleeps with ``asleep``."""
        import asyncio

        failures: list[_Failure] = []
        while True:
            try:
                return await attempt()
            except Exception as exc:
                if not _is_openai_error(exc):
                    raise
                delay = self._after_failure(failures, failure_of(exc))
                await (self._asleep or asyncio.sleep)(delay)

    def _complete_with(
        self, client: openai.OpenAI, body: dict[str, Any], profile: EndpointProfile
    ) -> ChatResponse:
        post = client.post
        raw = self._retry(
            lambda: post(_CHAT_PATH, body=body, cast_to=bytes, options=_POST_OPTIONS),
            self._failure_of(profile),
        )
        return self._response_of(raw)

    async def _acomplete_with(
        self, client: openai.AsyncOpenAI, body: dict[str, Any], profile: EndpointProfile
    ) -> ChatResponse:
        post = client.post
        raw = await self._aretry(
            lambda: post(_CHAT_PATH, body=body, cast_to=bytes, options=_POST_OPTIONS),
            self._failure_of(profile),
        )
        return self._response_of(raw)

    def _response_of(self, raw: bytes) -> ChatResponse:
        try:
            completion = orjson.loads(raw)
        except orjson.JSONDecodeError:
            completion = None
        if not isinstance(completion, dict):
            text = raw[:_ERROR_TEXT_LIMIT].decode("utf-8", "replace")
            raise LLMError(
                f"{self._subject()} answered a chat completion with something that is not a "
                f"JSON object ({text!r}); check that base_url points at an OpenAI-compatible "
                "endpoint (most end in /v1)"
            )
        return ChatResponse.from_openai(completion)

    def _stream_failure(self, exc: Exception, profile: EndpointProfile, delivered: int) -> _Failure:
        failure = _Failure(exc, self.timeout, profile)
        if delivered and failure.transient:
            # The reader already has the start of the answer; a new attempt would hand it
            # over again (and a model need not even repeat it), so the call fails here.
            failure.transient = False
            plural = "piece" if delivered == 1 else "pieces"
            failure.advice = (
                f"not re-sent: {delivered} {plural} of the answer had already been delivered "
                "to the token stream, which a new attempt would deliver again; give the node "
                "a retry policy to run it again (its tokens are then streamed anew), or do "
                "not stream the run's model tokens"
            )
        return failure

    def _client_options(self) -> dict[str, Any]:
        api_key = self._api_key
        if not api_key:
            if self.base_url == DEFAULT_BASE_URL:
                raise LLMError(
                    f"chat model {self.model!r} at {self.base_url} has no API key: set "
                    "OPENAI_API_KEY or pass api_key=..., or set OPENAI_BASE_URL / base_url=... "
                    "to an endpoint that needs none"
                )
            api_key = _PLACEHOLDER_KEY
        return {
            "api_key": api_key,
            "base_url": self.base_url,
            "timeout": self.timeout,
            "max_retries": 0,
            "default_headers": self._default_headers,
        }

    def _tls_context(self) -> ssl.SSLContext:
        with self._client_lock:
            if self._tls is None:
                import httpx2

                self._tls = httpx2.create_ssl_context()
            return self._tls

    def _sync_client(self) -> openai.OpenAI:
        # Built on first use, not in __init__: replay builds models it never calls, and a
        # missing key should only matter to a run that really talks to the endpoint.
        with self._client_lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(**self._client_options())
            return self._client

    def _detected(self, client: openai.OpenAI) -> EndpointProfile:
        """``profile="detect"``: the profile ``GET /models`` implies, asked once."""
        with self._client_lock:
            if self._profile is not None:
                return self._profile
        try:
            listing = client.with_options(max_retries=0).models.list()
        except Exception as exc:
            return self._detection_failed(exc)
        return self._remember(detect_profile([m.owned_by for m in listing.data], self.base_url))

    async def _adetected(self, client: openai.AsyncOpenAI) -> EndpointProfile:
        """Async :meth:`_detected`."""
        try:
            listing = await client.with_options(max_retries=0).models.list()
        except Exception as exc:
            return self._detection_failed(exc)
        return self._remember(detect_profile([m.owned_by for m in listing.data], self.base_url))

    def _detection_failed(self, exc: Exception) -> EndpointProfile:
        import openai

        if isinstance(exc, openai.APIConnectionError):
            # Not reachable (yet): go by the URL for this call and ask again at the next one;
            # the call itself will report the connection problem.
            return profile_for_url(self.base_url)
        if isinstance(exc, openai.APIStatusError):
            # A server without a /models route is none of the known kinds.
            return self._remember(detect_profile((), self.base_url))
        raise exc

    def _remember(self, profile: EndpointProfile) -> EndpointProfile:
        with self._client_lock:
            if self._profile is None:
                self._profile = profile
            return self._profile

    def _subject(self) -> str:
        return f"chat model {self.model!r} at {self.base_url}"

    def _after_failure(self, failures: list[_Failure], failure: _Failure) -> float:
        """Record ``failure``; return the sleep before the next attempt, or raise."""
        failures.append(failure)
        if not failure.transient or len(failures) > self.max_retries:
            self._give_up(failures)
        delay = min(self.backoff * 2.0 ** (len(failures) - 1), self.max_backoff)
        if failure.retry_after is not None:
            delay = min(max(delay, failure.retry_after), self.max_backoff)
        return delay

    def _give_up(self, failures: list[_Failure]) -> NoReturn:
        last = failures[-1]
        attempts = len(failures)
        plural = "attempt" if attempts == 1 else "attempts"
        if last.advice is not None:
            advice = last.advice
        elif last.transient:
            advice = (
                "transient errors (429, 5xx, timeouts, connection errors) are retried with "
                "backoff; check that the endpoint is up, or raise max_retries / timeout"
            )
        else:
            advice = "this error is not retried; check the model name, API key and request"
        raise LLMError(
            f"{self._subject()} failed after {attempts} {plural}: {last.detail}; {advice}"
        ) from last.exc


class StreamAssembler:
    """Folds :class:`ChatDelta` s into the :class:`ChatResponse` a non-streaming call returns."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish_reason: str | None = None
        self._usage = Usage()

    def add(self, delta: ChatDelta) -> None:
        """Take one delta into account."""
        self._content.append(delta.content)
        self._refusal.append(delta.refusal)
        for fragment in delta.tool_calls:
            call = self._calls.setdefault(fragment.index, {"id": "", "name": "", "args": []})
            call["id"] = fragment.id or call["id"]
            call["name"] = fragment.name or call["name"]
            call["args"].append(fragment.arguments)
        if delta.finish_reason is not None:
            self._finish_reason = delta.finish_reason
        if delta.usage is not None:
            self._usage = delta.usage

    @property
    def finished(self) -> bool:
        """Whether a ``finish_reason`` arrived: the model's answer is complete."""
        return self._finish_reason is not None

    def response(self, *, model: str = "", id: str = "") -> ChatResponse:
        """The response assembled so far."""
        content = "".join(self._content)
        refusal = "".join(self._refusal)
        calls = tuple(
            ToolCall(id=call["id"], name=call["name"], arguments="".join(call["args"]))
            for _, call in sorted(self._calls.items())
        )
        # Non-streaming replies carry content=None when the model only called tools; keep
        # the two paths equal.
        message = ChatMessage.assistant(content or None, calls)
        return ChatResponse(
            message=message,
            finish_reason=self._finish_reason,
            usage=self._usage,
            model=model,
            id=id,
            refusal=refusal or None,
        )


class ChatStream(Closing):
    """An open streamed completion: iterate it for deltas, then read :attr:`response`.

    It is its own iterator: leaving the ``for`` loop early and reading :attr:`response`
    drains the rest of the stream and returns the whole answer. A stream the server ends
    without a ``finish_reason`` (it aborted the answer) raises
    :class:`~stargraph.errors.LLMError` instead of passing for a complete, shorter answer.
    """

    def __init__(
        self,
        chunks: Stream[dict[str, Any]],
        on_error: Callable[[Exception], NoReturn],
        *,
        subject: str = "chat model",
    ) -> None:
        self._chunks = chunks
        self._on_error = on_error
        self._subject = subject
        self._iterator: Iterator[dict[str, Any]] | None = None
        self._assembler = StreamAssembler()
        self._model = ""
        self._id = ""
        self._done = False
        self._closed = False

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> ChatDelta:
        if self._done:
            raise StopIteration
        if self._closed:
            raise LLMError(
                f"the stream of {self._subject} was closed before it ended, so the rest of the "
                "answer is lost; read .response (or finish the loop) before closing the stream "
                "or leaving its with block"
            )
        if self._iterator is None:
            self._iterator = iter(self._chunks)
        try:
            chunk = next(self._iterator)
        except StopIteration:
            self._finish()
            raise
        except Exception as exc:
            self.close()
            if not _is_openai_error(exc):
                raise
            self._on_error(exc)
        self._model = chunk.get("model") or self._model
        self._id = chunk.get("id") or self._id
        delta = delta_from_chunk(chunk)
        self._assembler.add(delta)
        return delta

    def _finish(self) -> None:
        self._done = True
        self._chunks.close()
        if not self._assembler.finished:
            raise _aborted(self._subject)

    @property
    def response(self) -> ChatResponse:
        """The assembled response; reading it first drains whatever is left of the stream."""
        for _ in self:
            pass
        return self._assembler.response(model=self._model, id=self._id)

    def close(self) -> None:
        """Close the HTTP response early (idempotent)."""
        if not self._done:
            self._closed = True
        self._chunks.close()


class _TokenRelay:
    """One attempt at a streamed call: folds its chunks into the response and hands each
    piece of content to ``on_token`` as it arrives."""

    def __init__(self, on_token: Callable[[str], None]) -> None:
        self._on_token = on_token
        self._assembler = StreamAssembler()
        self._model = ""
        self._id = ""
        self.delivered = 0
        """Pieces of content handed to ``on_token`` so far."""

    def add(self, chunk: dict[str, Any]) -> None:
        self._model = chunk.get("model") or self._model
        self._id = chunk.get("id") or self._id
        delta = delta_from_chunk(chunk)
        self._assembler.add(delta)
        if delta.content:
            self.delivered += 1
            self._on_token(delta.content)

    def response(self, subject: str) -> ChatResponse:
        """The assembled response; :class:`LLMError` if the server aborted the answer."""
        if not self._assembler.finished:
            raise _aborted(subject)
        return self._assembler.response(model=self._model, id=self._id)


def _aborted(subject: str) -> LLMError:
    return LLMError(
        f"the stream of {subject} ended before the model finished (no finish_reason and no "
        "[DONE]): the server aborted the answer, and what arrived is not the whole reply; see "
        "the server's log (llama.cpp, for one, cannot stream a reply while tools are offered "
        "with tool_choice='auto'), or call complete() instead"
    )


def _streamable(body: dict[str, Any], profile: EndpointProfile) -> bool:
    """Whether the endpoint can stream the request ``body``."""
    if profile.stream_tools:
        return True
    return not (body.get("tools") and body.get("tool_choice") == "auto")


def _ask_to_stream(body: dict[str, Any], profile: EndpointProfile) -> None:
    body["stream"] = True
    if profile.stream_usage:
        # So that the streamed response carries the usage a non-streamed one would.
        body["stream_options"] = {"include_usage": True}


def _open_stream(client: openai.OpenAI, body: dict[str, Any]) -> Stream[dict[str, Any]]:
    """Post ``body`` (which asks to stream) and return its server-sent events, each chunk as
    the JSON object it arrived as."""
    from openai import Stream

    return client.post(
        _CHAT_PATH,
        body=body,
        cast_to=object,
        options=_POST_OPTIONS,
        stream=True,
        stream_cls=Stream[dict[str, Any]],
    )


async def _aopen_stream(
    client: openai.AsyncOpenAI, body: dict[str, Any]
) -> AsyncStream[dict[str, Any]]:
    """Async :func:`_open_stream`."""
    from openai import AsyncStream

    return await client.post(
        _CHAT_PATH,
        body=body,
        cast_to=object,
        options=_POST_OPTIONS,
        stream=True,
        stream_cls=AsyncStream[dict[str, Any]],
    )


def _deliver_whole(response: ChatResponse, on_token: Callable[[str], None]) -> ChatResponse:
    if response.message.content:
        on_token(response.message.content)
    return response


def delta_from_chunk(chunk: dict[str, Any]) -> ChatDelta:
    """Convert one ``chat.completion.chunk`` JSON object into a :class:`ChatDelta`."""
    usage = chunk.get("usage")
    choices = chunk.get("choices") or [{}]
    choice = choices[0]
    wire = choice.get("delta") or {}
    fragments = tuple(
        ToolCallDelta(
            index=fragment.get("index", 0),
            id=fragment.get("id"),
            name=(fragment.get("function") or {}).get("name"),
            arguments=(fragment.get("function") or {}).get("arguments") or "",
        )
        for fragment in wire.get("tool_calls") or ()
    )
    return ChatDelta(
        content=wire.get("content") or "",
        refusal=wire.get("refusal") or "",
        tool_calls=fragments,
        finish_reason=choice.get("finish_reason"),
        usage=Usage.from_openai(usage) if usage else None,
    )


def _is_openai_error(exc: BaseException) -> bool:
    # openai is already imported whenever a call could have raised one of its errors.
    import openai

    return isinstance(exc, openai.OpenAIError)


def _error_text(exc: openai.APIStatusError) -> str:
    """The server's own words about the error, whatever shape its body has."""
    text = _body_text(exc.body)
    if text is None:
        try:
            raw = exc.response.text
        except Exception:  # a streamed body that was never read; the message must do
            raw = ""
        text = raw.strip() or exc.message
    if len(text) > _ERROR_TEXT_LIMIT:
        text = text[:_ERROR_TEXT_LIMIT] + f"... ({len(text)} characters in all)"
    return text


def _body_text(body: object) -> str | None:
    # OpenAI: {"error": {"message": ...}}; some servers {"error": "..."}; FastAPI (used by
    # llama-cpp-python, vLLM's auth) {"detail": "..."} or {"detail": [{"loc", "msg"}, ...]};
    # others {"message": "..."}.
    if isinstance(body, str):
        return body or None
    if not isinstance(body, dict):
        return None
    for key in ("error", "detail", "message"):
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, dict):
            inner = _body_text(value)
            if inner is not None:
                return inner
        if isinstance(value, list) and value:
            return "; ".join(_problem_text(item) for item in value)
    return None


def _problem_text(item: object) -> str:
    if isinstance(item, dict) and "msg" in item:
        where = ".".join(str(part) for part in item.get("loc") or ())
        return f"{where}: {item['msg']}" if where else str(item["msg"])
    return str(item)


def _retry_after(value: str | None) -> float | None:
    # Only the delta-seconds form; an HTTP-date would need the clock, which we keep out of
    # the retry decision so it stays deterministic.
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None
