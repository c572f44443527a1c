"""LangChain interop for models: a LangChain chat model as a stargraph model service, and the
``messages`` stream mode's chunks as LangChain message chunks.

Install the extra (``pip install 'stargraph[langchain]'``); nothing in the core imports
``langchain_core``, and this module reads the objects it is handed without importing it
until a chunk has to be built.

* :class:`LangChainChatModel` wraps any ``BaseChatModel`` (``ChatOpenAI``, ``ChatAnthropic``,
  LangChain's fakes) in the :class:`~stargraph.llm.ChatModel` protocol. Its calls go through
  the task's journal exactly as :class:`~stargraph.llm.OpenAIChatModel`'s do, so a run over
  it resumes without a second call and replays offline with the model removed.
* :func:`to_langchain_chunk` turns a :class:`~stargraph.runtime.MessageChunk` into the
  ``(AIMessageChunk, metadata)`` pair LangGraph's ``stream_mode="messages"`` yields.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from stargraph.errors import LLMError, StargraphError, UsageError
from stargraph.llm._history import Message, _langchain_fields, _text
from stargraph.llm._messages import ChatMessage, ChatRequest, ChatResponse, ToolCall, Usage
from stargraph.llm._recorded import Journal, JournaledChatModel

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessageChunk, BaseMessage

    from stargraph.runtime import MessageChunk

__all__ = ["LangChainChatModel", "to_langchain_chunk"]

# Providers that do not say "finish_reason" say why they stopped in their own words.
_STOP_REASONS: Final = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}
# Ids LangChain makes up per call (a fresh uuid each time) rather than the provider's.
_RUN_ID_PREFIXES: Final = ("run-", "lc_run-")


class LangChainChatModel:
    """A LangChain chat model as a :class:`~stargraph.llm.ChatModel`.

    Each :class:`~stargraph.llm.ChatRequest` becomes a LangChain call: its messages as
    LangChain messages, its tools bound with ``chat_model.bind_tools(request.tools,
    tool_choice=...)`` (OpenAI-style tool dicts, which every LangChain provider accepts), and
    ``temperature``, ``max_tokens``, ``seed``, ``response_format`` (in OpenAI's form) and ``extra``
    passed as call keywords when set: the provider's own keywords, so a request should set
    only those its provider takes. The
    reply's ``AIMessage`` becomes a :class:`~stargraph.llm.ChatResponse` with its tool calls,
    ``finish_reason`` and token usage (``usage_metadata``).

    ``bind_tools=False`` offers no tools to the model (for LangChain's fake models, which
    cannot bind them but answer with scripted tool calls anyway); a model that cannot bind
    tools while a request offers some raises :class:`~stargraph.errors.LLMError` instead of
    silently sending the request without them. Failures of the LangChain model (after its
    own retries) are raised as :class:`~stargraph.errors.LLMError`, the original as
    ``__cause__``.

    Streaming (stream mode ``messages``) uses the model's ``stream``/``astream``; the
    recorded response is the assembled one either way, so a streamed run replays exactly
    like an unstreamed one.
    """

    def __init__(self, chat_model: BaseChatModel, *, bind_tools: bool = True) -> None:
        self.chat_model = chat_model
        """The wrapped LangChain model."""
        self.bind_tools = bind_tools
        """Whether a request's tools are bound to the model."""
        self.model = str(
            getattr(chat_model, "model_name", None)
            or getattr(chat_model, "model", None)
            or type(chat_model).__name__
        )
        """Reported as :attr:`ChatResponse.model` when the reply does not name one."""
        # The last binding made: an agent offers the same tools (the same tuple) every call,
        # and binding converts every tool schema again.
        self._bound: tuple[Any, Any] | None = None

    def __repr__(self) -> str:
        return f"LangChainChatModel({self.chat_model!r})"

    def bind_journal(self, journal: Journal) -> JournaledChatModel:
        """This model routed through a task's journal: the executor calls it so that every
        call is recorded (and served, not repeated, on re-execution and in replay)."""
        return JournaledChatModel(self, journal)

    def complete(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request`` with the LangChain model's ``invoke``."""
        runnable, messages, options = self._call(request)
        try:
            reply = runnable.invoke(messages, **options)
        except StargraphError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._response(reply)

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request`` with the LangChain model's ``ainvoke``."""
        runnable, messages, options = self._call(request)
        try:
            reply = await runnable.ainvoke(messages, **options)
        except StargraphError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._response(reply)

    def complete_streaming(
        self, request: ChatRequest, on_token: Callable[[str], None]
    ) -> ChatResponse:
        """Like :meth:`complete`, over the model's ``stream``: ``on_token(text)`` gets each
        chunk's text as it arrives; the chunks, summed, are the response."""
        runnable, messages, options = self._call(request)
        assembled: Any = None
        try:
            for chunk in runnable.stream(messages, **options):
                assembled = chunk if assembled is None else assembled + chunk
                text = _text(chunk.content)
                if text:
                    on_token(text)
        except StargraphError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._response(self._whole(assembled))

    async def acomplete_streaming(
        self, request: ChatRequest, on_token: Callable[[str], None]
    ) -> ChatResponse:
        """Async :meth:`complete_streaming`, over the model's ``astream``."""
        runnable, messages, options = self._call(request)
        assembled: Any = None
        try:
            async for chunk in runnable.astream(messages, **options):
                assembled = chunk if assembled is None else assembled + chunk
                text = _text(chunk.content)
                if text:
                    on_token(text)
        except StargraphError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        return self._response(self._whole(assembled))

    # ------------------------------------------------------------------ internals

    def _call(self, request: ChatRequest) -> tuple[Any, list[BaseMessage], dict[str, Any]]:
        """The runnable to call (the model, or the model with the request's tools bound),
        the messages, and the call keywords."""
        messages = [Message.from_chat(m).to_langchain() for m in request.messages]
        options: dict[str, Any] = dict(request.extra)
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if request.max_tokens is not None:
            options["max_tokens"] = request.max_tokens
        if request.seed is not None:
            options["seed"] = request.seed
        if request.response_format is not None:
            options["response_format"] = request.response_format.to_openai()
        return self._runnable(request), messages, options

    def _runnable(self, request: ChatRequest) -> Any:
        if not request.tools or not self.bind_tools:
            return self.chat_model
        key = (request.tools, request.tool_choice, request.parallel_tool_calls)
        bound = self._bound
        if bound is not None and bound[0] == key:
            return bound[1]
        keywords: dict[str, Any] = {}
        if request.tool_choice is not None:
            keywords["tool_choice"] = request.tool_choice
        if request.parallel_tool_calls is not None:
            keywords["parallel_tool_calls"] = request.parallel_tool_calls
        try:
            runnable = self.chat_model.bind_tools(list(request.tools), **keywords)
        except NotImplementedError:
            raise LLMError(
                f"{self!r} cannot bind tools ({type(self.chat_model).__name__}.bind_tools is "
                f"not implemented) but the request offers {len(request.tools)}; use a chat "
                "model that supports tool calling, or pass LangChainChatModel(..., "
                "bind_tools=False) for a model scripted to call tools without them"
            ) from None
        self._bound = (key, runnable)
        return runnable

    def _failed(self, exc: Exception) -> LLMError:
        return LLMError(
            f"LangChain chat model {self.model!r} failed: {type(exc).__name__}: {exc} "
            "(fix: check the model's credentials and endpoint; its own max_retries governs "
            "retries)"
        )

    def _whole(self, assembled: Any) -> Any:
        if assembled is None:
            raise LLMError(
                f"LangChain chat model {self.model!r} streamed no chunk at all; check the "
                "model, or call it unstreamed"
            )
        from langchain_core.messages import message_chunk_to_message

        # A summed chunk has its tool calls parsed but is typed as a chunk ("AIMessageChunk").
        return message_chunk_to_message(assembled)

    def _response(self, reply: Any) -> ChatResponse:
        fields = _langchain_fields(reply)
        if fields["role"] != "assistant":
            raise LLMError(
                f"LangChain chat model {self.model!r} answered with a {type(reply).__name__}, "
                "not an AIMessage; a chat model must reply as the assistant"
            )
        extra: dict[str, Any] = dict(getattr(reply, "additional_kwargs", None) or {})
        calls = _raw_calls(extra.get("tool_calls"), len(fields["tool_calls"]))
        refusal = extra.get("refusal")
        message = ChatMessage(
            role="assistant",
            # LangChain cannot say "no content" but with an empty string.
            content=fields["content"] or None,
            tool_calls=fields["tool_calls"] if calls is None else calls,
        )
        metadata: dict[str, Any] = dict(getattr(reply, "response_metadata", None) or {})
        finish = metadata.get("finish_reason")
        if not isinstance(finish, str):
            stop = metadata.get("stop_reason")
            finish = _STOP_REASONS.get(stop, stop) if isinstance(stop, str) else None
        if finish is None:
            finish = "tool_calls" if message.tool_calls else "stop"
        tokens = getattr(reply, "usage_metadata", None) or {}
        usage = Usage(
            prompt_tokens=int(tokens.get("input_tokens", 0)),
            completion_tokens=int(tokens.get("output_tokens", 0)),
            total_tokens=int(tokens.get("total_tokens", 0)),
        )
        ident = getattr(reply, "id", None) or ""
        if ident.startswith(_RUN_ID_PREFIXES):
            ident = ""
        named = metadata.get("model_name") or metadata.get("model")
        return ChatResponse(
            message=message,
            finish_reason=finish,
            usage=usage,
            model=named if isinstance(named, str) and named else self.model,
            id=ident,
            refusal=refusal if isinstance(refusal, str) and refusal else None,
        )


def _raw_calls(raw: Any, parsed: int) -> tuple[ToolCall, ...] | None:
    """The reply's tool calls as the provider sent them (OpenAI-style providers keep them in
    ``additional_kwargs["tool_calls"]``): in the model's order and with the argument text
    as written, which LangChain's parsed ``tool_calls`` lose (it lists the malformed ones
    apart, and re-encodes the rest). ``None`` when they are absent or do not match."""
    if not isinstance(raw, list) or len(raw) != parsed:
        return None
    calls = []
    for call in raw:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return None
        arguments = function.get("arguments")
        calls.append(
            ToolCall(
                id=str(call.get("id") or ""),
                name=function["name"],
                arguments=arguments if isinstance(arguments, str) else "",
            )
        )
    return tuple(calls)


def to_langchain_chunk(chunk: MessageChunk) -> tuple[AIMessageChunk, dict[str, Any]]:
    """A ``messages``-mode item as LangGraph's ``stream_mode="messages"`` yields it: an
    ``AIMessageChunk`` of the piece's text and a metadata dict naming the node
    (``langgraph_node``) and the step (``langgraph_step``).

    Every piece of one task's model output gets the same chunk id, made from the run, the
    step, the node's path and the task index (the same in a re-run), so pieces can be
    grouped as LangChain users group them by ``chunk.id``. Needs ``langchain_core``.
    """
    if not isinstance(getattr(chunk, "text", None), str) or not hasattr(chunk, "node"):
        raise UsageError(
            f"to_langchain_chunk takes a MessageChunk, the item of stream(..., "
            f'mode="messages"), not {type(chunk).__name__} {chunk!r:.60}; with several modes, '
            'pass the item of each (mode, item) pair whose mode is "messages"'
        )
    try:
        from langchain_core.messages import AIMessageChunk
    except ImportError as exc:
        raise LLMError(
            "to_langchain_chunk needs langchain_core, which is not installed; "
            "pip install 'stargraph[langchain]'"
        ) from exc
    where = "/".join((*chunk.path, chunk.node))
    made = AIMessageChunk(
        content=chunk.text, id=f"{chunk.run_id}:{chunk.step}:{where}:{chunk.index}"
    )
    metadata: dict[str, Any] = {
        "langgraph_node": chunk.node,
        "langgraph_step": chunk.step,
        "langgraph_path": (*chunk.path, chunk.node),
        "run_id": chunk.run_id,
    }
    return made, metadata
