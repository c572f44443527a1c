"""Chat models: the ``ChatModel`` protocol, its data, and the implementations that ship.

* :class:`ChatModel` - the seam: ``complete(request)`` / ``await acomplete(request)``.
* :class:`OpenAIChatModel` - any OpenAI-compatible endpoint, via the ``openai`` package
  (imported lazily: ``import stargraph.llm`` stays cheap).
* :class:`EndpointProfile` - what one kind of server (OpenAI, vLLM, llama.cpp, Ollama)
  accepts; ``OpenAIChatModel(profile=...)`` shapes every request to it.
* :class:`RequestOptions`, :class:`ResponseFormat` - request fields as data (``tool_choice``,
  ``max_tokens``, the reply's JSON Schema), e.g. for ``react_graph(request=...)``.
* :class:`ScriptedChatModel` - an in-memory fake answering from a script.
* :func:`normalize_tool_calls` - turns refusals, malformed arguments and unknown tools into
  observations for the model instead of crashes.
* :mod:`stargraph.llm.langchain` - a LangChain chat model as a model service (the
  ``langchain`` extra; nothing here imports ``langchain_core``).

The over-HTTP fake (``ScriptedOpenAIServer``) and the conformance suite
(``check_chat_model``) live in :mod:`stargraph.testing`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stargraph import _lazy
from stargraph.llm._messages import (
    ChatDelta,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    RequestOptions,
    ResponseFormat,
    Role,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from stargraph.llm._protocol import ChatModel

if TYPE_CHECKING:
    from stargraph.llm._openai import ChatStream, OpenAIChatModel, StreamAssembler
    from stargraph.llm._problems import (
        NormalizedToolCalls,
        ParsedToolCall,
        ProblemKind,
        ToolCallProblem,
        normalize_tool_calls,
    )
    from stargraph.llm._profiles import (
        GENERIC,
        LLAMA_CPP,
        OLLAMA,
        OPENAI,
        PROFILES,
        VLLM,
        EndpointProfile,
        detect_profile,
        profile_for_url,
    )
    from stargraph.llm._recorded import JournaledChatModel
    from stargraph.llm._scripted import ScriptedChatModel

__all__ = [
    "ChatDelta",
    "ChatMessage",
    "ChatModel",
    "ChatRequest",
    "ChatResponse",
    "ChatStream",
    "EndpointProfile",
    "GENERIC",
    "JournaledChatModel",
    "LLAMA_CPP",
    "NormalizedToolCalls",
    "OLLAMA",
    "OPENAI",
    "OpenAIChatModel",
    "PROFILES",
    "ParsedToolCall",
    "ProblemKind",
    "RequestOptions",
    "ResponseFormat",
    "Role",
    "ScriptedChatModel",
    "StreamAssembler",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallProblem",
    "Usage",
    "VLLM",
    "detect_profile",
    "normalize_tool_calls",
    "profile_for_url",
]

# The clients, the profiles and the tool-call checks are imported when first read: a program
# that reads or builds messages (a replay, a tool) does not import them.
__getattr__, __dir__ = _lazy.exports(
    __name__,
    {
        "ChatStream": "._openai",
        "EndpointProfile": "._profiles",
        "GENERIC": "._profiles",
        "JournaledChatModel": "._recorded",
        "LLAMA_CPP": "._profiles",
        "NormalizedToolCalls": "._problems",
        "OLLAMA": "._profiles",
        "OPENAI": "._profiles",
        "OpenAIChatModel": "._openai",
        "PROFILES": "._profiles",
        "ParsedToolCall": "._problems",
        "ProblemKind": "._problems",
        "ScriptedChatModel": "._scripted",
        "StreamAssembler": "._openai",
        "ToolCallProblem": "._problems",
        "VLLM": "._profiles",
        "detect_profile": "._profiles",
        "normalize_tool_calls": "._problems",
        "profile_for_url": "._profiles",
    },
)
