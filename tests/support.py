"""Small typed helpers shared by tests in several folders."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stargraph.runtime import Event, RunFinished
from stargraph.tools import ToolResult


def finished(events: Sequence[Event]) -> RunFinished:
    """The last event of a stream, which must say the run finished (narrowed for the reader)."""
    last = events[-1]
    assert isinstance(last, RunFinished), last
    return last


def data(result: ToolResult) -> Any:
    """A tool result's JSON payload, read as the fields the tool's output schema promises.

    Typed ``Any`` on purpose: each assertion reads a nested field of a known shape, and
    narrowing ``JsonValue`` at every level would hide what is asserted.
    """
    return result.payload
