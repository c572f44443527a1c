"""Shared fixtures and builders of the state-machine skill tests (imported by the others).

Every test with a model talks to the scripted OpenAI-compatible server through the real
``openai`` client (``OpenAIChatModel``); tools run through a real arbiter.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph.llm import OpenAIChatModel
from stargraph.skills.machine import MachineRuntime, SkillSpec, load_skillspec, parse_skillspec
from stargraph.testing import Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolRegistry, builtin_tools, llm_name_for, tool

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "skillspecs" / "build_feature.json"
MEMORY = "choir.memory.query@1.0.0"
MEMORY_FN = llm_name_for(MEMORY)
WRITE_FN = llm_name_for("choir.fs.write@1.0.0")
READ_FN = llm_name_for("choir.fs.read@1.0.0")
QUERIES: list[str] = []
"""Every time the memory tool body ran, its query."""


@tool(id=MEMORY, side_effect="read")
def memory_query(query: str) -> str:
    """Search the agent's memory."""
    QUERIES.append(query)
    return f"memory has nothing about {query}"


@functools.cache
def registry() -> ToolRegistry:
    """The test tool registry: the memory tool plus the built-ins (choir.fs.* ...)."""
    return ToolRegistry.build(builtins=[memory_query, *builtin_tools()])


def example_spec() -> SkillSpec:
    """The seed's ``build_feature`` example, loaded from examples/skillspecs."""
    return load_skillspec(EXAMPLE, tools=registry())


def example_doc() -> dict[str, Any]:
    """A deep copy of the example document, to break in tests."""
    return copy.deepcopy(json.loads(EXAMPLE.read_text(encoding="utf-8")))


def small_spec(**changes: Any) -> SkillSpec:
    """A two-state spec: ``work`` (memory tool; ``complete`` -> ``done``) and ``done``."""
    doc: dict[str, Any] = {
        "name": "small",
        "description": "A small skill.",
        "initial_state": "work",
        "input_schema": {"type": "object"},
        "output_schema": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
        },
        "states": {
            "work": {
                "objective": "Do the work.",
                "allowed_tools": [MEMORY],
                "transitions": [{"on": "complete", "to": "done"}],
            },
            "done": {"objective": "Report the answer.", "terminal": True},
        },
        "max_steps": 6,
        "interruptible": True,
    }
    doc.update(changes)
    return parse_skillspec(doc, tools=registry())


def call(name: str, args: dict[str, Any] | None = None) -> Reply:
    """A reply proposing one function call."""
    return Reply.tool_calls([(name, args or {})])


def finish(**output: Any) -> Reply:
    """A reply calling ``finish`` with ``output``."""
    return call("finish", output)


HAPPY_PATH = [
    call(MEMORY_FN, {"query": "login page"}),
    call("complete"),
    call("complete"),
    call("complete"),
    call("complete"),
    finish(summary="added the login page", files_changed=[]),
]
"""The scripted model's answers that take ``build_feature`` from understand to done."""


@pytest.fixture(autouse=True)
def _reset() -> None:
    QUERIES.clear()


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    """A started scripted OpenAI-compatible server; closed after the test."""
    with ScriptedOpenAIServer() as srv:
        yield srv


@pytest.fixture
def chat(server: ScriptedOpenAIServer) -> Iterator[OpenAIChatModel]:
    """The real openai client against the scripted server."""
    model = OpenAIChatModel(
        "gpt-test", base_url=server.base_url, api_key="sk-test", timeout=5.0, max_retries=0
    )
    yield model
    model.close()


@pytest.fixture
def arbiter(tmp_path: Path) -> Iterator[Arbiter]:
    """A real arbiter over :func:`registry`, its workspace in ``tmp_path``."""
    root = tmp_path / "ws"
    root.mkdir()
    with Arbiter(registry(), workspace=root) as arb:
        yield arb


@pytest.fixture
def runtime(chat: OpenAIChatModel, arbiter: Arbiter) -> MachineRuntime:
    """A runtime for session ``s-1`` with the example spec registered."""
    return MachineRuntime(
        model=chat, arbiter=arbiter, skills=[example_spec()], session="s-1", context="Be terse."
    )


def test_helpers_load_the_example() -> None:
    assert example_spec().name == "build_feature"
