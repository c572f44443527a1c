"""``MachineRuntime``: runs compiled SkillSpecs on lanes, one active skill per lane.

It owns what a session shares - the chat model, the tool arbiter (and so the commit log), a
:class:`MachineControl` for cancellation - and hands them to the compiled graphs as services,
so skill code never holds a tool handle of its own. ``start()`` runs a skill on a lane
in a background thread and returns a :class:`SkillRun`; a second start on a busy lane raises
:class:`~stargraph.errors.LaneBusyError`. Input is checked against ``input_schema`` before
anything runs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from stargraph.checkpoint import CheckpointStore
from stargraph.errors import InvalidInputError, LaneBusyError, UsageError, WaitTimeoutError
from stargraph.llm import ChatModel, RequestOptions
from stargraph.runtime import CompiledGraph
from stargraph.skills._services import options_config
from stargraph.skills.machine._compile import (
    DEFAULT_RETRY_BUDGET,
    MachineControl,
    MachineEvent,
    MachineState,
    skillspec_graph,
)
from stargraph.skills.machine._proposals import json_problems
from stargraph.skills.machine._registry import SkillSpecRegistry
from stargraph.skills.machine._spec import SkillSpec
from stargraph.tools import Arbiter

__all__ = ["CancelOutcome", "MachineResult", "MachineRuntime", "SkillRun"]

CancelOutcome = Literal["cancelled", "deferred", "not_running"]
"""What ``cancel()`` did: stops at the next step boundary, is deferred until a terminal state
(the skill is not interruptible), or there was nothing to cancel."""


# How a run whose last event is not a RunFinished (which carries its status) stopped.
_ENDS: Final = {"run_interrupted": "interrupted", "run_cancelled": "cancelled"}


@dataclass(frozen=True)
class MachineResult:
    """How a skill run ended."""

    run_id: str
    """The graph run's id."""
    skill: str
    """The skill's name."""
    status: str
    """``done``, ``error``, ``cancelled`` (``running`` only if the run was cut short)."""
    reason: str | None
    """``done``, ``retry_budget_exhausted``, ``max_steps_exceeded``, ``cancelled`` ..."""
    state: str
    """The last machine state."""
    output: Any
    """The validated output (``done``)."""
    llm_steps: int
    """LLM calls made."""
    transitions: tuple[dict[str, Any], ...]
    """Every transition ``{skill, from, to, on, step, ...}``."""
    events: tuple[MachineEvent, ...]
    """Every machine event, with lineage."""
    stopped_by: str | None
    """The rule that stopped the run (``machine/done``, ``machine/max_steps_exceeded`` ...)."""
    stream: tuple[Any, ...] = field(default=(), repr=False)
    """Every engine event of the run (``node_finished``, ``rule_decided`` ...)."""
    run_status: str = "done"
    """How the graph run ended: ``done`` (the machine reached ``finish``, its ``done`` rule)
    or ``halted`` (a limit, an error or a cancel stopped it; ``stopped_by`` names the rule)."""
    stop_reason: str | None = None
    """Why the rule ``stopped_by`` ended the run (``max_steps_exceeded`` ...)."""


