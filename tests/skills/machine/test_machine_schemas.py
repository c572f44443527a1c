"""Nested schemas with a prompt stack: rows C1-C8, against the scripted OpenAI server."""

# Fixtures are imported from test_machine_helpers (no conftest here) and then requested as
# arguments, which pyflakes reads as redefinitions.
# ruff: noqa: F811

from __future__ import annotations

import copy
from typing import Any

import pytest

from stargraph.errors import SkillValidationError
from stargraph.llm import ChatMessage, OpenAIChatModel
from stargraph.skills import CHOIR_NESTING, NestingProfile
from stargraph.skills.machine import (
    PromptBuilder,
    PromptLevel,
    SchemaLibrary,
    SchemaSession,
    render,
)
from stargraph.testing import RecordedRequest, ScriptedOpenAIServer
from stargraph.tools import Arbiter
from tests.skills.machine.test_machine_helpers import (  # noqa: F401 -- fixtures
    MEMORY,
    MEMORY_FN,
    _reset,
    arbiter,
    call,
    chat,
    server,
)

MAIN: dict[str, Any] = {
    "name": "main",
    "prompt": "You are the agent's main loop.",
    "initial_state": "listen",
    "max_steps": 4,
    "states": {
        "listen": {
            "prompt": "Understand the user's request.",
            "transitions": [
                {"on": "delegate", "to": "research", "description": "The request needs research."},
                {"on": "answer", "to": "reply", "description": "You can answer directly."},
            ],
        },
        "research": {
            "prompt": "Have the question researched.",
            "spawns": [
                {
                    "schema": "research",
                    "description": "Research the question.",
                    "exits": {"found": "complete", "gave_up": "fail"},
                }
            ],
            "transitions": [
                {"on": "complete", "to": "reply", "description": "Research found an answer."},
                {"on": "fail", "to": "reply", "description": "Research gave up."},
            ],
        },
        "reply": {"prompt": "Reply to the user.", "terminal": True},
    },
}
RESEARCH: dict[str, Any] = {
    "name": "research",
    "prompt": "Research a question.",
    "initial_state": "plan",
    "max_steps": 3,
    "states": {
        "plan": {
            "prompt": "Decide what to look up.",
            "spawns": [
                {
                    "schema": "search",
                    "description": "Search memory.",
                    "exits": {
                        "hit": "found_it",
                        "miss": "give_up",
                        "max_steps_exceeded": "give_up",
                    },
                }
            ],
            "transitions": [
                {"on": "found_it", "to": "found", "description": "The answer is known."},
                {"on": "give_up", "to": "gave_up", "description": "Nothing to find."},
            ],
        },
        "found": {"terminal": True},
        "gave_up": {"terminal": True},
    },
}
SEARCH: dict[str, Any] = {
    "name": "search",
    "prompt": "Search the memory once.",
    "initial_state": "query",
    "max_steps": 2,
    "states": {
        "query": {
            "prompt": "Query the memory tool, then say hit or miss.",
            "tools": [MEMORY],
            "transitions": [
                {"on": "hit", "to": "hit", "description": "The memory had it."},
                {"on": "miss", "to": "miss", "description": "The memory did not."},
            ],
        },
        "hit": {"terminal": True},
        "miss": {"terminal": True},
    },
}
FOCUS: dict[str, Any] = {
    "name": "focus",
    "prompt": "Answer in one word.",
    "initial_state": "answer",
    "max_steps": 2,
    "states": {
        "answer": {
            "prompt": "Give the word.",
            "transitions": [{"on": "said", "to": "end", "description": "Said it."}],
        },
        "end": {"terminal": True},
    },
}
DOWN_TO_SEARCH = [
    call("delegate"),
    call("spawn_research"),
    call("spawn_search"),
    call(MEMORY_FN, {"query": "capital of France"}),
    call("hit"),
]


def _library(*extra: dict[str, Any]) -> SchemaLibrary:
    return SchemaLibrary.build([MAIN, RESEARCH, SEARCH, *extra])


def _session(chat: OpenAIChatModel, arbiter: Arbiter, **kw: Any) -> SchemaSession:
    return SchemaSession(_library(FOCUS), model=chat, arbiter=arbiter, **kw)


def _offered(request: RecordedRequest) -> list[str]:
    assert request.body is not None
    return [t["function"]["name"] for t in request.body.get("tools", [])]


def _text(request: RecordedRequest) -> str:
    return render([ChatMessage.model_validate(m) for m in request.messages])


