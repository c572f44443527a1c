"""Endpoint profiles: what each OpenAI-compatible server accepts, so one request fits them all.

The servers people run all speak "the OpenAI API", and all differ in the details a request
depends on. Measured, not guessed (llama-cpp-python 0.3.36 is in the test suite):

==========================  ========  ========  ======================  ========
what                        OpenAI    vLLM      llama.cpp               Ollama
==========================  ========  ========  ======================  ========
``"content": null``         yes       yes       no (HTTP 500)           no
missing ``tool_choice``     auto      auto      **no tools offered**    auto
``tool_choice`` values      all       all       auto, none, named       auto
schema in ``response_format``  json_schema  json_schema  json_object + schema  json_schema
schema and tools together   yes       yes       no (sent without schema)  yes
usage in streams            yes       yes       never sent              yes
re-send a timed-out call    yes       yes       no (one slot, still busy)   yes
``maxLength`` in schemas    any       any       at most 1,000 (lowered)  any
==========================  ========  ========  ======================  ========

An :class:`EndpointProfile` holds one column; :meth:`EndpointProfile.body` turns a
:class:`~stargraph.llm.ChatRequest` into the request body that endpoint takes.
``OpenAIChatModel(profile=...)`` takes a profile, a name (``"openai"``, ``"vllm"``,
``"llama.cpp"``, ``"ollama"``, ``"generic"``) or ``"detect"`` (ask the server's ``/models``
once); without one it goes by the URL, and an unknown server gets ``generic``: the choices
that work everywhere.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field

from stargraph._typed import TypedModel
from stargraph.errors import ChatDataError, LLMError
from stargraph.llm._messages import ChatRequest

__all__ = [
    "GENERIC",
    "LLAMA_CPP",
    "OLLAMA",
    "OPENAI",
    "PROFILES",
    "VLLM",
    "EndpointProfile",
    "StructuredOutput",
    "detect_profile",
    "profile_for_url",
]

StructuredOutput = Literal["json_schema", "json_object_schema", "json_object"]
"""How an endpoint takes a JSON Schema for the reply: OpenAI's ``json_schema``,
``{"type": "json_object", "schema": ...}``, or not at all (plain ``json_object``)."""

_TOOL_CHOICES: Final = ("auto", "none", "required", "function")


class EndpointProfile(TypedModel):
    """What one kind of OpenAI-compatible server accepts, field by field; the shipped ones
    are :data:`OPENAI`, :data:`VLLM`, :data:`LLAMA_CPP`, :data:`OLLAMA` and :data:`GENERIC`."""

    typed_error = ChatDataError

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """The profile's name, as :meth:`named` takes it."""
    null_content: bool = True
    """Whether an assistant message that only calls tools may say ``"content": null``;
    if not, ``""`` is sent (omitting the key breaks llama.cpp's chat templates too)."""
    default_tool_choice: Literal["auto"] | None = None
    """Sent when tools are offered and the request names no ``tool_choice``: for servers
    that read a missing value as "offer no tools"."""
    tool_choices: tuple[str, ...] = _TOOL_CHOICES
    """The ``tool_choice`` values the server honours (``function`` = a named function)."""
    structured_output: StructuredOutput = "json_schema"
    """How a :class:`~stargraph.llm.ResponseFormat` with a schema is sent."""
    schema_with_tools: bool = True
    """Whether a reply held to a schema (``response_format``) may still be a tool call.
    Where it may not (a grammar over the whole reply, as llama.cpp builds one), a request
    offering tools is sent without the schema, and the caller's instruction stands alone."""
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """The body field that carries ``max_tokens`` (OpenAI's newer models take only
    ``max_completion_tokens``)."""
    stream_usage: bool = True
    """Whether asking for usage in a stream (``stream_options``) means anything."""
    stream_tools: bool = True
    """Whether a streamed request may offer tools with ``tool_choice="auto"``
    (llama-cpp-python aborts such a stream); if not, a call asked to stream its tokens
    (:meth:`~stargraph.llm.OpenAIChatModel.complete_streaming`) is made unstreamed and its
    content delivered in one piece."""
    retry_timeouts: bool = True
    """Whether a timed-out request may be sent again. A single-slot local server keeps
    generating the answer nobody waits for, so a re-sent request only queues behind it."""
    max_string_length: int | None = Field(None, ge=1)
    """The longest string bound (``maxLength``) the server's grammar builder accepts; longer
    bounds in offered tool schemas and response schemas are lowered to it, so the model is
    held to a subset of what the tool validates. llama.cpp refuses a string repeated more
    than 1,000 times, and llama-cpp-python's server then stops. ``None``: sent as declared."""

    @classmethod
    def named(cls, name: str) -> EndpointProfile:
        """The shipped profile called ``name`` (case and ``.``/``-``/``_`` do not matter)."""
        found = PROFILES.get(_key(name))
        if found is None:
            known = ", ".join(repr(p) for p in PROFILES_BY_NAME)
            raise LLMError(
                f"unknown endpoint profile {name!r}; use one of {known}, 'detect', or pass an "
                "EndpointProfile(...) of your own"
            )
        return found

    def body(self, request: ChatRequest, default_model: str) -> dict[str, Any]:
        """The ``POST /chat/completions`` body for ``request`` on this endpoint.

        Raises :class:`~stargraph.errors.LLMError` for a ``tool_choice`` the server would
        reject or silently ignore, before anything is sent.
        """
        body = request.to_openai(default_model)
        if not self.null_content:
            body["messages"] = [
                {**message, "content": ""} if message.get("content", "") is None else message
                for message in body["messages"]
            ]
        explicit = request.extra
        if not request.tools:
            # OpenAI rejects a tool_choice without tools; nothing to choose from anyway.
            if "tool_choice" not in explicit:
                body.pop("tool_choice", None)
        elif request.tool_choice is None:
            if self.default_tool_choice is not None and "tool_choice" not in explicit:
                body["tool_choice"] = self.default_tool_choice
        else:
            self._check_tool_choice(request.tool_choice)
        if request.max_tokens is not None and "max_tokens" not in explicit:
            body[self.max_tokens_field] = body.pop("max_tokens")
        shape = request.response_format
        if shape is not None and "response_format" not in explicit:
            if request.tools and shape.type == "json_schema" and not self.schema_with_tools:
                body.pop("response_format", None)
            else:
                body["response_format"] = shape.to_openai(self.structured_output)
        if self.max_string_length is not None:
            for key in ("tools", "response_format"):
                if key in body:
                    body[key] = _lower_string_bounds(body[key], self.max_string_length)
        return body

    def _check_tool_choice(self, choice: str | dict[str, Any]) -> None:
        kind = choice if isinstance(choice, str) else "function"
        if kind not in self.tool_choices:
            accepted = ", ".join(repr(c) for c in self.tool_choices)
            raise LLMError(
                f"endpoint profile {self.name!r} does not support tool_choice={choice!r} "
                f"(it accepts {accepted}); choose one of those, or pass the profile of the "
                "server you really use"
            )


