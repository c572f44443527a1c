"""Tool calls a model wrote as text instead of as native function calls.

Small local models often answer a request that offers tools with the call written out as
JSON: ``{"name": "multiply", "arguments": {"a": 3, "b": 4}}``, bare, in a Markdown code
fence, or in the ``<tool_call>`` tags of their chat template, which the server's template
parser then fails to recognise (Qwen2.5-Coder on llama.cpp's ``llama-server --jinja`` does
exactly this). Such a reply is a tool call in all but form, and read as a text answer it
ends the loop with a JSON blob as the answer.

:func:`read_text_tool_calls` turns such a reply into the native calls it spells, under
strict conditions so that a real answer is never taken for a call: the text (or each tagged
block) must parse, as a whole, into objects whose ``name`` is one of the functions the
request offered and whose arguments are a JSON object. Anything else leaves the reply as it
was. The text is parsed once, here; what the arbiter receives is the native
:class:`~stargraph.llm.ToolCall` built from what was parsed, and its arguments are then held
to the tool's schema like any other call's.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from stargraph.llm._messages import ChatMessage, ChatRequest, ChatResponse, ToolCall

__all__ = ["is_text_call", "read_text_tool_calls"]

_TAGGED: Final = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_FENCED: Final = re.compile(r"\A```[A-Za-z_]*[ \t]*\n(.*?)\n?```\Z", re.S)
_ID_PREFIX: Final = "text_call_"
_SCHEMA_KEYWORDS: Final = frozenset(
    {
        "type", "properties", "required", "description", "title", "default", "enum",
        "items", "additionalProperties", "maxLength", "minLength", "maximum", "minimum",
        "pattern", "format", "anyOf", "oneOf", "allOf", "$defs", "const", "examples",
    }
)  # fmt: skip
Offered = dict[str, "frozenset[str] | None"]
"""Offered function name -> the argument names its schema declares (None: any)."""
# A reply this long is an answer, not a call a small model wrote out.
_LIMIT: Final = 64_000


def read_text_tool_calls(request: ChatRequest, response: ChatResponse) -> ChatResponse:
    """``response`` with the tool calls its text spells as native calls, or ``response``
    itself when it already has native calls, the request offered no tools, or its text is
    not entirely such calls (see the module docstring).

    Call ids are ``text_call_<n>_<i>``, ``n`` the number of messages in the request: the
    same in every run of the same conversation (so a replay and a resumed run agree), and
    distinct within it.
    """
    message = response.message
    text = message.content
    if message.tool_calls or not request.tools or not text or len(text) > _LIMIT:
        return response
    offered = {
        function["name"]: _declared(function.get("parameters"))
        for tool in request.tools
        if isinstance(function := tool.get("function"), dict) and "name" in function
    }
    found = _calls_in(text.strip(), offered)
    if found is None:
        return response
    calls, rest = found
    base = f"{_ID_PREFIX}{len(request.messages)}"
    native = tuple(
        ToolCall(id=f"{base}_{i}", name=name, arguments=arguments)
        for i, (name, arguments) in enumerate(calls)
    )
    return response.model_copy(
        update={
            "message": ChatMessage.assistant(rest or None, tool_calls=native),
            "finish_reason": "tool_calls",
        }
    )


def is_text_call(call_id: str) -> bool:
    """Whether ``call_id`` names a call :func:`read_text_tool_calls` read from text."""
    return call_id.startswith(_ID_PREFIX)


def _declared(parameters: Any) -> frozenset[str] | None:
    """The argument names a function's parameters schema declares; ``None`` when it may take
    any (no schema, or one that allows properties beyond those it names)."""
    if not isinstance(parameters, dict):
        return None
    properties = parameters.get("properties")
    if not isinstance(properties, dict) or parameters.get("additionalProperties") not in (
        None,
        False,
    ):
        return None
    return frozenset(properties)


def _calls_in(text: str, offered: Offered) -> tuple[list[tuple[str, str]], str] | None:
    """The (name, arguments JSON) pairs ``text`` spells and the prose around tagged calls,
    or ``None`` when it is not such calls."""
    tagged = _TAGGED.findall(text)
    if tagged:
        calls: list[tuple[str, str]] = []
        for block in tagged:
            found = _parsed_calls(_unfenced(block), offered)
            if found is None:
                return None
            calls.extend(found)
        return calls, _TAGGED.sub("", text).strip()
    found = _parsed_calls(_unfenced(text), offered)
    return None if found is None else (found, "")


def _unfenced(text: str) -> str:
    fenced = _FENCED.match(text)
    return fenced.group(1).strip() if fenced else text


def _parsed_calls(text: str, offered: Offered) -> list[tuple[str, str]] | None:
    if not text.startswith(("{", "[")):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        # One call per line, as a small model lists several.
        try:
            value = [orjson.loads(line) for line in text.splitlines() if line.strip()]
        except orjson.JSONDecodeError:
            return None
    items = value if isinstance(value, list) else [value]
    calls = [_call(item, offered) for item in items]
    if not calls or any(call is None for call in calls):
        return None
    return [call for call in calls if call is not None]


def _call(item: Any, offered: Offered) -> tuple[str, str] | None:
    if not isinstance(item, dict) or set(item) - {"name", "arguments", "parameters"}:
        return None
    name = item.get("name")
    if not isinstance(name, str) or name not in offered:
        return None
    declared = offered[name]
    arguments = item.get("arguments", item.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    if declared is not None:
        # A small model copies keywords of the schema it was shown ("required": [...],
        # "maxLength": 24) in among its arguments; a keyword the function does not declare
        # as a parameter is the schema's, not an argument. Anything else undeclared stays,
        # for the tool's own validation to refuse.
        arguments = {
            key: value
            for key, value in arguments.items()
            if key in declared or key not in _SCHEMA_KEYWORDS
        }
    return name, orjson.dumps(arguments).decode()
