"""Tools and a state schema for the tests of ``stargraph.langgraph.prebuilt``: module-level,
as LangGraph users write them."""

from __future__ import annotations

from stargraph import Command
from stargraph.langgraph.prebuilt import AgentState


class Profile(AgentState):
    """LangGraph's way of adding a channel to the prebuilt agent's state."""

    user_name: str


def remember_name(name: str) -> Command:
    """Remember the user's name."""
    return Command(update={"user_name": name})


def get_weather(city: str) -> str:
    """Get weather for a given city."""
    return f"It's always sunny in {city}!"