class SkillRun:
    """A skill running on a lane: wait for it with :meth:`result`, stop it with
    :meth:`cancel`."""

    def __init__(self, runtime: MachineRuntime, spec: SkillSpec, lane: str, run_id: str) -> None:
        self.runtime = runtime
        self.spec = spec
        self.lane = lane
        self.run_id = run_id
        self._done = threading.Event()
        self._result: MachineResult | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def _run(self, app: CompiledGraph[MachineState], values: Mapping[str, Any] | None) -> None:
        try:
            # No start values: the run continues from its last committed step.
            stream = (
                app.resume_stream(self.run_id)
                if values is None
                else app.stream(dict(values), run_id=self.run_id)
            )
            events = tuple(stream)
            final = events[-1]
            state = getattr(final, "state", None) or {}
            self._result = MachineResult(
                run_id=self.run_id,
                skill=self.spec.name,
                status=str(state.get("status", "running")),
                reason=state.get("reason"),
                state=str(state.get("state", "")),
                output=state.get("output"),
                llm_steps=int(state.get("llm_steps", 0)),
                transitions=tuple(state.get("transitions", ())),
                events=tuple(MachineEvent.model_validate(e) for e in state.get("events", ())),
                stopped_by=getattr(final, "stopped_by", None),
                stream=events,
                run_status=str(getattr(final, "status", None) or _ENDS.get(final.kind, "running")),
                stop_reason=getattr(final, "stop_reason", None),
            )
        except BaseException as exc:  # handed to result(), never lost in the thread
            self._error = exc
        finally:
            self.runtime._release(self.lane)
            self._done.set()

    def done(self) -> bool:
        """Whether the run has ended."""
        return self._done.is_set()

    def result(self, timeout: float | None = 60.0) -> MachineResult:
        """Wait for the run; re-raise what it raised.

        After ``timeout`` seconds raises :class:`~stargraph.errors.WaitTimeoutError` (a
        ``TimeoutError``); the run goes on.
        """
        if not self._done.wait(timeout):
            raise WaitTimeoutError(
                f"skill {self.spec.name!r} on lane {self.lane!r} still runs after {timeout}s "
                "(fix: wait again with a longer timeout, or cancel() it)"
            )
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def cancel(self) -> CancelOutcome:
        """Stop at the next step boundary: see :meth:`MachineRuntime.cancel`."""
        return self.runtime.cancel(self.lane)


