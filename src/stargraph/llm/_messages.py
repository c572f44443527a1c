"""Frozen chat data: what a ``ChatModel`` is asked and what it answers.

The shapes follow the OpenAI chat-completions wire format closely (``role``, ``tool_calls``,
``tool_call_id``) so that converting to and from the wire is a field-for-field copy, and so a
recorded request can be replayed against any OpenAI-compatible endpoint. They are pydantic
models with ``frozen=True``: runs are checkpointed and replayed, so a message must not change
after it has been recorded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal, Self

import rfc8785
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stargraph._unchecked import unchecked
from stargraph.errors import ChatDataError, Problem

__all__ = [
    "ChatDelta",
    "ChatMessage",
    "ChatRequest",
    "ChatResponse",
    "RequestOptions",
    "ResponseFormat",
    "Role",
    "ToolCall",
    "ToolCallDelta",
    "Usage",
]

Role = Literal["system", "user", "assistant", "tool"]
"""Who speaks a :class:`ChatMessage`."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")
# ResponseFormat has a field called ``type``, which hides the builtin inside its body.
_ModelClass = type[BaseModel]


def _hint(error: Any) -> str:
    kind = error["type"]
    if kind == "missing":
        return "add it"
    if kind == "extra_forbidden":
        return "remove it or check its spelling"
    if kind == "frozen_instance":
        return "chat data is frozen: make a changed copy with model_copy(update={...})"
    if kind == "literal_error":
        return f"use one of {error.get('ctx', {}).get('expected', 'the allowed values')}"
    return "pass a value of the documented type"


def _data_error(cls: type[BaseModel], exc: ValidationError) -> ChatDataError:
    """Every problem pydantic found, named by field path and the value given."""
    problems: list[Problem] = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        nested = error.get("ctx", {}).get("error")
        if isinstance(nested, ChatDataError):
            # A nested model built from data (its __init__ raised): keep its own problems,
            # under this field's path, instead of one "Value error" quoting them all.
            problems += [
                Problem(".".join(p for p in (where, n.pointer) if p), n.message, n.hint)
                for n in nested.problems
            ]
            continue
        message = f"{error['msg']} (got {error.get('input')!r:.80})"
        problems.append(Problem(where or "<data>", message, _hint(error)))
    return ChatDataError(problems, subject=f"{cls.__name__} data")


class _ChatData(BaseModel):
    """Frozen chat data whose validation errors are :class:`ChatDataError` (never a bare
    pydantic error): built directly, validated from data or JSON, or assigned to."""

    # Schemas are built at the first use, not at import: a process that never talks to a
    # model (replay, most tools) does not pay for them.
    model_config = ConfigDict(**_FROZEN, defer_build=True)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _data_error(type(self), exc) from None

    # Marked as pydantic's own __init__, so that validating a parent (a request's messages
    # given as dicts) builds the nested models in pydantic-core instead of calling this
    # method once per message (three times slower); their errors reach the parent's wrapper
    # with their full path.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    def __setattr__(self, name: str, value: Any) -> None:
        # Frozen: pydantic refuses with its own ValidationError; keep the one error tree.
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise _data_error(type(self), exc) from None

    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> Self:
        """Validate ``obj``; :class:`~stargraph.errors.ChatDataError` naming every bad
        field."""
        try:
            return super().model_validate(obj, **options)
        except ValidationError as exc:
            raise _data_error(cls, exc) from None

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **options: Any) -> Self:
        """Validate JSON text; :class:`~stargraph.errors.ChatDataError` naming every bad
        field."""
        try:
            return super().model_validate_json(json_data, **options)
        except ValidationError as exc:
            raise _data_error(cls, exc) from None


