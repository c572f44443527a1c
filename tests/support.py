"""Small typed helpers shared by tests in several folders."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

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


def spy(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[Any]:
    """Wrap the function ``owner.name`` for the rest of the test: each call first notes its
    first argument, then runs the original unchanged. Returns the notes, in call order, so a
    test can count or inspect the calls a cheaper path no longer makes."""
    seen: list[Any] = []
    real = getattr(owner, name)

    def noting(*args: Any, **kwargs: Any) -> Any:
        seen.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, noting)
    return seen
