"""How every driver leaves a run (``_steploop._WayOut``): what escapes goes through
``stopped_by`` unless the driver handled it, the run ends however it leaves, and a run
stopped at a step boundary is cancelled after it ended."""

from __future__ import annotations

from typing import cast

import pytest

from stargraph.errors import RunCancelledError
from stargraph.runtime._run import Run
from stargraph.runtime._steploop import StepLoop, _WayOut


class _Loop:
    """The three StepLoop methods a way out calls, recording the calls."""

    def __init__(self, instead: BaseException | None = None) -> None:
        self.calls: list[str] = []
        self.instead = instead

    def stopped_by(self, run: object, exc: BaseException) -> BaseException:
        self.calls.append(f"stopped_by {type(exc).__name__}")
        return exc if self.instead is None else self.instead

    def end(self, run: object) -> None:
        self.calls.append("end")

    def cancel(self, run: object) -> RunCancelledError:
        self.calls.append("cancel")
        return RunCancelledError("cancelled", run_id="r")


def _way_out(loop: _Loop) -> _WayOut:
    return _WayOut(cast(StepLoop, loop), cast(Run, object()))


def test_a_run_that_finishes_only_ends() -> None:
    loop = _Loop()
    with _way_out(loop):
        pass
    assert loop.calls == ["end"]


def test_what_escapes_is_recorded_before_the_run_ends_and_the_recorded_error_is_raised() -> None:
    typed = RuntimeError("typed")
    loop = _Loop(instead=typed)
    with pytest.raises(RuntimeError) as raised, _way_out(loop):
        raise ValueError("node failed")
    assert raised.value is typed
    assert loop.calls == ["stopped_by ValueError", "end"]


def _closed_by_the_consumer(way_out: _WayOut) -> None:
    """What a streaming driver does when its consumer closes it: handle, then re-raise."""
    way_out.handled = True
    raise GeneratorExit


def test_what_the_driver_handled_itself_passes_unrecorded() -> None:
    loop = _Loop(instead=RuntimeError("must not replace it"))
    with pytest.raises(GeneratorExit), _way_out(loop) as way_out:
        _closed_by_the_consumer(way_out)
    assert loop.calls == ["end"]


def test_a_run_stopped_at_a_step_boundary_is_cancelled_after_it_ended() -> None:
    loop = _Loop()
    with pytest.raises(RunCancelledError) as raised, _way_out(loop) as way_out:
        way_out.cancelled = True
    assert loop.calls == ["end", "cancel"]
    assert raised.value.__context__ is None