class ToolCall(_ChatData):
    """One function call the model asked for, exactly as it sent it.

    ``arguments`` stays the raw JSON *string* the model produced: models do send malformed
    JSON, and the raw text is what must be recorded, replayed and shown back to the model.
    :func:`stargraph.llm.normalize_tool_calls` parses it.
    """

    model_config = _FROZEN

    id: str
    """The call id; the tool's answer must carry it back as ``tool_call_id``."""
    name: str
    """The function name the model chose (not necessarily a tool that exists)."""
    arguments: str = ""
    """Raw JSON text of the arguments, unparsed."""

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI wire form: ``{"id", "type": "function", "function": {...}}``."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class ChatMessage(_ChatData):
    """One message of a conversation.

    Build them with the role constructors, which read better than keyword soup::

        >>> ChatMessage.user("2+2?").to_openai()
        {'role': 'user', 'content': '2+2?'}
        >>> ChatMessage.tool("call_0001", "4", name="calc").to_openai()
        {'role': 'tool', 'content': '4', 'tool_call_id': 'call_0001', 'name': 'calc'}
    """

    model_config = _FROZEN

    role: Role
    """``system``, ``user``, ``assistant`` or ``tool``."""
    content: str | None = None
    """The text; ``None`` for an assistant message that only calls tools."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Calls requested by an assistant message, in the model's order."""
    tool_call_id: str | None = None
    """For a ``tool`` message: the id of the call it answers."""
    name: str | None = None
    """Optional speaker or tool name."""

    @classmethod
    def system(cls, content: str) -> ChatMessage:
        """A system prompt."""
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str) -> ChatMessage:
        """A user turn."""
        return cls(role="user", content=content)

    @classmethod
    def assistant(
        cls, content: str | None = None, tool_calls: tuple[ToolCall, ...] | list[ToolCall] = ()
    ) -> ChatMessage:
        """An assistant turn: text, tool calls, or both."""
        calls = tuple(tool_calls)
        if (
            cls is ChatMessage
            and (content is None or type(content) is str)
            and all(type(call) is ToolCall for call in calls)
        ):
            # Text and validated calls validate to themselves (a scripted model answers
            # every step with one): the message without the validation.
            return unchecked(
                ChatMessage,
                {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": calls,
                    "tool_call_id": None,
                    "name": None,
                },
                _ASSISTANT_FIELDS,
            )
        return cls(role="assistant", content=content, tool_calls=calls)

    @classmethod
    def tool(cls, tool_call_id: str, content: str, *, name: str | None = None) -> ChatMessage:
        """A tool result (or an observation about a bad call) answering ``tool_call_id``."""
        if (
            cls is ChatMessage
            and type(content) is str
            and type(tool_call_id) is str
            and (name is None or type(name) is str)
        ):
            # Text fields given as text validate to themselves: the message without the
            # validation (the ReAct loop answers every tool call with one).
            return unchecked(
                ChatMessage,
                {
                    "role": "tool",
                    "content": content,
                    "tool_calls": (),
                    "tool_call_id": tool_call_id,
                    "name": name,
                },
                _TOOL_MESSAGE_FIELDS,
            )
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name)

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI wire form, leaving out empty fields the API would reject or ignore."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


class Usage(_ChatData):
    """Token counts reported by the endpoint for one completion."""

    model_config = _FROZEN

    prompt_tokens: int = 0
    """Tokens in the request."""
    completion_tokens: int = 0
    """Tokens in the reply."""
    total_tokens: int = 0
    """Their sum, as the endpoint reported it."""

    @classmethod
    def from_openai(cls, usage: Mapping[str, Any]) -> Usage:
        """Take the three counts from a wire ``usage`` object, ignoring the detail fields."""
        return cls(
            prompt_tokens=usage.get("prompt_tokens") or 0,
            completion_tokens=usage.get("completion_tokens") or 0,
            total_tokens=usage.get("total_tokens") or 0,
        )

    def __add__(self, other: Usage) -> Usage:
        """Usage adds up, so a run can total the usage of all its calls."""
        # Sums of validated counts are counts: built without validating them again (every
        # ReAct step adds its reply's usage to the run's).
        return unchecked(
            Usage,
            {
                "prompt_tokens": self.prompt_tokens + other.prompt_tokens,
                "completion_tokens": self.completion_tokens + other.completion_tokens,
                "total_tokens": self.total_tokens + other.total_tokens,
            },
            _USAGE_FIELDS,
        )


_TOOL_MESSAGE_FIELDS = {"role", "content", "tool_call_id", "name"}
"""The fields :meth:`ChatMessage.tool` sets, shared by the messages it builds."""
_ASSISTANT_FIELDS = {"role", "content", "tool_calls"}
"""The fields :meth:`ChatMessage.assistant` sets, shared by the messages it builds."""
_USAGE_FIELDS = set(Usage.model_fields)
"""The fields a sum of usages sets (all three), shared by those records."""


