"""Edge and core lanes: two concurrent runs over one arbiter, with lane state machines.

A :class:`LaneSession` runs SkillSpecs on an ``edge`` lane (talks to the user) and a ``core``
lane (long jobs) at the same time. Both lanes share one :class:`MachineRuntime` - so one chat
model, one :class:`~stargraph.tools.Arbiter` and through it one lock manager, one commit log
and one tool registry - and one skill registry. Each lane has:

* its own **lane state machine** (``IDLE -> REASONING -> WAITING_TOOL -> ...``), defined as
  data (:data:`EDGE_LANE_MACHINE`, :data:`CORE_LANE_MACHINE`) and validated by
  :func:`~stargraph.skills.machine.validate_machine` like any SkillSpec;
* its own :class:`~stargraph.skills.machine.WorkingMemory`, fed by the arbiter: every
  tool result goes to the lanes its ``exposure`` names (``edge``/``core``/``both``/``none``;
  a failure goes back to the calling lane only).

A core job starts from an edge-lane event: the edge model calls the ``core.start_job`` tool
(built by :class:`CoreJobLauncher`, registered like any tool, so it passes the arbiter's
pipeline). The session then records a pinned :class:`CoreJobStart` in both memories and
starts the core skill on the core lane while the edge skill keeps running.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import JsonValue

from stargraph._lifecycle import Closing
from stargraph.checkpoint import CheckpointStore
from stargraph.errors import (
    LaneBusyError,
    LaneTransitionError,
    SkillValidationError,
    ToolError,
    ToolNotAllowedError,
    WaitTimeoutError,
)
from stargraph.llm import ChatModel, RequestOptions
from stargraph.skills.machine._memory import DEFAULT_WINDOW, CoreJobStart, WorkingMemory
from stargraph.skills.machine._registry import SkillSpecRegistry
from stargraph.skills.machine._runtime import MachineResult, MachineRuntime, SkillRun
from stargraph.skills.machine._spec import SkillSpec
from stargraph.skills.machine._validate import MachineShape, StateShape, validate_machine
from stargraph.tools import Arbiter, PythonTool, ToolCall, ToolContext, ToolResult, tool

__all__ = [
    "CORE_LANE_MACHINE",
    "EDGE_LANE_MACHINE",
    "CoreJobLauncher",
    "Lane",
    "LaneMachine",
    "LaneSession",
    "LaneTransitionError",
]

EDGE: Final = "edge"
CORE: Final = "core"


def _lane_machine(name: str, start: str, end: str) -> Mapping[str, Any]:
    """The lane shape both lanes share: ``start`` begins reasoning, which may wait
    on tools and ends with ``end``, an error or a cancel; only an idle lane stops."""
    return {
        "name": name,
        "initial_state": "IDLE",
        "states": {
            "IDLE": {
                "transitions": [
                    {"on": start, "to": "REASONING"},
                    {"on": "stop", "to": "STOPPED"},
                ]
            },
            "REASONING": {
                "transitions": [
                    {"on": "tool_call", "to": "WAITING_TOOL"},
                    {"on": end, "to": "IDLE"},
                    {"on": "error", "to": "IDLE"},
                    {"on": "cancel", "to": "IDLE"},
                ]
            },
            "WAITING_TOOL": {
                "transitions": [
                    {"on": "tool_result", "to": "REASONING"},
                    {"on": "error", "to": "IDLE"},
                    {"on": "cancel", "to": "IDLE"},
                ]
            },
            "STOPPED": {"terminal": True},
        },
    }


EDGE_LANE_MACHINE: Final = _lane_machine("edge-lane", "user_message", "reply")
"""The edge lane: a user message starts reasoning, which ends in a reply."""

CORE_LANE_MACHINE: Final = _lane_machine("core-lane", "job_start", "job_done")
"""The core lane: a ``CoreJobStart`` starts reasoning, which ends when the job is done."""

_STARTS: Final = {EDGE: "user_message", CORE: "job_start"}
_ENDS: Final = {EDGE: "reply", CORE: "job_done"}


@dataclass(frozen=True, slots=True)
class LaneTransition:
    """One lane state machine transition."""

    lane: str
    src: str
    on: str
    dst: str


class LaneMachine:
    """A lane state machine, defined as data and validated by ``validate_machine``.

    ``data`` is ``{"initial_state", "states": {name: {"transitions": [{on, to}],
    "terminal"}}}``; an ill-formed machine raises :class:`SkillValidationError` listing every
    problem. :meth:`fire` moves it (thread safe); :attr:`history` keeps every move.
    """

    def __init__(self, lane: str, data: Mapping[str, Any], *, where: str = "") -> None:
        self.lane = lane
        self.shape = machine_shape(data, where=where or f"lane:{lane}#")
        problems = validate_machine(self.shape)
        if problems:
            raise SkillValidationError(problems, subject=f"lane machine {lane!r}")
        self.state = self.shape.initial
        self.history: list[LaneTransition] = []
        self.visited: list[str] = [self.state]
        self._lock = threading.Lock()

    def allowed(self) -> tuple[str, ...]:
        """Events valid in the current state."""
        return tuple(on for on, _ in self.shape.states[self.state].transitions)

    def fire(self, event: str) -> LaneTransition:
        """Take the transition on ``event``; :class:`LaneTransitionError` if there is none."""
        with self._lock:
            for on, to in self.shape.states[self.state].transitions:
                if on == event:
                    move = LaneTransition(self.lane, self.state, on, to)
                    self.state = to
                    self.history.append(move)
                    self.visited.append(to)
                    return move
            raise LaneTransitionError(
                f"lane {self.lane!r} in state {self.state!r} has no transition on "
                f"{event!r} (valid: {list(self.allowed())})"
            )

    def try_fire(self, event: str) -> LaneTransition | None:
        """:meth:`fire`, or ``None`` when the event is not valid now."""
        try:
            return self.fire(event)
        except LaneTransitionError:
            return None


def machine_shape(data: Mapping[str, Any], *, where: str = "") -> MachineShape:
    """The validator's view of a lane machine document (malformed parts become problems
    of :func:`validate_machine`: a missing state list is a machine without terminal)."""
    raw_states = data.get("states")
    states: dict[str, StateShape] = {}
    if isinstance(raw_states, Mapping):
        for name, found in raw_states.items():
            raw = found if isinstance(found, Mapping) else {}
            pairs = [
                (str(t.get("on")), str(t.get("to")))
                for t in raw.get("transitions", ())
                if isinstance(t, Mapping)
            ]
            states[str(name)] = StateShape(pairs, bool(raw.get("terminal", False)))
    return MachineShape(str(data.get("initial_state")), states, where=where)


class Lane:
    """One lane of a session: its name, state machine, working memory and current run."""

    def __init__(self, name: str, machine: LaneMachine, memory: WorkingMemory) -> None:
        self.name = name
        self.machine = machine
        self.memory = memory
        self.run: SkillRun | None = None
        self.watcher: threading.Thread | None = None
        self.results: list[MachineResult] = []
        self.errors: list[BaseException] = []

    @property
    def state(self) -> str:
        """The lane machine's current state."""
        return self.machine.state


