"""Edge and core lanes (B16) and per-lane working memory (B17).

The lanes run real SkillSpecs against the scripted OpenAI-compatible server (real ``openai``
client), over one real arbiter.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph.errors import CompileError, LaneBusyError, SkillValidationError, ToolError
from stargraph.llm import OpenAIChatModel
from stargraph.skills.machine import (
    CORE_LANE_MACHINE,
    EDGE_LANE_MACHINE,
    CoreJobLauncher,
    CoreJobStart,
    LaneMachine,
    LaneSession,
    LaneTransitionError,
    MachineRuntime,
    WorkingMemory,
    parse_skillspec,
    validate_machine,
)
from stargraph.skills.machine._lanes import machine_shape
from stargraph.skills.machine._memory import DEFAULT_WINDOW
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import (
    Arbiter,
    PythonTool,
    ToolCall,
    ToolContext,
    ToolRegistry,
    builtin_tools,
    llm_name_for,
    tool,
)
from tests.skills.machine.test_machine_helpers import call, finish, memory_query

START_JOB_FN = llm_name_for(CoreJobLauncher.TOOL_ID)
MEET_FN = llm_name_for("lane.meet@1.0.0")


def exposure_tools() -> list[PythonTool]:
    """One tool per exposure value, each answering with its own name."""
    out = []
    for exposure in ("edge", "core", "both", "none"):

        @tool(id=f"lane.show_{exposure}@1.0.0", exposure=exposure)
        def show(ctx: ToolContext) -> str:
            """Report something."""
            return f"result of {ctx.tool}"

        out.append(show)
    return out


@tool(id="lane.broken@1.0.0")
def broken() -> str:
    """Always fails."""
    raise ValueError("broken on purpose")


class Meeting:
    """A two-party rendezvous: both lanes must be inside the ``lane.meet`` tool at once."""

    def __init__(self) -> None:
        self.session: LaneSession | None = None
        self.seen: list[tuple[str, str]] = []
        self.lanes: list[str] = []
        self.barrier = threading.Barrier(2, action=self._snapshot, timeout=10)

        @tool(id="lane.meet@1.0.0", side_effect="read")
        def meet(ctx: ToolContext) -> str:
            """Wait for the other lane."""
            self.lanes.append(ctx.lane)
            self.barrier.wait()
            return f"{ctx.lane} met the other lane"

        self.tool = meet

    def _snapshot(self) -> None:
        assert self.session is not None
        self.seen = [(name, lane.state) for name, lane in self.session.lanes.items()]


def spec(name: str, allowed: list[str], key: str) -> Any:
    return parse_skillspec(
        {
            "name": name,
            "description": f"The {name} skill.",
            "initial_state": "work",
            "input_schema": {"type": "object"},
            "output_schema": {
                "type": "object",
                "properties": {key: {"type": "string"}},
                "required": [key],
            },
            "states": {
                "work": {
                    "objective": f"Do the {name} work.",
                    "allowed_tools": allowed,
                    "transitions": [{"on": "complete", "to": "done"}],
                },
                "done": {"objective": "Report.", "terminal": True},
            },
            "max_steps": 8,
            "interruptible": True,
        }
    )


def _context(request: RecordedRequest) -> dict[str, Any]:
    text = request.messages[-1]["content"]
    context: dict[str, Any] = json.loads(text.split("\n", 1)[1])
    return context


class LaneScript:
    """Answers each request by (skill, llm_step): the lanes interleave freely."""

    def __init__(self, plan: dict[str, list[Reply]]) -> None:
        self.plan = plan

    def __call__(self, request: RecordedRequest) -> Reply:
        context = _context(request)
        step: int = context["llm_step"]
        return self.plan[context["skill"]][step - 1]


@pytest.fixture
def meeting() -> Meeting:
    return Meeting()


@pytest.fixture
def launcher() -> CoreJobLauncher:
    return CoreJobLauncher()


@pytest.fixture
def arbiter(tmp_path: Path, meeting: Meeting, launcher: CoreJobLauncher) -> Iterator[Arbiter]:
    registry = ToolRegistry.build(
        builtins=[
            memory_query,
            *builtin_tools(),
            launcher.tool,
            meeting.tool,
            broken,
            *exposure_tools(),
        ]
    )
    root = tmp_path / "ws"
    root.mkdir()
    with Arbiter(registry, workspace=root) as arb:
        yield arb


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as srv:
        yield srv


@pytest.fixture
def chat(server: ScriptedOpenAIServer) -> Iterator[OpenAIChatModel]:
    model = OpenAIChatModel(
        "gpt-test", base_url=server.base_url, api_key="sk-test", timeout=10.0, max_retries=0
    )
    yield model
    model.close()


@pytest.fixture
def session(
    chat: OpenAIChatModel, arbiter: Arbiter, launcher: CoreJobLauncher, meeting: Meeting
) -> Iterator[LaneSession]:
    skills = [
        spec("edge_chat", ["core.start_job", "lane.meet"], "reply"),
        spec("core_job", ["lane.meet", "lane.show_edge", "lane.show_core"], "result"),
    ]
    with LaneSession(
        model=chat,
        arbiter=arbiter,
        skills=skills,
        session="s-9",
        identity="I am Choir.",
        systems={"edge": "You talk to the user.", "core": "You run long jobs."},
        launcher=launcher,
    ) as lanes:
        meeting.session = lanes
        yield lanes


def test_B16_edge_and_core_lanes_run_concurrently(
    server: ScriptedOpenAIServer, session: LaneSession, arbiter: Arbiter, meeting: Meeting
) -> None:
    server.set_script(
        LaneScript(
            {
                "edge_chat": [
                    call(START_JOB_FN, {"skill": "core_job", "input": {"task": "index"}}),
                    call(MEET_FN),
                    call("complete"),
                    finish(reply="indexing started"),
                ],
                "core_job": [
                    call(MEET_FN),
                    Reply.tool_calls(
                        [(llm_name_for(f"lane.show_{e}@1.0.0"), {}) for e in ("edge", "core")]
                    ),
                    call("complete"),
                    finish(result="indexed"),
                ],
            }
        )
    )
    edge_run = session.start("edge", "edge_chat", user="Please index the repo.")
    assert edge_run.result().output == {"reply": "indexing started"}
    session.wait()
    # Both lanes were inside a tool at the same moment: two concurrent runs.
    assert sorted(meeting.lanes) == ["core", "edge"]
    assert dict(meeting.seen) == {"edge": "WAITING_TOOL", "core": "WAITING_TOOL"}
    # The core job started from the edge lane's tool call; it ran on the core lane.
    [job] = session.jobs
    assert (job.skill, job.input, job.origin_lane) == ("core_job", {"task": "index"}, "edge")
    [core_result] = session.core.results
    assert (core_result.status, core_result.output) == ("done", {"result": "indexed"})
    assert core_result.run_id == job.job_id
    # One arbiter, so one lock manager and one hash-chained commit log for both lanes.
    records = arbiter.commit_log.records()
    assert arbiter.commit_log.verify_chain() is None
    calls = {(r.lane, r.tool) for r in records if r.status == "success"}
    assert ("edge", "core.start_job@1.0.0") in calls
    assert ("edge", "lane.meet@1.0.0") in calls
    assert ("core", "lane.meet@1.0.0") in calls
    assert session.runtime.arbiter is arbiter
    assert arbiter.locks.snapshot() == {}
    # Each lane walked its own lane state machine.
    edge_moves = [m.on for m in session.edge.machine.history]
    core_moves = [m.on for m in session.core.machine.history]
    assert edge_moves[0] == "user_message"
    assert edge_moves[-1] == "reply"
    assert core_moves[0] == "job_start"
    assert core_moves[-1] == "job_done"
    assert "WAITING_TOOL" in session.edge.machine.visited
    assert "WAITING_TOOL" in session.core.machine.visited
    assert session.edge.state == session.core.state == "IDLE"
    # The core lane's prompt carries the pinned CoreJobStart in its memory.
    core_first = next(r for r in server.chat_requests if _context(r)["skill"] == "core_job")
    system = core_first.messages[0]["content"]
    assert f"CoreJobStart {job.job_id}: core_job" in system
    # Exposure routed the core lane's tool results into the lane views.
    edge_tools = [e.data.get("tool") for e in session.edge.memory.events]
    core_tools = [e.data.get("tool") for e in session.core.memory.events]
    assert "lane.show_edge@1.0.0" in edge_tools
    assert "lane.show_edge@1.0.0" not in core_tools
    assert "lane.show_core@1.0.0" in core_tools
    assert "lane.show_core@1.0.0" not in edge_tools
    assert "core.start_job@1.0.0" in edge_tools
    assert "core.start_job@1.0.0" not in core_tools


def test_B16_exposure_routes_results_to_lane_views(session: LaneSession, arbiter: Arbiter) -> None:
    for exposure in ("edge", "core", "both", "none"):
        arbiter.dispatch(ToolCall(tool=f"lane.show_{exposure}", lane="core"))
    with pytest.raises(ToolError, match="broken on purpose"):
        arbiter.dispatch(ToolCall(tool="lane.broken", lane="edge"))
    seen = {
        name: [e.data["tool"] for e in lane.memory.events if e.kind == "tool_result"]
        for name, lane in session.lanes.items()
    }
    assert seen == {
        "edge": ["lane.show_edge@1.0.0", "lane.show_both@1.0.0", "lane.broken@1.0.0"],
        "core": ["lane.show_core@1.0.0", "lane.show_both@1.0.0"],
    }
    # The lane machines track each call: the lanes are back to IDLE... and were never busy.
    assert session.edge.state == session.core.state == "IDLE"


@pytest.mark.parametrize(
    ("lane", "hidden"),
    [("core", ("edge", "none")), ("edge", ("core", "none"))],
)
def test_B16_step_notes_never_show_a_lane_a_result_hidden_from_it(
    server: ScriptedOpenAIServer,
    chat: OpenAIChatModel,
    arbiter: Arbiter,
    lane: str,
    hidden: tuple[str, ...],
) -> None:
    # The skill's next prompt carries its tool results as step notes: a result whose
    # exposure leaves this lane out is named, with its status, but its summary is withheld.
    exposures = ("edge", "core", "both", "none")
    server.set_script(
        [
            Reply.tool_calls(
                [(llm_name_for(f"lane.show_{e}@1.0.0"), {}) for e in exposures]
                + [(llm_name_for("lane.broken@1.0.0"), {})]
            ),
            call("complete"),
            finish(result="shown"),
        ]
    )
    skill = spec("shower", [*(f"lane.show_{e}" for e in exposures), "lane.broken"], "result")
    runtime = MachineRuntime(model=chat, arbiter=arbiter, skills=[skill], session="s-4")
    result = runtime.run("shower", {}, lane=lane)
    assert result.status == "done"
    notes = _context(server.chat_requests[1])["notes"]
    views = {n["data"]["tool"]: n["data"] for n in notes if n["kind"] == "tool_result"}
    for exposure in exposures:
        tool_id = f"lane.show_{exposure}@1.0.0"
        if exposure in hidden:
            assert views[tool_id] == {
                "tool": tool_id,
                "status": "success",
                "note": f"result withheld from {lane} lane",
            }
        else:
            assert views[tool_id]["summary"] == f"result of {tool_id}"
    # Errors always go back to the lane that made the call.
    assert views["lane.broken@1.0.0"]["status"] != "success"
    assert "broken on purpose" in str(views["lane.broken@1.0.0"]["summary"])
    # No request of this lane, and no event of the run, carries a hidden result's text.
    for request in server.chat_requests:
        text = json.dumps(request.body)
        for exposure in hidden:
            assert f"result of lane.show_{exposure}" not in text
    tool_events = [e.data for e in result.events if e.kind == "tool"]
    assert [e["tool"] for e in tool_events] == [
        *(f"lane.show_{e}@1.0.0" for e in exposures),
        "lane.broken@1.0.0",
    ]
    for exposure in hidden:
        assert f"result of lane.show_{exposure}" not in json.dumps(tool_events)


def test_B16_lane_machines_are_data_checked_by_the_one_validator(
    server: ScriptedOpenAIServer, session: LaneSession
) -> None:
    for data in (EDGE_LANE_MACHINE, CORE_LANE_MACHINE):
        assert validate_machine(machine_shape(data)) == []
        assert {"IDLE", "REASONING", "WAITING_TOOL"} <= set(data["states"])
    broken = {
        "initial_state": "IDLE",
        "states": {
            "IDLE": {"transitions": [{"on": "go", "to": "NOWHERE"}]},
            "ORPHAN": {"transitions": [{"on": "back", "to": "IDLE"}]},
        },
    }
    with pytest.raises(SkillValidationError) as caught:
        LaneMachine("edge", broken)
    messages = " | ".join(p.message for p in caught.value.problems)
    assert "unknown state 'NOWHERE'" in messages
    assert "no terminal state" in messages
    assert "unreachable states" in messages
    assert "ORPHAN" in messages
    machine = LaneMachine("core", CORE_LANE_MACHINE)
    with pytest.raises(LaneTransitionError, match="no transition on 'tool_result'"):
        machine.fire("tool_result")
    # A lane runs one skill at a time; its machine says REASONING meanwhile.
    gate = threading.Event()
    replies = {1: call("complete"), 2: finish(result="ok")}

    def script(request: RecordedRequest) -> Reply:
        gate.wait(10)
        return replies[_context(request)["llm_step"]]

    server.set_script(script)
    run = session.start("core", "core_job")
    assert session.core.state == "REASONING"
    with pytest.raises(LaneBusyError, match="lane 'core' already runs skill 'core_job'"):
        session.start("core", "core_job")
    gate.set()
    assert run.result().status == "done"
    session.wait()
    assert session.core.state == "IDLE"


def test_B17_working_memory_keeps_last_n_in_full_and_rolls_older_into_summary() -> None:
    memory = WorkingMemory("core", system="SYSTEM PROMPT", identity="I am Choir.")
    assert memory.window_size == DEFAULT_WINDOW == 50
    job = CoreJobStart(job_id="j-1", skill="core_job", input={"task": "index"})
    memory.append("user", "first question")
    memory.add_core_job_start(job)
    memory.append("user", "the latest question")
    for i in range(120):
        memory.append("assistant" if i % 2 else "tool_result", f"event {i}")
    # The window holds the last 50 events in full.
    assert len(memory.window) == 50
    assert [e.text for e in memory.window] == [f"event {i}" for i in range(70, 120)]
    # Older events rolled into the summary - except the pinned ones.
    kept = [(e.kind, e.text) for e in memory.kept]
    assert kept == [("core_job_start", job.text()), ("user", "the latest question")]
    assert "[1] user: first question" in memory.summary
    assert "[4] tool_result: event 0" in memory.summary
    assert "event 69" in memory.summary
    assert "event 70" not in memory.summary
    assert "latest question" not in memory.summary
    assert "CoreJobStart" not in memory.summary
    assert sorted(memory.rolled) == [1, *range(4, 74)]
    # System prompt and identity are never compacted.
    messages = memory.messages()
    assert messages[0]["role"] == "system"
    assert messages[0]["content"].startswith("SYSTEM PROMPT\n\n## Identity\nI am Choir.")
    assert "## Summary of earlier events" in messages[0]["content"]
    rendered = memory.render()
    assert (
        rendered.index("## Identity")
        < rendered.index("## Summary")
        < rendered.index("## Pinned")
        < rendered.index("## Recent events")
    )
    # A newer user message releases the old one, which then rolls; the job stays pinned.
    memory.append("user", "a newer question")
    assert [e.kind for e in memory.kept] == ["core_job_start"]
    assert "user: the latest question" in memory.summary
    assert memory.latest_user is not None
    assert memory.latest_user.text == "a newer question"
    for i in range(60):
        memory.append("assistant", f"more {i}")
    assert [e.text for e in memory.kept] == [job.text(), "a newer question"]


def test_B17_each_lane_has_its_own_memory_and_summary(session: LaneSession) -> None:
    small = {
        name: WorkingMemory(name, window=3, summarizer=lambda old, ev: f"{old}+{len(ev)}")
        for name in ("edge", "core")
    }
    for i in range(5):
        small["edge"].append("assistant", f"edge {i}")
    small["core"].append("assistant", "core 0")
    assert small["edge"].summary == "+1+1"
    assert small["core"].summary == ""
    assert session.edge.memory is not session.core.memory
    assert session.edge.memory.system == "You talk to the user."
    assert session.core.memory.system == "You run long jobs."
    assert session.edge.memory.window_size == session.core.memory.window_size == 50
    for bad in (0, -3, "50", True):
        with pytest.raises(CompileError) as info:
            WorkingMemory("edge", window=bad)  # type: ignore[arg-type]
        assert [p.pointer for p in info.value.problems] == ["/window"]
        assert f"window must be an int >= 1, got {bad!r}" in str(info.value)
    with pytest.raises(CompileError, match=r"/kind: .*\(got 'shout'\)"):
        small["edge"].append("shout", "hi")  # type: ignore[arg-type]
    assert small["edge"].append("note", "after a refused event").seq == 6