class ResponseFormat(_ChatData):
    """What shape the reply must have: free ``text``, any JSON object, or JSON matching a
    schema.

    It is data, not wire format: endpoints disagree on how a schema is sent (OpenAI, vLLM and
    Ollama take ``{"type": "json_schema", "json_schema": {...}}``, llama-cpp-python only
    ``{"type": "json_object", "schema": {...}}``), so :class:`~stargraph.llm.EndpointProfile`
    encodes it for the endpoint at hand.

        >>> ResponseFormat.for_schema({"type": "object"}, name="answer").to_openai()
        {'type': 'json_schema', 'json_schema': {'name': 'answer', 'schema': {'type': 'object'}}}
    """

    model_config = _FROZEN

    type: Literal["text", "json_object", "json_schema"]
    """``text``, ``json_object`` (any JSON object) or ``json_schema`` (:attr:`json_schema`)."""
    json_schema: dict[str, Any] | None = None
    """The JSON Schema the reply must match (``type="json_schema"`` only)."""
    name: str = "output"
    """The schema's name, which OpenAI requires (``[a-zA-Z0-9_-]``, up to 64 characters)."""
    strict: bool | None = None
    """OpenAI's strict schema adherence; ``None`` leaves the endpoint's default."""

    @classmethod
    def for_schema(
        cls,
        schema: Mapping[str, Any] | _ModelClass,
        *,
        name: str | None = None,
        strict: bool | None = None,
    ) -> ResponseFormat:
        """JSON matching ``schema`` (a JSON Schema dict, or a pydantic model's schema)."""
        if isinstance(schema, type):
            return cls(
                type="json_schema",
                json_schema=schema.model_json_schema(),
                name=name or schema.__name__,
                strict=strict,
            )
        return cls(
            type="json_schema", json_schema=dict(schema), name=name or "output", strict=strict
        )

    def to_openai(self, kind: str = "json_schema") -> dict[str, Any]:
        """The ``response_format`` body field. ``kind`` says how the endpoint takes a schema:
        ``json_schema`` (OpenAI's form), ``json_object_schema`` (``{"type": "json_object",
        "schema": ...}``) or ``json_object`` (the schema cannot be sent; only JSON is asked)."""
        if self.type != "json_schema" or self.json_schema is None:
            return {"type": "json_object" if self.type == "json_schema" else self.type}
        if kind == "json_object_schema":
            return {"type": "json_object", "schema": self.json_schema}
        if kind == "json_object":
            return {"type": "json_object"}
        spec: dict[str, Any] = {"name": self.name, "schema": self.json_schema}
        if self.strict is not None:
            spec["strict"] = self.strict
        return {"type": "json_schema", "json_schema": spec}


class RequestOptions(_ChatData):
    """Request fields a graph fixes for every model call it makes, as data (so they are part
    of the graph's hash): ``react_graph(..., request=RequestOptions(...))``.

        >>> RequestOptions(max_tokens=256, seed=7).model_dump(exclude_defaults=True)
        {'max_tokens': 256, 'seed': 7}

    Every model-calling node takes it the same way, beside ``temperature=``:
    ``react_graph``, ``agent_graph``/``create_agent``, the machines (``skillspec_graph``,
    ``MachineRuntime``, ``schema_graph``) and the reference skills (``rag_graph``,
    ``wiki_graph``, ``autoresearch_graph``).
    """

    model_config = _FROZEN

    tool_choice: Literal["auto", "none", "required"] | dict[str, Any] | None = None
    """``auto``, ``none``, ``required`` or ``{"type": "function", "function": {"name": ...}}``;
    ``None`` leaves it to the endpoint profile (which sends ``auto`` where a missing value
    would mean "no tools")."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Upper bound of the reply's length in tokens; ``None`` leaves the endpoint's default."""
    response_format: ResponseFormat | None = None
    """The reply's required shape (see :class:`ResponseFormat`)."""
    # Strict: a seed of True or "7" is a mistake, not a seed.
    seed: int | None = Field(default=None, strict=True)
    """The sampling seed (with ``temperature=0`` and one server, the same reply again);
    ``None`` leaves the endpoint's default."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Further body fields (``top_p`` ...), sent as they are."""