class CoreJobLauncher:
    """Builds the ``core.start_job`` tool: the edge-lane event that starts a core job.

    Register :attr:`tool` in the tool registry, build the arbiter, then pass the launcher to
    :class:`LaneSession` (which binds it). The tool refuses calls from any lane but ``edge``
    and answers ``{status: "started", job_id, skill}`` (``exposure="edge"``).
    """

    TOOL_ID: Final = "core.start_job@1.0.0"

    def __init__(self) -> None:
        self._session: LaneSession | None = None
        launcher = self

        @tool(id=self.TOOL_ID, side_effect="write", exposure=EDGE)
        def start_job(
            skill: str,
            ctx: ToolContext,
            input: dict[str, Any] | None = None,
            reason: str = "",
        ) -> dict[str, Any]:
            """Start a long job on the core lane (runs while you keep talking to the user)."""
            return launcher._start(skill, dict(input or {}), reason, ctx)

        self.tool: PythonTool = start_job

    def bind(self, session: LaneSession) -> None:
        """Route the tool's calls to ``session``."""
        self._session = session

    def _start(
        self, skill: str, values: dict[str, Any], reason: str, ctx: ToolContext
    ) -> dict[str, Any]:
        if ctx.lane != EDGE:
            raise ToolNotAllowedError(
                f"core jobs start from the edge lane only (called from {ctx.lane!r}); offer "
                "core.start_job to edge-lane skills only"
            )
        if self._session is None:
            raise ToolError(
                "the core.start_job tool is not bound to a LaneSession; call "
                "launcher.bind(session) (LaneSession does it for its own launcher)"
            )
        job = self._session.start_core_job(skill, values, origin_call=ctx.call_id, reason=reason)
        return {"status": "started", "job_id": job.job_id, "skill": job.skill}


