"""Rule packs: CLIPS text with an id and a version, from a ``.clp`` file or a declarative spec.

A pack is data (frozen, JSON round-trip) so the IR can mount it on a graph or a node and the
graph hash can include its ``source_hash``. Loading it into CLIPS, and every check that needs
CLIPS, happens in :mod:`stargraph.fathom._engine`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import ConfigDict, Field

from stargraph._typed import TypedModel
from stargraph.errors import Problem, RuleCompileError
from stargraph.fathom._spec import compile_spec

__all__ = ["RulePack", "budget_problems", "default_termination_pack"]

_ID_PATTERN: Final = r"^[A-Za-z][A-Za-z0-9_.-]*$"
_ID: Final = re.compile(_ID_PATTERN)
# `; fathom-pack: id=routing version=1.2` on any line of a .clp file names the pack.
_HEADER: Final = re.compile(r"^\s*;+\s*fathom-pack:(?P<body>.*)$", re.MULTILINE)


class RulePack(TypedModel):
    """A versioned set of CLIPS constructs that decides routing and termination.

    ``source`` is the exact CLIPS text loaded into the engine; for ``origin="spec"`` it is the
    text compiled from the declarative form, so both kinds hash and audit the same way.
    """

    typed_error = RuleCompileError

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=_ID_PATTERN, description="Pack id, unique per engine.")
    version: str = Field(min_length=1, description="Author-chosen version, recorded in the IR.")
    source: str = Field(description="CLIPS constructs, exactly as loaded.")
    origin: Literal["clp", "spec"] = Field("clp", description="Where ``source`` came from.")

    @property
    def source_hash(self) -> str:
        """``sha256:<hex>`` of ``source``; the graph hash includes it so rule edits show."""
        data = self.source.encode("utf-8", "surrogatepass")
        return "sha256:" + hashlib.sha256(data).hexdigest()

    @property
    def label(self) -> str:
        """``id@version``, as error messages and run records name the pack."""
        return f"{self.id}@{self.version}"

    def to_ir(self) -> dict[str, Any]:
        """The JSON form the IR embeds: the fields plus ``source_hash``."""
        return {**self.model_dump(mode="json"), "source_hash": self.source_hash}

    @classmethod
    def from_ir(cls, data: Mapping[str, Any]) -> RulePack:
        """Rebuild from :meth:`to_ir`, refusing text that does not match its recorded hash."""
        fields = {k: v for k, v in data.items() if k != "source_hash"}
        pack = cls.model_validate(fields)
        recorded = data.get("source_hash")
        if recorded is not None and recorded != pack.source_hash:
            raise RuleCompileError.at(
                f"pack {pack.id!r} v{pack.version}",
                f"source_hash {recorded} does not match the source ({pack.source_hash})",
                "the IR was edited by hand; recompile the graph",
                subject=f"rule pack {pack.id!r}",
            )
        return pack

    @classmethod
    def from_clp(cls, id: str, version: str, text: str) -> RulePack:
        """A pack from CLIPS text. Checked when validated or loaded into an engine."""
        return cls(id=id, version=str(version), source=text, origin="clp")

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> RulePack:
        """A pack from the declarative ``when``/``then`` form (a dict, e.g. parsed JSON).

        >>> pack = RulePack.from_spec({"id": "route", "version": "1", "rules": [
        ...     {"name": "to_b", "when": [{"node": "a"}], "then": {"goto": "b"}}]})
        >>> pack.origin, "(kind goto)" in pack.source
        ('spec', True)
        """
        pack_id = spec.get("id")
        version = spec.get("version")
        label = f"pack {pack_id!r}"
        problems = []
        if not isinstance(pack_id, str) or not _ID.fullmatch(pack_id):
            problems.append(Problem(label, "'id' must be a string like 'routing'", "set 'id'"))
        if not isinstance(version, str | int) or isinstance(version, bool) or version == "":
            problems.append(Problem(label, "'version' must be a string", "set 'version'"))
        if problems:
            raise RuleCompileError(problems, subject=f"rule pack {pack_id!r}")
        source = compile_spec(str(pack_id), spec)
        return cls(id=str(pack_id), version=str(version), source=source, origin="spec")

    @classmethod
    def load(
        cls, path: str | Path, *, id: str | None = None, version: str | None = None
    ) -> RulePack:
        """Read a ``.clp`` file or a ``.json`` spec.

        A ``.clp`` file names itself with a comment line ``; fathom-pack: id=x version=1``;
        ``id`` defaults to the file stem, and a version is required from one place or the other.
        """
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            try:
                spec = json.loads(text)
            except json.JSONDecodeError as exc:
                raise RuleCompileError.at(
                    f"{path}:{exc.lineno}",
                    f"invalid JSON: {exc.msg}",
                    "fix the JSON",
                    subject=f"rule pack {path.name!r}",
                ) from exc
            if not isinstance(spec, dict):
                raise RuleCompileError.at(
                    str(path),
                    "a spec must be a JSON object",
                    "wrap it in {...}",
                    subject=f"rule pack {path.name!r}",
                )
            if id is not None:
                spec["id"] = id
            if version is not None:
                spec["version"] = version
            return cls.from_spec(spec)
        if path.suffix != ".clp":
            raise RuleCompileError.at(
                str(path),
                "unknown rule pack file type",
                "use .clp or .json",
                subject=f"rule pack {path.name!r}",
            )
        header: dict[str, str] = {}
        match = _HEADER.search(text)
        if match:
            for part in match.group("body").split():
                key, _, value = part.partition("=")
                header[key] = value
        pack_id = id or header.get("id") or path.stem
        pack_version = version or header.get("version")
        if not pack_version:
            raise RuleCompileError.at(
                str(path),
                "the pack has no version",
                "add a line '; fathom-pack: id=<id> version=<v>' or pass version=",
                subject=f"rule pack {pack_id!r}",
            )
        return cls.from_clp(pack_id, pack_version, text)


_TERMINATION: Final = """\
; fathom-pack: id=termination version=2
; The default termination pack: every ReAct loop and SkillSpec machine stops through it.
; `step` counts the steps already taken, so `max_steps` halts after exactly that many.
; `done` finishes the run (status done); the limits halt it (status halted). Salience
; orders them when several fire at once: a finished task is reported as done, not as a limit.