class ChatRequest(_ChatData):
    """Everything a chat model is asked, as data; :meth:`fingerprint` keys recordings.

    ``model=None`` means "the chat model's own default model". ``tools`` are OpenAI tool
    dicts (``{"type": "function", "function": {"name", "description", "parameters"}}``), as
    produced by ``ToolSpec.llm_view()``. ``extra`` holds any other body field the endpoint
    understands (``top_p`` ...); it is sent as is.
    """

    model_config = _FROZEN

    messages: tuple[ChatMessage, ...]
    """The conversation so far."""
    model: str | None = None
    """Model name; ``None`` defers to the chat model's default."""
    tools: tuple[dict[str, Any], ...] = ()
    """Functions offered to the model, in the OpenAI tool format."""
    tool_choice: str | dict[str, Any] | None = None
    """``"auto"``, ``"none"``, ``"required"`` or a named-function dict; ``None`` omits it."""
    temperature: float | None = None
    """Sampling temperature; ``None`` leaves the endpoint's default."""
    parallel_tool_calls: bool | None = None
    """Whether the model may call several tools in one reply; ``None`` omits it."""
    max_tokens: int | None = None
    """Upper bound of the reply's length in tokens; ``None`` omits it."""
    response_format: ResponseFormat | None = None
    """The reply's required shape; ``None`` omits it."""
    seed: int | None = None
    """The sampling seed; ``None`` omits it."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Further body fields, passed through unchanged."""

    def fingerprint(self) -> str:
        """``"sha256:<hex>"`` of the RFC 8785 canonical JSON of this request.

        Fields left at their defaults are dropped first, so adding an optional field to this
        class later does not change the fingerprints of recorded requests; dict key order
        never matters (JCS sorts keys).
        """
        canonical: bytes = rfc8785.dumps(self.model_dump(mode="json", exclude_defaults=True))
        return "sha256:" + hashlib.sha256(canonical).hexdigest()

    def to_openai(self, default_model: str) -> dict[str, Any]:
        """The request body for ``POST /chat/completions`` (without ``stream``)."""
        body: dict[str, Any] = {
            "model": self.model or default_model,
            "messages": [message.to_openai() for message in self.messages],
        }
        if self.tools:
            body["tools"] = list(self.tools)
        if self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = self.parallel_tool_calls
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.response_format is not None:
            body["response_format"] = self.response_format.to_openai()
        if self.seed is not None:
            body["seed"] = self.seed
        body.update(self.extra)
        return body


class ChatResponse(_ChatData):
    """One completion: the assistant message plus why it stopped and what it cost."""

    model_config = _FROZEN

    message: ChatMessage
    """The assistant message; append it to the conversation as is (tool calls included)."""
    finish_reason: str | None = None
    """``stop``, ``tool_calls``, ``length``, ``content_filter`` ... as the endpoint said."""
    usage: Usage = Usage.model_construct()  # all zeros: nothing to validate at import
    """Token counts; zeros when the endpoint reported none."""
    model: str = ""
    """The model that answered, as reported by the endpoint."""
    id: str = ""
    """The completion id (``chatcmpl-...``)."""
    refusal: str | None = None
    """The model's refusal text, if it refused instead of answering."""

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """Shortcut for ``message.tool_calls``."""
        return self.message.tool_calls

    @classmethod
    def from_openai(cls, completion: Mapping[str, Any]) -> ChatResponse:
        """Build from a chat-completion JSON object (the first choice)."""
        choices = completion.get("choices") or [{}]
        choice = choices[0]
        wire = choice.get("message") or {}
        calls = tuple(
            ToolCall(
                id=call.get("id") or "",
                name=(call.get("function") or {}).get("name") or "",
                arguments=(call.get("function") or {}).get("arguments") or "",
            )
            for call in wire.get("tool_calls") or ()
        )
        return cls(
            message=ChatMessage(role="assistant", content=wire.get("content"), tool_calls=calls),
            finish_reason=choice.get("finish_reason"),
            usage=Usage.from_openai(completion.get("usage") or {}),
            model=completion.get("model") or "",
            id=completion.get("id") or "",
            refusal=wire.get("refusal"),
        )


class ToolCallDelta(_ChatData):
    """A fragment of one tool call in a stream; fragments with one ``index`` concatenate."""

    model_config = _FROZEN

    index: int
    """Position of the call in the final message."""
    id: str | None = None
    """Sent once, in the call's first fragment."""
    name: str | None = None
    """Sent once, in the call's first fragment."""
    arguments: str = ""
    """The next piece of the raw JSON arguments."""


class ChatDelta(_ChatData):
    """One streamed chunk: text, refusal or tool-call fragments, and at the end the reason
    the model stopped and (if asked for) the usage."""

    model_config = _FROZEN

    content: str = ""
    """The next piece of text."""
    refusal: str = ""
    """The next piece of a refusal."""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    """Tool-call fragments in this chunk."""
    finish_reason: str | None = None
    """Set on the chunk that ends the choice."""
    usage: Usage | None = None
    """Set on the final usage chunk."""
