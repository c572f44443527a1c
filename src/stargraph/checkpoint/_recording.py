"""A whole recorded run, as replay consumes it and a cassette file holds it."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ConfigDict, model_validator

from stargraph._typed import TypedModel
from stargraph.checkpoint._compact import expand_steps
from stargraph.checkpoint._records import RunRecord, StepRecord
from stargraph.errors import CorruptCheckpointError, StargraphError

__all__ = ["Recording"]


class Recording(TypedModel):
    """A whole recorded run: its record and every committed step, with the calls of each.

    What ``CompiledGraph.replay`` consumes, and what a cassette file holds.
    """

    typed_error: ClassVar[type[StargraphError]] = CorruptCheckpointError

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    run: RunRecord
    steps: tuple[StepRecord, ...]

    @model_validator(mode="after")
    def _whole_requests(self) -> Recording:
        # Stored calls hold each model request as a delta on the previous one of the same
        # conversation; a recording (what replay compares and diffs) holds them whole.
        if any(call.base for step in self.steps for call in step.calls):
            object.__setattr__(self, "steps", tuple(expand_steps(self.steps, {})))
        return self

    @classmethod
    def from_store(cls, store: Any, run_id: str) -> Recording:
        """Read a run and all of its steps from a checkpoint store."""
        return cls(run=store.get_run(run_id), steps=tuple(store.get_steps(run_id)))