(defrule done
  "The state says the task is finished."
  (declare (salience 20))
  (sg-state (done TRUE))
  =>
  (assert (sg-decision (kind finish) (reason "done") (rule done))))

(defrule error_budget
  "Too many failed tool calls or node errors."
  (declare (salience 10))
  (sg-step (error-count ?errors&:(>= ?errors {error_budget})))
  =>
  (assert (sg-decision (kind halt) (reason "error_budget_exhausted") (rule error_budget))))

(defrule max_steps
  "The step limit is reached."
  (sg-step (step ?step&:(>= ?step {max_steps})))
  =>
  (assert (sg-decision (kind halt) (reason "max_steps_exceeded") (rule max_steps))))
"""


def budget_problems(max_steps: object, error_budget: object, *, at: str, fix: str) -> list[Problem]:
    """A problem (located at ``at`` + the name) for each termination budget that is not an
    int >= 1: what a termination pack checks before it is built."""
    return [
        Problem(f"{at}{name}", f"must be an int >= 1, got {value!r}", fix)
        for name, value in (("max_steps", max_steps), ("error_budget", error_budget))
        if not isinstance(value, int) or isinstance(value, bool) or value < 1
    ]


def default_termination_pack(max_steps: int, error_budget: int) -> RulePack:
    """The pack with rules ``done``, ``error_budget`` and ``max_steps`` (id ``termination``).

    ``max_steps`` halts once ``step >= max_steps``; ``error_budget`` once
    ``error_count >= error_budget`` (the run ends ``halted``); ``done`` finishes the run
    (``done``) when the ``done`` fact is true.
    """
    problems = budget_problems(max_steps, error_budget, at="termination pack: ", fix="pass one")
    if problems:
        raise RuleCompileError(problems, subject="rule pack 'termination'")
    text = _TERMINATION.format(max_steps=max_steps, error_budget=error_budget)
    return RulePack.from_clp("termination", "2", text)
