"""Tools that return a ``Command``, for the prebuilt agent's tests: module-level, so that a
graph compiled in another process (replay, resume, a worker) finds them."""

from __future__ import annotations

from typing import Any

from stargraph import END, Command
from stargraph.messages import Message
from stargraph.skills.agent import AgentState
from stargraph.tools import ToolContext


class Profile(AgentState):
    """The agent's state with a channel the tools update."""

    user_name: str = ""


def remember_name(name: str) -> Command:
    """Remember the user's name."""
    return Command(update={"user_name": name})


def look_up_user(ctx: ToolContext) -> Command:
    """Look the user up, answering the call with a message of its own (LangGraph style)."""
    assert ctx.call_id is not None
    return Command(
        update={"user_name": "Ann", "messages": [Message.tool(ctx.call_id, "Found Ann.")]}
    )


def finish(summary: str) -> Command:
    """End the conversation with a summary."""
    return Command(update={"messages": [Message.assistant(summary)]}, goto=END)


def wander(place: str) -> Command:
    """Go somewhere the agent has no node for."""
    return Command(goto=place)


def overwrite(value: int) -> Command:
    """Update a channel the agent keeps for its rules."""
    return Command(update={"llm_steps": value})


LOOKED_UP: list[str] = []
"""The invoices ``look_up_invoice`` was asked for (a test clears it)."""


def look_up_invoice(number: str) -> str:
    """Look an invoice up."""
    LOOKED_UP.append(number)
    return f"invoice {number}: 120 EUR, unpaid"


def transfer_to_billing() -> Command:
    """Hand the conversation to the billing agent of the parent graph."""
    return Command(graph=Command.PARENT, goto="billing", update={"handed_to": "billing"})


class Desk(AgentState):
    """A front-desk agent's state, which the parent graph shares: who took the turn."""

    handed_to: str = ""
    billing_saw: int = 0


def billing(state: Desk) -> dict[str, Any]:
    """The parent's billing node: notes what it was handed."""
    return {"billing_saw": len(state.messages)}
