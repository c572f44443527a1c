"""LangGraph's prebuilt agent, spelled as LangGraph spells it, over stargraph's own.

``from langgraph.prebuilt import create_react_agent`` becomes
``from stargraph.langgraph.prebuilt import create_react_agent``: the same arguments
(``model``, ``tools``, ``prompt=``, ``response_format=``, ``state_schema=``,
``checkpointer=``, ``name=``) build a :func:`stargraph.skills.agent.create_agent` agent,
and the result runs with LangGraph's ``invoke``/``stream``/``get_state`` (threads in
``config``, as :class:`~stargraph.langgraph.CompiledStateGraph`). A LangChain chat model is
wrapped in :class:`~stargraph.llm.langchain.LangChainChatModel` (journaled, replayable); a
stargraph :class:`~stargraph.llm.ChatModel` is used as it is.

What differs, and why (see ``docs/langgraph.md``): the loop ends by rules (a final answer,
``max_steps`` model calls, an error budget) rather than by ``remaining_steps``; a structured
response is the final answer itself, a JSON object of ``response_format`` (no second model
call); the hooks, ``store=``, ``context_schema=`` and ``interrupt_before/after=`` are not
mapped and are refused by name rather than ignored.

>>> from stargraph.langgraph.prebuilt import create_react_agent
>>> from stargraph.llm import ScriptedChatModel
>>> def get_weather(city: str) -> str:
...     '''Get weather for a given city.'''
...     return f"It's always sunny in {city}!"
>>> agent = create_react_agent(ScriptedChatModel(["Sunny."]), [get_weather], prompt="Be brief.")
>>> final = agent.invoke({"messages": [{"role": "user", "content": "weather in sf?"}]})
>>> final["messages"][-1].content
'Sunny.'
"""

# No ``from __future__ import annotations``: AgentState below is a TypedDict, whose
# annotations must be objects for the layer to read them.

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypedDict

from pydantic import BaseModel, create_model

from stargraph.errors import UsageError
from stargraph.langgraph._compiled import CompiledStateGraph, store_of
from stargraph.langgraph._state import _field, is_typeddict, schema_fields
from stargraph.langgraph._types import RemainingSteps
from stargraph.messages import add_messages
from stargraph.skills import agent as native_agent

__all__ = ["AgentState", "create_react_agent"]

_HERE = "stargraph.langgraph.prebuilt"


class AgentState(TypedDict):
    """LangGraph's ``AgentState``: the conversation and the remaining step budget. Subclass
    it to add channels a tool may update (``state_schema=MyState``)."""

    messages: Annotated[list[Any], add_messages]
    remaining_steps: RemainingSteps


# The channels every agent state has: the LangGraph ones, and the native agent's own.
_AGENT_KEYS = frozenset(
    {"messages", "remaining_steps", "structured_response", *native_agent.AgentState.model_fields}
)


def _native_state(schema: Any) -> type[native_agent.AgentState]:
    """The native agent state for a LangGraph ``state_schema=``: a subclass of
    :class:`stargraph.skills.agent.AgentState` as it is, else one with the schema's own
    channels (a TypedDict or pydantic model deriving from LangGraph's AgentState)."""
    if schema is None:
        return native_agent.AgentState
    if isinstance(schema, type) and issubclass(schema, native_agent.AgentState):
        return schema
    if not (is_typeddict(schema) or (isinstance(schema, type) and issubclass(schema, BaseModel))):
        raise UsageError(
            f"state_schema={schema!r} is neither a TypedDict nor a pydantic model; declare "
            "class MyState(AgentState): ... (AgentState from stargraph.langgraph.prebuilt)"
        )
    fields = schema_fields(schema)
    if "messages" not in fields:
        raise UsageError(
            f"state_schema {schema.__qualname__!r} has no 'messages' channel; derive it from "
            "AgentState (from stargraph.langgraph.prebuilt import AgentState)"
        )
    own = {key: _field(ann) for key, ann in fields.items() if key not in _AGENT_KEYS}
    model: type[native_agent.AgentState] = create_model(  # type: ignore[call-overload]
        schema.__name__, __base__=native_agent.AgentState, __module__=schema.__module__, **own
    )
    return model


def _chat_model(model: Any) -> Any:
    """A stargraph chat model for LangGraph's ``model`` argument."""
    if callable(getattr(model, "complete", None)):
        return model  # a stargraph ChatModel
    # By the modules of its classes, so that nothing here imports langchain_core to find out.
    if any(c.__module__.startswith("langchain_core.") for c in type(model).__mro__):
        from stargraph.llm.langchain import LangChainChatModel

        return LangChainChatModel(model)
    if isinstance(model, str):
        hint = (
            "pass a chat model object: a LangChain chat model (init_chat_model(...)), "
            "or a stargraph one (OpenAIChatModel, ScriptedChatModel)"
        )
        raise UsageError(f"model={model!r}: a model named by a string is not mapped; {hint}")
    raise UsageError(
        f"model={model!r} is neither a stargraph ChatModel (it has no complete()) nor a "
        "LangChain chat model; pass one of those"
    )