def test_C1_schema_is_prompt_states_guard_and_states_carry_described_moves(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    broken = copy.deepcopy(SEARCH)
    del broken["max_steps"]
    with pytest.raises(SkillValidationError, match=r"schemas#/0/max_steps"):
        SchemaLibrary.build([broken])
    library = _library()
    state = library.schemas["search"].states["query"]
    assert (state.prompt, state.tools) == (
        "Query the memory tool, then say hit or miss.",
        (MEMORY,),
    )
    assert library.schemas["research"].states["plan"].spawns[0].schema_name == "search"
    server.set_script(DOWN_TO_SEARCH)
    _session(chat, arbiter).send("What is the capital of France?")
    body = server.chat_requests[3].body
    assert body is not None
    described = {t["function"]["name"]: t["function"]["description"] for t in body["tools"]}
    assert described == {
        MEMORY_FN: "Search the agent's memory.",
        "hit": "The memory had it.",
        "miss": "The memory did not.",
    }
    spawn = server.chat_requests[1].body
    assert spawn is not None
    assert [t["function"]["description"] for t in spawn["tools"]][-1] == "Research the question."


PINNED = """\
[system]
You are Choir.

[system]
## Schema: main
You are the agent's main loop.
### State: research
Have the question researched.

[system]
## Schema: research
Research a question.
### State: plan
Decide what to look up.

[system]
## Schema: search
Search the memory once.
### State: query
Query the memory tool, then say hit or miss.

[user]
What is the capital of France?

[system]
## Execution context
{
  "notes": [],
  "stack": [
    "main:research",
    "research:plan",
    "search:query"
  ],
  "steps_left": 2
}"""


def test_C2_three_level_prompt_is_master_levels_top_down_user_context(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    server.set_script(DOWN_TO_SEARCH)
    session = _session(chat, arbiter, builder=PromptBuilder(master="You are Choir."))
    final = session.send("What is the capital of France?")
    assert (final.status, final.reason) == ("exited", "reply")
    assert _text(server.chat_requests[3]) == PINNED


def test_C3_tools_and_transitions_come_only_from_the_innermost_level(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    server.set_script(DOWN_TO_SEARCH)
    _session(chat, arbiter).send("q")
    # A spawning state offers its spawns, not the events its child's exit fires (C5).
    assert [_offered(r) for r in server.chat_requests] == [
        ["delegate", "answer"],
        ["spawn_research"],
        ["spawn_search"],
        [MEMORY_FN, "hit", "miss"],
        [MEMORY_FN, "hit", "miss"],
    ]


def test_C4_masks_hide_ancestor_prompts_and_positions_are_configurable(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    research = copy.deepcopy(RESEARCH)
    research["mask"] = ["state"]
    library = SchemaLibrary.build([MAIN, research, SEARCH])
    builder = PromptBuilder(
        master="M",
        order=("master", "user", "levels", "context"),
        masks={"main": ("schema", "state")},
    )
    server.set_script(DOWN_TO_SEARCH)
    SchemaSession(library, model=chat, arbiter=arbiter, builder=builder).send("U")
    messages = server.chat_requests[3].messages
    assert [m["content"].split("\n")[0] for m in messages] == [
        "M",
        "U",
        "## Schema: research",
        "## Schema: search",
        "## Execution context",
    ]
    assert messages[2]["content"] == "## Schema: research\nResearch a question."
    # The innermost level is never masked: it holds the current objective.
    level = PromptLevel(schema_name="x", state="s", state_prompt="do it", mask=("schema", "state"))
    assert builder.level_text(level, innermost=True) == "## Schema: x\n### State: s\ndo it"


def test_C5_parent_state_completes_only_when_the_child_exits(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    server.set_script(DOWN_TO_SEARCH)
    final = _session(chat, arbiter).send("q")
    stacks = [r.messages[-1]["content"] for r in server.chat_requests]
    # While the children run, main stays in its spawning state.
    assert all('"main:research"' in s for s in stacks[1:])
    moves = [(e["kind"], e.get("schema"), e.get("on") or e.get("status")) for e in final.log]
    assert moves[-6:] == [
        ("transition", "search", "hit"),
        ("exit", "search", "hit"),
        ("transition", "research", "found_it"),
        ("exit", "research", "found"),
        ("transition", "main", "complete"),
        ("exit", "main", "reply"),
    ]


def test_C5_a_spawning_state_cannot_be_completed_without_running_the_child(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    # The model tries to fire 'complete' (which only research's exit maps to) before it has
    # spawned research: refused, nothing moves, and the run goes on through the child.
    server.set_script([call("delegate"), call("complete"), *DOWN_TO_SEARCH[1:]])
    final = _session(chat, arbiter).send("q")
    rejected = [e for e in final.log if e["kind"] == "rejected"]
    assert [(e["code"], e["proposed"], e["state"]) for e in rejected] == [
        ("awaiting_child", "complete", "research")
    ]
    assert rejected[0]["valid_transitions"] == []
    moves = [(e["kind"], e.get("schema"), e.get("on") or e.get("status")) for e in final.log]
    main_done = moves.index(("transition", "main", "complete"))
    assert moves.index(("exit", "research", "found")) < main_done
    assert (final.status, final.reason) == ("exited", "reply")


def test_C5_the_childs_exit_status_picks_the_parents_event(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    # The miss path: every mapped event is the parent state's *second* transition, so a
    # parent that took its first transition whatever the child's status would end in
    # found/complete instead.
    server.set_script([*DOWN_TO_SEARCH[:4], call("miss")])
    final = _session(chat, arbiter).send("q")
    moves = [
        (e["kind"], e.get("schema"), e.get("on") or e.get("status"), e.get("to"))
        for e in final.log
        if e["kind"] in ("transition", "exit")
    ]
    assert moves[-6:] == [
        ("transition", "search", "miss", "miss"),
        ("exit", "search", "miss", None),
        ("transition", "research", "give_up", "gave_up"),
        ("exit", "research", "gave_up", None),
        ("transition", "main", "fail", "reply"),
        ("exit", "main", "reply", None),
    ]
    assert (final.status, final.reason) == ("exited", "reply")
    assert len(server.chat_requests) == 5  # the parents decided nothing themselves


def test_A17_choir_profile_refuses_a_spawned_schema_that_spawns(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    # main (the loop) -> research is depth 1; research -> search would be a skill starting
    # a skill.
    with pytest.raises(SkillValidationError) as info:
        SchemaLibrary.build([MAIN, RESEARCH, SEARCH], nesting=CHOIR_NESTING)
    assert [p.pointer for p in info.value.problems] == ["schemas#/main"]
    assert "spawn chain main -> research -> search" in str(info.value)
    assert "a skill cannot start another skill" in str(info.value)
    flat = copy.deepcopy(RESEARCH)
    flat["states"]["plan"] = {
        "prompt": "Decide.",
        "transitions": RESEARCH["states"]["plan"]["transitions"],
    }
    library = SchemaLibrary.build([MAIN, flat], nesting=CHOIR_NESTING)
    server.set_script([call("delegate"), call("spawn_research"), call("give_up")])
    final = SchemaSession(library, model=chat, arbiter=arbiter).send("q")
    assert (final.status, final.reason) == ("exited", "reply")
    # The default profile allows the three levels; a depth-2 profile too.
    SchemaLibrary.build([MAIN, RESEARCH, SEARCH], nesting=NestingProfile(max_depth=2))


def test_C6_every_level_is_bounded_exit_to_parent_or_hand_back_to_user(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    # search (max_steps 2) never decides: it exits max_steps_exceeded -> research gives up.
    server.set_script([*DOWN_TO_SEARCH[:4], call(MEMORY_FN, {"query": "again"})])
    final = _session(chat, arbiter).send("q")
    assert ("exit", "search", "max_steps_exceeded") in [
        (e["kind"], e.get("schema"), e.get("status")) for e in final.log
    ]
    assert (final.status, final.reason) == ("exited", "reply")
    assert len(server.chat_requests) == 5
    # At the root, exhaustion hands control back to the user.
    server.set_script(lambda _: call("nonsense_but_valid_name"))
    lazy = copy.deepcopy(MAIN)
    lazy["max_steps"] = 2
    session = SchemaSession(
        SchemaLibrary.build([lazy, RESEARCH, SEARCH]), model=chat, arbiter=arbiter, retry_budget=5
    )
    yielded = session.send("q")
    assert (yielded.status, yielded.reason) == ("yielded", "max_steps_exceeded")
    assert yielded.llm_steps == 2


def test_C7_only_declared_sub_schemas_spawn_and_cycles_fail_compile(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    server.set_script([call("delegate"), call("spawn_search"), *DOWN_TO_SEARCH[1:]])
    final = _session(chat, arbiter).send("q")
    rejected = [e for e in final.log if e["kind"] == "rejected"]
    assert [(e["code"], e["proposed"]) for e in rejected] == [
        ("spawn_not_declared", "spawn_search")
    ]
    assert final.status == "exited"
    looping = copy.deepcopy(SEARCH)
    looping["states"]["query"]["spawns"] = [{"schema": "main", "exits": {"reply": "hit"}}]
    with pytest.raises(SkillValidationError) as info:
        SchemaLibrary.build([MAIN, RESEARCH, looping])
    assert "spawn cycle: main -> research -> search -> main" in str(info.value)


def test_C8_root_loop_is_a_schema_hot_swapped_by_a_user_command(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    session = _session(chat, arbiter)
    server.set_script([call("answer"), call("said")])
    first = session.send("hello")
    assert (first.status, first.reason) == ("exited", "reply")
    session.send("/loop focus")
    assert len(server.chat_requests) == 1  # the command never reached the model
    second = session.send("hello again")
    assert (second.status, second.reason) == ("exited", "end")
    assert "## Schema: focus" in server.chat_requests[1].messages[0]["content"]
    kinds = [e["kind"] for e in session.log]
    assert kinds == ["turn", "transition", "exit", "command", "turn", "transition", "exit"]
    assert session.log[3] == {
        "kind": "command",
        "command": "/loop focus",
        "from": "main",
        "to": "focus",
    }
    with pytest.raises(SkillValidationError, match="unknown command"):
        session.send("/loop nowhere")