def _lower_string_bounds(value: Any, limit: int) -> Any:
    """A copy of ``value`` (JSON) with every ``maxLength`` above ``limit`` lowered to it."""
    if isinstance(value, list):
        return [_lower_string_bounds(item, limit) for item in value]
    if not isinstance(value, dict):
        return value
    lowered = {key: _lower_string_bounds(item, limit) for key, item in value.items()}
    bound = lowered.get("maxLength")
    if isinstance(bound, int) and not isinstance(bound, bool) and bound > limit:
        lowered["maxLength"] = limit
    return lowered


# The shipped profiles are literals, built without validation so that importing the llm
# package does not build EndpointProfile's schema (tests pin that they equal their
# validated forms).
OPENAI: Final = EndpointProfile.model_construct(
    name="openai", max_tokens_field="max_completion_tokens"
)
"""api.openai.com."""
VLLM: Final = EndpointProfile.model_construct(name="vllm")
"""vLLM's OpenAI-compatible server (tool calls need ``--enable-auto-tool-choice``)."""
LLAMA_CPP: Final = EndpointProfile.model_construct(
    name="llama.cpp",
    null_content=False,
    default_tool_choice="auto",
    tool_choices=("auto", "none", "function"),
    structured_output="json_object_schema",
    schema_with_tools=False,
    stream_usage=False,
    stream_tools=False,
    retry_timeouts=False,
    max_string_length=1000,
)
"""llama.cpp's servers (``llama_cpp.server`` of llama-cpp-python, and ``llama-server``)."""
OLLAMA: Final = EndpointProfile.model_construct(
    name="ollama", null_content=False, tool_choices=("auto",)
)
"""Ollama's ``/v1`` endpoint (it ignores ``tool_choice``: tools are always offered)."""
GENERIC: Final = EndpointProfile.model_construct(
    name="generic", null_content=False, default_tool_choice="auto", schema_with_tools=False
)
"""An unknown server: the choices every server above accepts."""

PROFILES_BY_NAME: Final[Mapping[str, EndpointProfile]] = {
    p.name: p for p in (OPENAI, VLLM, LLAMA_CPP, OLLAMA, GENERIC)
}
PROFILES: Final[Mapping[str, EndpointProfile]] = {
    **PROFILES_BY_NAME,
    "llamacpp": LLAMA_CPP,
    "llama_cpp": LLAMA_CPP,
    "llama-cpp": LLAMA_CPP,
}
"""Every shipped profile by name (with the spellings of llama.cpp people use)."""

# ``owned_by`` of GET /models, as each server fills it in.
_OWNERS: Final[Mapping[str, EndpointProfile]] = {
    "openai": OPENAI,
    "system": OPENAI,
    "openai-internal": OPENAI,
    "vllm": VLLM,
    "me": LLAMA_CPP,  # llama-cpp-python
    "llamacpp": LLAMA_CPP,  # llama.cpp's llama-server
    "library": OLLAMA,
}
_OLLAMA_PORT: Final = 11434


def _key(name: str) -> str:
    return name.strip().lower()


def profile_for_url(base_url: str) -> EndpointProfile:
    """The profile a URL alone implies: OpenAI's host, Ollama's port, else ``generic``.

    >>> profile_for_url("https://api.openai.com/v1").name, profile_for_url("http://h:11434/v1").name
    ('openai', 'ollama')
    """
    parts = urlsplit(base_url)
    if parts.hostname == "api.openai.com":
        return OPENAI
    if parts.port == _OLLAMA_PORT:
        return OLLAMA
    return GENERIC


def detect_profile(
    models: Mapping[str, Any] | Collection[str], base_url: str = ""
) -> EndpointProfile:
    """The profile of a server, from its ``GET /models`` answer (or the ``owned_by`` values in
    it): every server fills ``owned_by`` its own way. Falls back to :func:`profile_for_url`.

    >>> detect_profile({"data": [{"id": "smollm2", "owned_by": "me"}]}).name
    'llama.cpp'
    """
    if isinstance(models, Mapping):
        data = models.get("data") or ()
        owners = [str(m.get("owned_by", "")) for m in data if isinstance(m, Mapping)]
    else:
        owners = [str(owner) for owner in models]
    for owner in owners:
        found = _OWNERS.get(owner.lower())
        if found is not None:
            return found
    return profile_for_url(base_url)