AfterCall = Callable[[ToolCall, ToolResult | None, ToolError | None], None]


class LaneSession(Closing):
    """An edge lane and a core lane running SkillSpecs concurrently.

    Both lanes run on one :class:`MachineRuntime` (one model, one arbiter: one lock manager,
    one commit log, one tool registry) with one skill registry. The session hooks the
    arbiter's ``before_call``/``after_call`` observers (chaining any already set, restored by
    :meth:`close`) to drive each lane's state machine and to route every tool result to the
    lanes its ``exposure`` allows. ``temperature`` and ``request``
    (:class:`~stargraph.llm.RequestOptions`) go to the runtime: every model call of both
    lanes.
    """

    def __init__(
        self,
        *,
        model: ChatModel,
        arbiter: Arbiter,
        skills: SkillSpecRegistry | Iterable[SkillSpec] = (),
        session: str = "session",
        context: str = "",
        identity: str = "",
        systems: Mapping[str, str] | None = None,
        window: int = DEFAULT_WINDOW,
        machines: Mapping[str, Mapping[str, Any]] | None = None,
        launcher: CoreJobLauncher | None = None,
        store: CheckpointStore | None = None,
        temperature: float | None = None,
        request: RequestOptions | None = None,
    ) -> None:
        self.session = session
        self.arbiter = arbiter
        self.runtime = MachineRuntime(
            model=model,
            arbiter=arbiter,
            skills=skills,
            session=session,
            context=context,
            store=store,
            temperature=temperature,
            request=request,
        )
        data = {EDGE: EDGE_LANE_MACHINE, CORE: CORE_LANE_MACHINE, **(machines or {})}
        systems = systems or {}
        self.lanes: dict[str, Lane] = {
            name: Lane(
                name,
                LaneMachine(name, data[name]),
                WorkingMemory(name, system=systems.get(name, ""), identity=identity, window=window),
            )
            for name in (EDGE, CORE)
        }
        self.jobs: list[CoreJobStart] = []
        self._watchers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._counter = 0
        self._before = arbiter.before_call
        self._after = arbiter.after_call
        arbiter.before_call = self._before_call
        arbiter.after_call = self._after_call
        if launcher is not None:
            launcher.bind(self)

    # ----------------------------------------------------------------------- lanes

    @property
    def edge(self) -> Lane:
        """The edge lane."""
        return self.lanes[EDGE]

    @property
    def core(self) -> Lane:
        """The core lane."""
        return self.lanes[CORE]

    def start(
        self,
        lane: str,
        skill: str | SkillSpec,
        input: Mapping[str, Any] | None = None,
        *,
        user: str | None = None,
        run_id: str | None = None,
    ) -> SkillRun:
        """Run ``skill`` on ``lane`` in the background; ``user`` is the user message that
        started it (edge). Fires the lane's start event; the end event fires when it ends."""
        target = self.lanes[lane]
        busy = target.run
        if busy is not None and not busy.done():
            raise LaneBusyError(
                f"lane {lane!r} already runs skill {busy.spec.name!r} (run {busy.run_id!r}); "
                "only one skill may be active per lane: wait for it or cancel it",
                run_id=busy.run_id,
            )
        if target.watcher is not None:
            target.watcher.join()  # the previous run's end event has fired: the lane is IDLE
        if user is not None:
            target.memory.append("user", user)
        target.machine.fire(_STARTS[lane])
        try:
            run = self.runtime.start(
                skill, input, lane=lane, memory=target.memory.render(), run_id=run_id
            )
        except BaseException:
            target.machine.try_fire("error")
            raise
        target.run = run
        watcher = threading.Thread(
            target=self._watch, args=(target, run), name=f"lane-{lane}-watch", daemon=True
        )
        target.watcher = watcher
        with self._lock:
            self._watchers.append(watcher)
        watcher.start()
        return run

    def start_core_job(
        self,
        skill: str,
        input: Mapping[str, Any] | None = None,
        *,
        origin_call: str | None = None,
        reason: str = "",
    ) -> CoreJobStart:
        """Start ``skill`` on the core lane from an edge-lane event; the :class:`CoreJobStart`
        is pinned in both lanes' memories."""
        with self._lock:
            self._counter += 1
            job_id = f"{self.session}/core-job/{self._counter}"
        job = CoreJobStart(
            job_id=job_id,
            skill=skill,
            input=_plain(dict(input or {})),
            origin_lane=EDGE,
            origin_call=origin_call,
            reason=reason,
        )
        self.core.memory.add_core_job_start(job)
        self.start(CORE, skill, input, run_id=job_id)
        self.edge.memory.add_core_job_start(job)
        self.jobs.append(job)
        return job

    def _watch(self, lane: Lane, run: SkillRun) -> None:
        try:
            result = run.result(timeout=None)
        except BaseException as exc:  # kept for wait(); the lane goes back to IDLE
            lane.errors.append(exc)
            lane.machine.try_fire("error")
            return
        lane.results.append(result)
        text = f"skill {result.skill} ended: {result.status}"
        if result.output is not None:
            text += " " + _json(result.output)
        lane.memory.append("assistant", text, run_id=result.run_id, status=result.status)
        event = {"done": _ENDS[lane.name], "cancelled": "cancel"}.get(result.status, "error")
        lane.machine.try_fire(event)

    def wait(self, timeout: float | None = 60.0) -> None:
        """Wait until every run started so far (and its bookkeeping) has ended.

        A run still going after ``timeout`` seconds raises
        :class:`~stargraph.errors.WaitTimeoutError` (a ``TimeoutError``) naming it.
        """
        while True:
            with self._lock:
                pending = [w for w in self._watchers if w.is_alive()]
            if not pending:
                return
            for watcher in pending:
                watcher.join(timeout)
                if watcher.is_alive():
                    raise WaitTimeoutError(
                        f"{watcher.name} still runs after {timeout}s (fix: wait again with a "
                        "longer timeout, or cancel the lane's skill)"
                    )

    def close(self, timeout: float | None = 60.0) -> None:
        """Wait for the runs, stop both lane machines and unhook the arbiter."""
        try:
            self.wait(timeout)
        finally:
            for lane in self.lanes.values():
                lane.machine.try_fire("stop")
            self.arbiter.before_call = self._before
            self.arbiter.after_call = self._after

    # ----------------------------------------------------------------------- arbiter hooks

    def _before_call(self, call: ToolCall) -> None:
        if self._before is not None:
            self._before(call)
        lane = self.lanes.get(call.lane)
        if lane is not None:
            lane.machine.try_fire("tool_call")

    def _after_call(
        self, call: ToolCall, result: ToolResult | None, error: ToolError | None
    ) -> None:
        if self._after is not None:
            self._after(call, result, error)
        lane = self.lanes.get(call.lane)
        if lane is not None:
            lane.machine.try_fire("tool_result")
        if result is None:
            if error is None:
                return
            result = ToolResult.from_error(error, call_id=call.call_id)
        self.route(result, caller=call.lane)

    def route(self, result: ToolResult, *, caller: str) -> list[str]:
        """Append ``result`` to every lane view its ``exposure`` allows; returns them."""
        return [
            name
            for name, lane in self.lanes.items()
            if lane.memory.add_tool_result(result, caller=caller)
        ]


def _json(value: Any) -> str:
    import orjson

    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _plain(value: Mapping[str, Any]) -> dict[str, JsonValue]:
    import orjson

    data: dict[str, JsonValue] = orjson.loads(orjson.dumps(dict(value)))
    return data