class MachineRuntime:
    """Runs SkillSpecs for one session: shared model, arbiter and cancellation control.

    ``temperature`` and ``request`` (:class:`~stargraph.llm.RequestOptions`: ``max_tokens``,
    ``seed`` ...) fix those fields of every model call the skills make, in place of a
    spec's own.
    """

    def __init__(
        self,
        *,
        model: ChatModel,
        arbiter: Arbiter,
        skills: SkillSpecRegistry | Iterable[SkillSpec] = (),
        session: str = "session",
        context: str = "",
        store: CheckpointStore | None = None,
        retry_budget: int = DEFAULT_RETRY_BUDGET,
        temperature: float | None = None,
        request: RequestOptions | None = None,
    ) -> None:
        # Checked now, not at the first run.
        options_config(temperature, request, subject="MachineRuntime")
        self.model = model
        self.temperature = temperature
        self.request = request
        self.arbiter = arbiter
        self.session = session
        self.context = context
        self.store = store
        self.retry_budget = retry_budget
        self.control = MachineControl()
        self.skills: dict[str, SkillSpec] = {s.name: s for s in skills}
        self._active: dict[str, SkillRun] = {}
        self._lock = threading.Lock()
        self._apps: dict[str, CompiledGraph[MachineState]] = {}
        self._counter = 0

    def skills_summary(self) -> str:
        """The summary of the skills this runtime may run, one ``- name: description`` line
        each (by name), that every step's system prompt carries after ``context``; empty
        when it runs none.

        The model learns what each skill is for from its description alone: never from its
        states or objectives, which reach the prompt only while that skill runs.
        """
        if not self.skills:
            return ""
        lines = [f"- {name}: {self.skills[name].description}" for name in sorted(self.skills)]
        return "## Skills you may run\n" + "\n".join(lines)

    def compiled(self, spec: SkillSpec) -> CompiledGraph[MachineState]:
        """The compiled graph of ``spec`` (cached), with this runtime's services."""
        app = self._apps.get(spec.name)
        if app is None:
            app = self._apps[spec.name] = skillspec_graph(
                spec,
                retry_budget=self.retry_budget,
                temperature=self.temperature,
                request=self.request,
            ).compile(
                services={
                    "model": self.model,
                    "arbiter": self.arbiter,
                    "machine.control": self.control,
                },
                store=self.store,
                max_steps=spec.max_steps + 2,
            )
        return app

    def active(self, lane: str) -> SkillRun | None:
        """The skill running on ``lane``, if any."""
        with self._lock:
            return self._active.get(lane)

    def start(
        self,
        skill: str | SkillSpec,
        input: Mapping[str, Any] | None = None,
        *,
        lane: str = "core",
        memory: str = "",
        run_id: str | None = None,
    ) -> SkillRun:
        """Start ``skill`` on ``lane`` in the background.

        Raises :class:`~stargraph.errors.LaneBusyError` if the lane runs a skill already and
        :class:`~stargraph.errors.InvalidInputError` if ``input`` fails ``input_schema``.
        """
        spec = self.skills[skill] if isinstance(skill, str) else skill
        values = dict(input or {})
        problems = json_problems(spec.input_schema, values, what="input")
        if problems:
            raise InvalidInputError(
                f"input of skill {spec.name!r} does not match its input_schema: "
                + "; ".join(problems)
                + " (fix: pass input that matches the skill's input_schema)"
            )
        app = self.compiled(spec)
        run = self._claim(spec, lane, run_id)
        start = {
            "input": values,
            "session": self.session,
            "lane": lane,
            "context": "\n\n".join(p for p in (self.context, self.skills_summary()) if p),
            "memory": memory,
        }
        return self._launch(run, app, start)

    def resume(self, skill: str | SkillSpec, run_id: str, *, lane: str = "core") -> SkillRun:
        """Continue the stored run ``run_id`` of ``skill`` on ``lane`` in the background,
        from its last committed step (what a crashed session's recovery does).

        Needs the runtime's checkpoint ``store``; the lane must be free
        (:class:`~stargraph.errors.LaneBusyError` otherwise).
        """
        spec = self.skills[skill] if isinstance(skill, str) else skill
        if self.store is None:
            raise UsageError(
                f"cannot resume run {run_id!r} of skill {spec.name!r}: this MachineRuntime "
                "has no checkpoint store; pass store=... to keep runs resumable"
            )
        app = self.compiled(spec)
        return self._launch(self._claim(spec, lane, run_id), app, None)

    def _claim(self, spec: SkillSpec, lane: str, run_id: str | None) -> SkillRun:
        """A run of ``spec`` holding ``lane``: one active skill per lane."""
        with self._lock:
            busy = self._active.get(lane)
            if busy is not None:
                raise LaneBusyError(
                    f"lane {lane!r} already runs skill {busy.spec.name!r} (run "
                    f"{busy.run_id!r}); only one skill may be active per lane: wait for it, "
                    "cancel it, or use another lane",
                    run_id=busy.run_id,
                )
            self._counter += 1
            run = SkillRun(self, spec, lane, run_id or f"{self.session}/{lane}/{self._counter}")
            self._active[lane] = run
            self.control.clear(lane)
        return run

    def _launch(
        self,
        run: SkillRun,
        app: CompiledGraph[MachineState],
        start: Mapping[str, Any] | None,
    ) -> SkillRun:
        thread = threading.Thread(
            target=run._run, args=(app, start), name=f"skill-{run.lane}", daemon=True
        )
        run._thread = thread
        thread.start()
        return run

    def run(
        self,
        skill: str | SkillSpec,
        input: Mapping[str, Any] | None = None,
        *,
        lane: str = "core",
        memory: str = "",
        timeout: float | None = 60.0,
    ) -> MachineResult:
        """:meth:`start` and wait for the result."""
        return self.start(skill, input, lane=lane, memory=memory).result(timeout)

    def cancel(self, lane: str) -> CancelOutcome:
        """Ask the skill on ``lane`` to stop at its next step boundary.

        An ``interruptible`` skill ends with status ``cancelled``; any other skill keeps
        running to a terminal state (the request is recorded as ``cancel_deferred``).
        """
        with self._lock:
            run = self._active.get(lane)
            if run is None:
                return "not_running"
            self.control.request_cancel(lane)
        return "cancelled" if run.spec.interruptible else "deferred"

    def _release(self, lane: str) -> None:
        with self._lock:
            self._active.pop(lane, None)
            self.control.clear(lane)