def _prompt(prompt: Any) -> str | None:
    """The system prompt text of LangGraph's ``prompt`` (a string or a SystemMessage)."""
    if prompt is None or isinstance(prompt, str):
        return prompt
    content = getattr(prompt, "content", None)
    if getattr(prompt, "type", getattr(prompt, "role", None)) == "system" and isinstance(
        content, str
    ):
        return content
    raise UsageError(
        f"prompt={prompt!r:.80} is not mapped: pass the system prompt as a string or a "
        "SystemMessage (a prompt function or Runnable would run outside the journal; "
        "build that agent with stargraph.langgraph.StateGraph instead)"
    )


def _refuse(given: Mapping[str, Any]) -> None:
    """Refuse, by name, LangGraph arguments this layer does not map."""
    why = {
        "pre_model_hook": "add a node before the agent in a StateGraph that calls it",
        "post_model_hook": "add a node after the agent in a StateGraph that calls it",
        "context_schema": "pass run-time values in the state, or as services to a graph",
        "store": "give tools what they need as services; stargraph has no BaseStore",
        "interrupt_before": "build the loop with stargraph.langgraph.StateGraph",
        "interrupt_after": "build the loop with stargraph.langgraph.StateGraph",
        "debug": "stream(stream_mode='debug'-like events) with the native stream(mode='events')",
    }
    for name, value in given.items():
        if value is None or value is False:
            continue
        fix = why.get(name, "drop it (a deprecated LangGraph argument)")
        raise UsageError(f"create_react_agent({name}=...) is not mapped: {fix}")


class _Agent(CompiledStateGraph):
    """A compiled prebuilt agent: what it returns and streams are LangGraph's channels
    (the messages, the structured response, the state's own), not the rule counters."""

    def __init__(
        self, native: Any, keys: tuple[str, ...], response_format: type[BaseModel] | None
    ) -> None:
        super().__init__(_Builder(native.state_model), native)
        self._out_keys = self._state_keys = keys
        self._response_format = response_format

    def _values(self, state: Any, keys: Sequence[str] | None = None) -> dict[str, Any]:
        values = super()._values(state, keys)
        found = values.get("structured_response")
        if self._response_format is not None and isinstance(found, dict):
            # LangGraph hands back an instance of the schema.
            values["structured_response"] = self._response_format.model_validate(found)
        return values


class _Builder:
    """What :class:`CompiledStateGraph` reads of a builder: the output schema."""

    def __init__(self, output_schema: type[BaseModel]) -> None:
        self.output_schema = output_schema


def create_react_agent(
    model: Any,
    tools: Sequence[Callable[..., Any] | Any],
    *,
    prompt: Any = None,
    response_format: type[BaseModel] | None = None,
    state_schema: Any = None,
    checkpointer: Any = None,
    name: str | None = None,
    version: str = "v2",
    max_steps: int = 10,
    pre_model_hook: Any = None,
    post_model_hook: Any = None,
    context_schema: Any = None,
    store: Any = None,
    interrupt_before: Any = None,
    interrupt_after: Any = None,
    debug: bool = False,
    **deprecated_kwargs: Any,
) -> CompiledStateGraph:
    """LangGraph's ``create_react_agent``: a tool-calling agent over ``tools`` (plain
    functions, ``@tool`` tools or LangChain tools), compiled, with LangGraph's run API.

    ``model`` is a LangChain chat model or a stargraph ``ChatModel``; ``prompt`` the system
    prompt (a string or a ``SystemMessage``); ``response_format`` a pydantic model the final
    answer must be a JSON object of (``structured_response`` holds an instance of it);
    ``state_schema`` a subclass of :class:`AgentState` adding channels tools may update
    with ``Command(update=...)``; ``checkpointer`` ``InMemorySaver()``, ``True`` or a
    stargraph store (threads through ``config={"configurable": {"thread_id": ...}}``).
    ``max_steps`` (stargraph's) bounds the model calls; ``version`` is accepted, both run
    every tool call of a reply. The other LangGraph arguments are refused by name.
    """
    _refuse(
        {
            "pre_model_hook": pre_model_hook,
            "post_model_hook": post_model_hook,
            "context_schema": context_schema,
            "store": store,
            "interrupt_before": interrupt_before,
            "interrupt_after": interrupt_after,
            "debug": debug,
            **deprecated_kwargs,
        }
    )
    if version not in ("v1", "v2"):
        raise UsageError(f"version={version!r}: LangGraph knows 'v1' and 'v2'")
    if response_format is not None and not (
        isinstance(response_format, type) and issubclass(response_format, BaseModel)
    ):
        raise UsageError(
            f"response_format={response_format!r:.80} is not mapped: pass a pydantic model "
            "class (a JSON schema dict or a (prompt, schema) pair is not taken)"
        )
    if hasattr(tools, "tools_by_name"):  # a ToolNode
        tools = list(tools.tools_by_name.values())
    state = _native_state(state_schema)
    native = native_agent.create_agent(
        _chat_model(model),
        list(tools),
        prompt=_prompt(prompt),
        state=state,
        response_format=response_format,
        name=name or "agent",
        max_steps=max_steps,
        store=store_of(checkpointer),
    )
    own = tuple(k for k in state.model_fields if k not in _AGENT_KEYS)
    keys = ("messages", *(("structured_response",) if response_format else ()), *own)
    return _Agent(native, keys, response_format)
