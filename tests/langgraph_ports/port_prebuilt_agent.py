# mypy: ignore-errors
# (a LangGraph documentation example, kept untyped as LangGraph writes it)
"""LangGraph docs, "Agents" (the prebuilt ``create_react_agent``): an agent over two plain
functions, with a prompt and memory. The model (a LangChain chat model, the same on both
engines) calls both tools in one reply, answers quoting their results under the prompt it
was given, and on the thread's second turn says how many questions it has seen."""

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from tests.langgraph_ports.engines import texts

EXPECTED = [
    ("user", "what is the weather in sf?"),
    ("assistant", ""),
    ("tool", "It's always sunny in sf!"),
    ("tool", "It is 9am in sf."),
    ("assistant", "[Be brief.] It's always sunny in sf! It is 9am in sf."),
    ("user", "thanks!"),
    ("assistant", "[Be brief.] you asked 2 questions"),
]


def get_weather(city: str) -> str:
    """Get weather for a given city."""
    return f"It's always sunny in {city}!"


def get_time(city: str) -> str:
    """Get the time in a given city."""
    return f"It is 9am in {city}."


class ScriptedModel(BaseChatModel):
    """Calls both tools for a question, then answers from their results."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        prompt = messages[0].content if messages[0].type == "system" else "no prompt"
        asked = [m for m in messages if m.type == "human"]
        if messages[-1].type == "tool":
            results = [m.content for m in messages[-2:]]
            reply = AIMessage(f"[{prompt}] {' '.join(results)}")
        elif len(asked) == 1:
            calls = [
                {"name": "get_weather", "args": {"city": "sf"}, "id": "call_1"},
                {"name": "get_time", "args": {"city": "sf"}, "id": "call_2"},
            ]
            reply = AIMessage("", tool_calls=calls)
        else:
            reply = AIMessage(f"[{prompt}] you asked {len(asked)} questions")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def run(lg):
    agent = lg.create_react_agent(
        model=ScriptedModel(),
        tools=[get_weather, get_time],
        prompt="Be brief.",
        checkpointer=lg.InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "1"}}
    agent.invoke({"messages": [{"role": "user", "content": "what is the weather in sf?"}]}, config)
    final = agent.invoke({"messages": [{"role": "user", "content": "thanks!"}]}, config)
    return texts(final["messages"])
