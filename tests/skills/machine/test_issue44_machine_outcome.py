"""A SkillSpec machine's result says how its run ended: ``done`` at ``finish`` (the machine
pack's ``done`` rule is a success rule), ``halted`` when a limit stopped it."""

# Fixtures are imported from test_machine_helpers and requested as parameters.
# ruff: noqa: F811

from __future__ import annotations

from stargraph.llm import OpenAIChatModel
from stargraph.skills.machine import MachineRuntime
from stargraph.testing import ScriptedOpenAIServer
from stargraph.tools import Arbiter
from tests.skills.machine.test_machine_helpers import (  # noqa: F401 -- fixtures
    HAPPY_PATH,
    MEMORY_FN,
    _reset,
    arbiter,
    call,
    chat,
    runtime,
    server,
    small_spec,
)


def test_issue44_machine_result_done_at_finish(
    server: ScriptedOpenAIServer, runtime: MachineRuntime
) -> None:
    server.set_script(HAPPY_PATH)
    result = runtime.run("build_feature", {"feature": "login page"})
    assert (result.run_status, result.stopped_by, result.stop_reason) == (
        "done",
        "machine/done",
        "done",
    )


def test_issue44_machine_result_halted_by_its_step_limit(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    limited = MachineRuntime(model=chat, arbiter=arbiter, skills=[small_spec(max_steps=3)])
    server.set_script(lambda _: call(MEMORY_FN, {"query": "again"}))
    result = limited.run("small")
    assert (result.run_status, result.stopped_by, result.stop_reason) == (
        "halted",
        "machine/max_steps_exceeded",
        "max_steps_exceeded",
    )
