"""The arbiter tells the caller the truth: the allowlist is checked before the arguments,
an unknown tool is named as it was asked for in the error and in the commit log, and a
directory that was briefly not one is not reported as "not a directory"."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stargraph.errors import ToolArgumentError, ToolNotAllowedError
from stargraph.tools import Arbiter, ToolCall, Workspace, failure_of, llm_name_for, tool

ArbiterFactory = Callable[..., Arbiter]


@tool(id="demo.write@1.0.0", side_effect="write")
def write(path: str, text: str) -> str:
    """Write a note."""
    return f"wrote {len(text)} characters to {path}"


@tool(id="demo.calc@1.0.0")
def calc(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    return expression


def test_issue47_a_forbidden_tool_is_refused_as_forbidden_whatever_its_arguments(
    make_arbiter: ArbiterFactory,
) -> None:
    arbiter = make_arbiter(write, calc)
    for args in ({}, {"path": 3}, {"path": "a", "text": "b", "extra": 1}):
        call = ToolCall(tool="demo.write", args=args, allowed=("demo.calc",), node="n")
        with pytest.raises(ToolNotAllowedError) as caught:
            arbiter.dispatch(call)
        assert failure_of(caught.value).code == "tool_not_allowed"
    raw = ToolCall.from_openai(
        {"id": "c1", "name": "demo__write__v1_0_0", "arguments": "{oops"},
        allowed=("demo.calc",),
        strict=False,
    )
    with pytest.raises(ToolNotAllowedError):
        arbiter.dispatch(raw)
    statuses = [(r.tool, r.status) for r in arbiter.commit_log.records()]
    assert statuses == [("demo.write@1.0.0", "denied")] * 4


def test_issue47_an_allowed_tool_with_bad_arguments_is_still_told_to_fix_them(
    make_arbiter: ArbiterFactory,
) -> None:
    arbiter = make_arbiter(write, calc)
    call = ToolCall(tool="demo.write", args={"path": "a"}, allowed=("demo.write",))
    with pytest.raises(ToolArgumentError) as caught:
        arbiter.dispatch(call)
    assert failure_of(caught.value).code == "invalid_arguments"


def test_issue47_an_unknown_tool_has_one_name_in_the_error_and_the_commit_log(
    make_arbiter: ArbiterFactory,
) -> None:
    arbiter = make_arbiter(calc)
    ghost = llm_name_for("demo.calc@9.0.0")  # looks like ours: a version not loaded
    with pytest.raises(ToolArgumentError) as caught:
        arbiter.dispatch(ToolCall(tool=ghost, allowed=("demo.calc",)))
    failure = failure_of(caught.value)
    assert failure.code == "unknown_tool"
    assert failure.tool == ghost
    assert "version '9.0.0' is not loaded" in failure.message
    assert [r.tool for r in arbiter.commit_log.records()] == [ghost]


def test_issue47_a_directory_that_was_briefly_not_one_is_walked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Workspace.at(tmp_path / "ws")
    (ws.root / "d").mkdir()
    (ws.root / "d" / "f.txt").write_text("inside")
    real_open = os.open
    raised: list[str] = []

    def racing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        # The first look at "d" finds a file there (ENOTDIR), as when a file is swapped for
        # the directory between the open and the stat that follows it.
        if path == "d" and flags & os.O_DIRECTORY and not raised:
            raised.append(path)
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", racing_open)
    assert ws.read_bytes("d/f.txt") == b"inside"
    assert raised == ["d"]
