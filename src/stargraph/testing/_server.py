"""``ScriptedOpenAIServer``: an OpenAI-compatible HTTP server on 127.0.0.1 that answers from a
script, so tests and demos drive the real ``openai`` client over real HTTP.

Standard library only (``http.server``): it must run anywhere the tests run. Each request is
served on its own thread with HTTP/1.0 semantics (one request per connection): closing the
server then never waits on an idle keep-alive connection, and SSE streams end by closing the
connection, as the ``openai`` client expects from a plain HTTP/1.0 peer.

Everything the client could compare is deterministic: completion ids ``chatcmpl-0001``...,
call ids ``call_0001``... (numbered per server), a fixed ``created`` timestamp and a word-count
``usage``. Two servers given the same script answer byte for byte the same.

``behaves_like="llama.cpp"`` makes it answer as llama-cpp-python's server does (measured
against version 0.3.36, which the real-model tests run), so client code can be tested
against those behaviours without the real server:

* a message with ``"content": null`` is refused with HTTP 500 and a request-validation error
  (an assistant message without ``content`` with HTTP 500 too: the chat template needs it);
* tools offered without ``tool_choice`` (or with ``"none"``) are not offered at all: a
  scripted tool-call reply comes back as its text only;
* ``tool_choice="required"`` fails with an empty HTTP 500; a ``response_format`` other than
  ``text`` / ``json_object`` with a validation-error HTTP 500;
* a streamed request offering tools with ``tool_choice="auto"`` is aborted after the
  headers (no chunk, no ``[DONE]``), and streams never carry usage;
* ``GET /v1/models`` says ``owned_by: "me"``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Literal, Self

from stargraph._lifecycle import ServerThread, Started
from stargraph.errors import ServiceNotStartedError
from stargraph.llm import Usage
from stargraph.llm._scripted import word_pieces
from stargraph.testing._replies import RecordedRequest, Reply

__all__ = ["FIXED_CREATED", "ScriptedOpenAIServer"]

FIXED_CREATED: Final = 1_700_000_000
"""The ``created`` timestamp of every response (a fixed instant, for byte-equal replies)."""

Script = Sequence[Reply] | Callable[[RecordedRequest], Reply]
"""A list of replies, answered in order, or a function of each chat-completions request."""

Dialect = Literal["openai", "llama.cpp"]
"""Which server ``ScriptedOpenAIServer`` answers like (see the module docstring)."""

# Streamed argument text is cut into pieces this long, like a model emitting tokens.
_ARGUMENT_PIECE: Final = 8
_ERROR_TYPES: Final = {429: "rate_limit_error", 401: "authentication_error"}


class _HTTPServer(ThreadingHTTPServer):
    # Handler threads are joined on close (not daemons) so no thread outlives the server;
    # delayed replies wait on the server's stop event, so the join is quick.
    daemon_threads = False
    block_on_close = True
    scripted: ScriptedOpenAIServer


class ScriptedOpenAIServer(Started):
    """An OpenAI-compatible server answering ``POST /v1/chat/completions`` from a script.

    Use it as a context manager; :attr:`base_url` (``http://127.0.0.1:<port>/v1``) goes to
    the client. It also serves ``GET /v1/models``. Every request is kept in
    :attr:`requests`::

        with ScriptedOpenAIServer([Reply.error(429), Reply.text("hi")]) as server:
            model = OpenAIChatModel("m", base_url=server.base_url, backoff=0)
            model.complete(request)          # retried once, answers "hi"
            assert len(server.requests) == 2

    Streaming (``"stream": true``) sends SSE chunks: a role chunk, text in word pieces,
    tool-call fragments (id and name first, then the arguments in pieces), a finish chunk,
    a usage chunk when ``stream_options.include_usage`` is set, then ``data: [DONE]``.
    ``Reply.aborted`` / ``Reply.stalled`` cut a stream short (closed, or silent until the
    server closes). A request past the end of a list script gets HTTP 400 naming the problem
    (400 so that clients do not retry it). ``behaves_like="llama.cpp"`` reproduces
    llama-cpp-python's server (module docstring); a request it refuses consumes no reply of
    the script.
    """

    def __init__(
        self,
        script: Script = (),
        *,
        models: Sequence[str] = ("scripted-model",),
        created: int = FIXED_CREATED,
        behaves_like: Dialect = "openai",
    ) -> None:
        self.requests: list[RecordedRequest] = []
        """Every request received, in arrival order (chat completions and others)."""
        self.models = tuple(models)
        """Model ids listed by ``GET /v1/models``."""
        self.created = created
        """The ``created`` timestamp sent in every completion."""
        self.behaves_like: Dialect = behaves_like
        """The server it answers like: ``openai`` or ``llama.cpp``."""
        self._function: Callable[[RecordedRequest], Reply] | None = None
        self._replies: list[Reply] = []
        self._chat_count = 0
        self._script_start = 0  # chat requests answered before the current script was set
        self._completion_count = 0
        self._call_count = 0
        self._lock = threading.Lock()
        self.set_script(script)
        self._stop = threading.Event()
        self._serving: ServerThread | None = None

    # ------------------------------------------------------------------ script

    def set_script(self, script: Script) -> None:
        """Replace the script; the next chat request gets its first reply.

        A list script is indexed from the request that follows this call, not by how many
        requests the server answered before: a test that runs twice on one server gives
        each run its own script from the top.
        """
        with self._lock:
            if callable(script):
                self._function, self._replies = script, []
            else:
                self._function, self._replies = None, list(script)
            self._script_start = self._chat_count

    def enqueue(self, *replies: Reply) -> None:
        """Append replies to a list script."""
        self._replies.extend(replies)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """The chat-completions requests only."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``; only valid while the server runs."""
        if self._serving is None:
            raise ServiceNotStartedError(
                "ScriptedOpenAIServer is not started; use it in a with block (or call start())"
            )
        return f"http://127.0.0.1:{self._serving.port}/v1"

    def start(self) -> Self:
        """Bind an ephemeral port on 127.0.0.1 and serve in a background thread."""
        if self._serving is not None:
            return self
        self._stop.clear()
        httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.scripted = self
        self._serving = ServerThread(httpd, name="scripted-openai-server")
        return self

    def close(self) -> None:
        """Stop serving, wake delayed replies, close the socket and join every thread."""
        if self._serving is None:
            return
        self._stop.set()
        self._serving.stop()
        self._serving = None

    # ------------------------------------------------------------------ answering

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self._chat_count += 1
            number = self._chat_count - self._script_start  # 1-based, within this script
            function = self._function
            if function is None:
                if number > len(self._replies):
                    return Reply.error(
                        400,
                        f"ScriptedOpenAIServer has no reply for chat request #{number}: "
                        f"its script holds {len(self._replies)} replies; enqueue more",
                    )
                return self._replies[number - 1]
        try:
            return function(request)
        except Exception as exc:
            return Reply.error(400, f"ScriptedOpenAIServer script function raised {exc!r}")

    def _numbered(self, reply: Reply) -> tuple[str, list[str]]:
        """Allocate the completion id and the ids of calls without one, under the lock."""
        with self._lock:
            self._completion_count += 1
            completion_id = f"chatcmpl-{self._completion_count:04d}"
            call_ids: list[str] = []
            for call in reply.calls:
                if call.id is None:
                    self._call_count += 1
                    call_ids.append(f"call_{self._call_count:04d}")
                else:
                    call_ids.append(call.id)
        return completion_id, call_ids

    def completion(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        """The ``chat.completion`` object answering ``body`` with ``reply``."""
        completion_id, call_ids = self._numbered(reply)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.content,
            "refusal": reply.refusal_text,
        }
        if reply.calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call_id, call in zip(call_ids, reply.calls, strict=True)
            ]
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": self.created,
            "model": reply.model or body.get("model") or "",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": _finish_reason(reply),
                }
            ],
            "usage": _usage(reply, body).model_dump(),
        }

    def chunks(self, reply: Reply, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The ``chat.completion.chunk`` objects streaming ``reply``."""
        completion_id, call_ids = self._numbered(reply)
        options = body.get("stream_options") or {}
        # llama.cpp ignores stream_options: its streams never carry usage.
        include_usage = bool(options.get("include_usage")) and self.behaves_like == "openai"
        head: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": reply.model or body.get("model") or "",
        }
        if include_usage:
            # OpenAI sends "usage": null on every chunk but the last when usage is asked for.
            head["usage"] = None

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return {**head, "choices": [choice]}

        yield chunk({"role": "assistant", "content": "" if reply.content is not None else None})
        for piece in word_pieces(reply.content):
            yield chunk({"content": piece})
        for piece in word_pieces(reply.refusal_text):
            yield chunk({"refusal": piece})
        for index, (call_id, call) in enumerate(zip(call_ids, reply.calls, strict=True)):
            first = {"index": index, "id": call_id, "type": "function"}
            yield chunk(
                {"tool_calls": [{**first, "function": {"name": call.name, "arguments": ""}}]}
            )
            for start in range(0, len(call.arguments), _ARGUMENT_PIECE):
                piece = call.arguments[start : start + _ARGUMENT_PIECE]
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, _finish_reason(reply))
        if include_usage:
            yield {**head, "choices": [], "usage": _usage(reply, body).model_dump()}

    def models_list(self) -> dict[str, Any]:
        """The ``GET /v1/models`` answer."""
        owner = "me" if self.behaves_like == "llama.cpp" else "stargraph"
        return {
            "object": "list",
            "data": [
                {"id": model, "object": "model", "created": self.created, "owned_by": owner}
                for model in self.models
            ],
        }

    def _wait(self, seconds: float) -> None:
        # An Event, not time.sleep: close() wakes every delayed reply at once.
        self._stop.wait(seconds)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    # Bounds a handler thread whose client connected but never sent a request.
    timeout = 10

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``.requests``, not stderr."""

    def do_GET(self) -> None:
        """``GET /v1/models``."""
        scripted = self.server.scripted
        scripted.requests.append(self._record(None))
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, scripted.models_list())
        else:
            self._send_error(404, f"no route for GET {self.path}")

    def do_POST(self) -> None:
        """``POST /v1/chat/completions``."""
        scripted = self.server.scripted
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        record = self._record(body if isinstance(body, dict) else None)
        scripted.requests.append(record)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send_error(404, f"no route for POST {self.path}")
            return
        if not isinstance(body, dict):
            self._send_error(400, "request body is not a JSON object")
            return
        llama = scripted.behaves_like == "llama.cpp"
        if llama:
            refusal = _llama_cpp_refusal(body)
            if refusal is not None:
                self._send_json(500, {"error": _error_object(500, refusal)})
                return
            if body.get("stream") and body.get("tools") and body.get("tool_choice") == "auto":
                # "Automatic streaming tool choice is not supported": the handler raises
                # after the response has started, so the stream just ends.
                self._send_stream(iter(()), {}, abort_after=0)
                return
        reply = scripted._next_reply(record)
        if llama:
            reply = _llama_cpp_view(reply, body)
        if reply.delay:
            scripted._wait(reply.delay)
        if reply.status != 200:
            if reply.error_body is not None:
                self._send_json(reply.status, reply.error_body, reply.headers)
            else:
                self._send_error(reply.status, reply.error_message, reply.headers)
        elif body.get("stream"):
            chunks = scripted.chunks(reply, body)
            self._send_stream(
                chunks,
                reply.headers,
                abort_after=reply.abort_after,
                stall_after=reply.stall_after,
            )
        elif reply.abort_after is not None:
            # The connection closes without an answer (a server killed mid-call).
            return
        else:
            self._send_json(200, scripted.completion(reply, body), reply.headers)

    # ------------------------------------------------------------------ helpers

    def _record(self, body: dict[str, Any] | None) -> RecordedRequest:
        headers = {name.lower(): value for name, value in self.headers.items()}
        return RecordedRequest(method=self.command, path=self.path, headers=headers, body=body)

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (a scripted delay made it time out); nobody is listening.
            pass

    def _send_error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self._send_json(status, {"error": _error_object(status, message)}, headers)

    def _send_stream(
        self,
        chunks: Iterator[dict[str, Any]],
        headers: dict[str, str],
        *,
        abort_after: int | None = None,
        stall_after: int | None = None,
    ) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            for sent, chunk in enumerate(chunks):
                if abort_after is not None and sent >= abort_after:
                    break
                if stall_after is not None and sent >= stall_after:
                    # Silent until close() (which wakes every wait): the client times out.
                    self.wfile.flush()
                    self.server.scripted._stop.wait()
                    return
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if abort_after is None:
                self.wfile.write(b"data: [DONE]\n\n")
            # An aborted stream ends here: the handler returns, the connection closes.
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


def _error_object(status: int, message: str) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"message": message, "type": kind, "param": None, "code": None}


def _validation_error(loc: tuple[Any, ...], kind: str, msg: str, value: Any) -> str:
    """A request-validation error worded as llama-cpp-python's server words it."""
    problem = {"type": kind, "loc": ("body", *loc), "msg": msg, "input": value}
    return f"1 validation error:\n  {problem!r}\n\n    POST /v1/chat/completions"


def _llama_cpp_refusal(body: dict[str, Any]) -> str | None:
    """The error message llama-cpp-python answers ``body`` with, if it refuses it."""
    for index, message in enumerate(body.get("messages") or ()):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        if "content" not in message:
            # The chat template reads message.content, which must exist.
            return "'dict object' has no attribute 'content'"
        if message["content"] is None:
            return _validation_error(
                ("messages", index, "ChatCompletionRequestAssistantMessage", "content"),
                "string_type",
                "Input should be a valid string",
                None,
            )
    if body.get("tools") and body.get("tool_choice") == "required":
        # The function-calling chat handler asserts tool_choice == "auto": an empty message.
        return ""
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") not in (
        "text",
        "json_object",
    ):
        return _validation_error(
            ("response_format", "type"),
            "literal_error",
            "Input should be 'text' or 'json_object'",
            response_format.get("type"),
        )
    return None


def _llama_cpp_view(reply: Reply, body: dict[str, Any]) -> Reply:
    """``reply`` as llama-cpp-python would send it for ``body``: tools offered without
    ``tool_choice`` (or with ``"none"``) never reach the model, so it cannot call them."""
    choice = body.get("tool_choice")
    if reply.calls and (choice is None or choice == "none"):
        return reply.model_copy(
            update={"calls": (), "content": reply.content or "", "finish_reason": "stop"}
        )
    return reply


def _finish_reason(reply: Reply) -> str:
    if reply.finish_reason is not None:
        return reply.finish_reason
    return "tool_calls" if reply.calls else "stop"


def _words(text: str | None) -> int:
    return len(text.split()) if text else 0


def _usage(reply: Reply, body: dict[str, Any]) -> Usage:
    """The reply's usage, or a deterministic stand-in: words in, words (and args) out."""
    if reply.usage is not None:
        return reply.usage
    prompt = 0
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        prompt += _words(content) if isinstance(content, str) else 0
    completion = _words(reply.content) + _words(reply.refusal_text)
    completion += sum(_words(call.arguments) + 1 for call in reply.calls)
    return Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )
