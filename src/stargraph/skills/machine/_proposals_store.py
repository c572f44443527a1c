"""Proposals: the control plane's meta-tools never execute, they only ask.

``propose.tool``, ``propose.skill`` and ``propose.config_change`` are ordinary tools (built by
:func:`proposal_tools`, registered in the tool registry, dispatched through the arbiter) whose
only effect is one *pending* row in a :class:`ProposalStore` (SQLite, stdlib ``sqlite3``).
They answer ``{"status": "pending", "proposal_id": ...}``. A proposal carrying executable
code - a Python source body, an ``exec_path``, a manifest pointing to a script - is refused
with :class:`ExecutableProposalError` and nothing is stored.

A human decides: :meth:`ProposalStore.approve` builds a **new** registry version from the
one passed in (:class:`SkillSpecRegistry`, the plugin ``Registry`` via ``with_skill``, a
``ToolRegistry`` given the human's implementation, or a config mapping); whoever holds the
old registry - a running session - keeps it. :meth:`ProposalStore.reject` records the
reason. Every decision is also appended to the store's ``proposal_log`` table.

``skill.validate@1.0.0`` and ``tool.validate@1.0.0`` (:func:`validator_tools`) expose the
real validators (``parse_skillspec`` / ``validate_machine``, and ``ToolSpec`` with the
arbiter's JSON Schema subset) to the built-in ``skill-builder`` and ``tool-builder`` skills.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any, Final, Literal

from pydantic import ConfigDict, JsonValue

from stargraph._lifecycle import Closing
from stargraph._sqlite import Database
from stargraph._typed import TypedModel
from stargraph.errors import (
    CompileError,
    ExecutableProposalError,
    InvalidProposalError,
    Problem,
    ProposalError,
    ProposalNotFoundError,
    ProposalStateError,
    ToolSpecError,
)
from stargraph.skills.machine._registry import SkillLoadReport, SkillSpecRegistry
from stargraph.skills.machine._spec import KnownTools, SkillSpec, parse_skillspec
from stargraph.tools import (
    PythonTool,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolSpec,
    canonical_json,
    model_from_json_schema,
    sha256_hex,
    tool,
)

__all__ = [
    "ExecutableProposalError",
    "InvalidProposalError",
    "Proposal",
    "ProposalError",
    "ProposalKind",
    "ProposalNotFoundError",
    "ProposalStateError",
    "ProposalStatus",
    "ProposalStore",
    "builtin_skillspecs",
    "executable_problems",
    "proposal_tools",
    "tool_manifest_problems",
    "validator_tools",
]

ProposalKind = Literal["tool", "skill", "config_change"]
ProposalStatus = Literal["pending", "approved", "rejected"]
KINDS: Final = ("tool", "skill", "config_change")
STATUSES: Final = ("pending", "approved", "rejected")
ToolNames = Collection[str] | Callable[[], Collection[str]] | None
"""Tool ids ``allowed_tools`` must name: a collection, a callable returning one, or None."""

_NO_CODE_HINT: Final = (
    "proposals carry data only: describe the behaviour; a human supplies any implementation"
)
# Keys that name something to execute (also matched as the last dotted segment of a key).
_CODE_KEYS: Final = frozenset(
    {
        "exec_path",
        "executable",
        "exec",
        "code",
        "source_code",
        "script",
        "scripts",
        "command",
        "cmd",
        "entrypoint",
        "entry_point",
        "module",
        "callable",
        "handler",
        "shell",
        "binary",
        "implementation",
        "impl",
        "python",
        "program",
    }
)
# Maps whose keys are data (JSON Schema property names), not fields.
_DATA_MAPS: Final = frozenset({"properties", "patternProperties", "$defs", "definitions"})
_CODE_PATTERNS: Final = (
    (re.compile(r"\A\s*#!"), "a shebang line"),
    (re.compile(r"(?m)^\s*(async\s+)?def\s+\w+\s*\("), "a Python function definition"),
    (re.compile(r"(?m)^\s*class\s+\w+\s*(\(.*\))?\s*:"), "a Python class definition"),
    (
        re.compile(r"(?m)^\s*(import\s+[\w.]+(\s+as\s+\w+)?|from\s+[\w.]+\s+import\s+.+)\s*$"),
        "a Python import statement",
    ),
    (re.compile(r"\b(exec|eval|compile|__import__)\s*\("), "a call to exec/eval/__import__"),
    (re.compile(r"\bos\.(system|popen|exec\w*|spawn\w*)\s*\("), "a process-spawning call"),
    (re.compile(r"\bsubprocess\.\w+"), "a subprocess call"),
    (re.compile(r"<script\b", re.IGNORECASE), "a <script> element"),
)
_SCRIPT_PATH: Final = re.compile(
    r"\A\S*\.(py|pyc|pyz|pyw|sh|bash|zsh|fish|ps1|bat|cmd|exe|so|dll|dylib|js|mjs|cjs|ts|rb|"
    r"pl|php|jar|bin|run|wasm)\Z",
    re.IGNORECASE,
)


# --------------------------------------------------------------------------- errors


# --------------------------------------------------------------------------- model


class Proposal(TypedModel):
    """One proposal as stored."""

    typed_error = InvalidProposalError

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """``prop-<seq>-<digest prefix>``."""
    seq: int
    """Position in the store."""
    kind: ProposalKind
    """``tool``, ``skill`` or ``config_change``."""
    status: ProposalStatus
    """``pending`` until a human approves or rejects it."""
    payload: dict[str, JsonValue]
    """``{"spec": SkillSpec}``, ``{"manifest": {llm, runtime}}`` or ``{"changes": {...}}``."""
    digest: str
    """sha256 of the canonical payload."""
    rationale: str = ""
    """Why the agent proposes it."""
    lane: str = "core"
    """The lane that proposed it."""
    session: str = ""
    """The session that proposed it, when known."""
    created_at: float
    """Unix time of submission."""
    decided_at: float | None = None
    """Unix time of the decision."""
    reason: str | None = None
    """Why it was rejected (or a note on approval)."""
    registry_version: str | None = None
    """The registry version its approval produced."""

    @property
    def subject(self) -> str:
        """What it is about: the skill's name, the tool's name, or the changed keys."""
        if self.kind == "skill":
            spec = self.payload.get("spec")
            return str(spec.get("name")) if isinstance(spec, dict) else "?"
        if self.kind == "tool":
            manifest = self.payload.get("manifest")
            llm = manifest.get("llm") if isinstance(manifest, dict) else None
            return str(llm.get("name")) if isinstance(llm, dict) else "?"
        changes = self.payload.get("changes")
        return ",".join(sorted(changes)) if isinstance(changes, dict) else "?"


# --------------------------------------------------------------------------- checks


def executable_problems(value: Any, pointer: str = "") -> builtins.list[Problem]:
    """Every place ``value`` carries executable code (empty when it is plain data)."""
    problems: list[Problem] = []
    _scan(value, pointer, None, problems)
    return problems


def _scan(value: Any, pointer: str, parent: str | None, problems: list[Problem]) -> None:
    if isinstance(value, Mapping):
        for raw_key, item in value.items():
            key = str(raw_key)
            here = f"{pointer}/{_escape(key)}"
            last = key.rsplit(".", 1)[-1].lower()
            if parent not in _DATA_MAPS and (key.lower() in _CODE_KEYS or last in _CODE_KEYS):
                problems.append(
                    Problem(here, f"field {key!r} names something to execute", _NO_CODE_HINT)
                )
            _scan(item, here, key, problems)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _scan(item, f"{pointer}/{i}", parent, problems)
    elif isinstance(value, str):
        if _SCRIPT_PATH.match(value.strip()):
            problems.append(
                Problem(pointer, f"value {value!r} points to a script or binary", _NO_CODE_HINT)
            )
            return
        for pattern, what in _CODE_PATTERNS:
            if pattern.search(value):
                problems.append(Problem(pointer, f"the text contains {what}", _NO_CODE_HINT))
                return


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _names(tools: ToolNames) -> Collection[str] | None:
    return tools() if callable(tools) else tools


def skill_problems(
    spec: Any, *, source: str = "proposal", tools: ToolNames = None
) -> builtins.list[Problem]:
    """Every problem of a proposed SkillSpec document: executable code, then everything
    :func:`parse_skillspec` finds (types, the machine, schemas, unknown tools)."""
    problems = executable_problems(spec, f"{source}#")
    try:
        parse_skillspec(spec, source=source, tools=_names(tools))
    except CompileError as exc:
        problems.extend(exc.problems)
    return problems


def tool_manifest_problems(manifest: Any, *, source: str = "proposal") -> builtins.list[Problem]:
    """Every problem of a proposed tool manifest ``{"llm": {name, description, parameters},
    "runtime": {locks, timeout_ms, side_effect, ...}}``: executable code (an ``exec_path``
    included), then what ``ToolSpec`` and the arbiter's JSON Schema subset reject."""
    where = f"{source}#"
    problems = executable_problems(manifest, where)
    if not isinstance(manifest, Mapping):
        return [*problems, Problem(where, "a tool manifest must be an object {llm, runtime}")]
    llm = manifest.get("llm")
    runtime = manifest.get("runtime", {})
    for key in sorted(set(manifest) - {"llm", "runtime"}):
        problems.append(Problem(f"{where}/{key}", f"unknown manifest key {key!r}"))
    if not isinstance(llm, Mapping):
        return [*problems, Problem(f"{where}/llm", "missing the llm view (name, description)")]
    if not isinstance(runtime, Mapping):
        return [*problems, Problem(f"{where}/runtime", "the runtime view must be an object")]
    name = str(llm.get("name", ""))
    version = str(runtime.get("version", "1.0.0"))
    if re.fullmatch(r"\d+\.\d+", version):
        version += ".0"
    tool_id = name if "@" in name else f"{name}@{version}"
    schema = llm.get("parameters", llm.get("input_schema", {"type": "object"}))
    fields: dict[str, Any] = {
        k: runtime[k]
        for k in ("side_effect", "locks", "idempotent", "network", "exposure", "prompt_mask")
        if k in runtime
    }
    if "secret_resources" in runtime:
        fields["secret_resources"] = runtime["secret_resources"]
    if "timeout_ms" in runtime and isinstance(runtime["timeout_ms"], int | float):
        fields["timeout_s"] = runtime["timeout_ms"] / 1000
    for key in ("locks", "secret_resources"):
        if isinstance(fields.get(key), list):
            fields[key] = tuple(fields[key])
    try:
        ToolSpec(
            id=tool_id, description=str(llm.get("description", "")), input_schema=schema, **fields
        )
    except ToolSpecError as exc:
        problems.extend(
            Problem(f"{where}/{p.pointer.partition('#/')[2]}", p.message, p.hint)
            for p in exc.problems
        )
    except (TypeError, ValueError) as exc:
        problems.append(Problem(where, f"not a valid tool spec: {exc}"))
    if not llm.get("description"):
        problems.append(Problem(f"{where}/llm/description", "the tool needs a description"))
    if isinstance(schema, Mapping):
        try:
            model_from_json_schema(schema, name=tool_id, source=source, pointer="/llm/parameters")
        except ToolSpecError as exc:
            problems.extend(exc.problems)
        except (TypeError, ValueError, AttributeError) as exc:
            problems.append(Problem(f"{where}/llm/parameters", f"not a usable schema: {exc}"))
    return problems


def _changes_problems(changes: Any, where: str) -> builtins.list[Problem]:
    problems = executable_problems(changes, f"{where}/changes")
    if not isinstance(changes, Mapping) or not changes:
        problems.append(
            Problem(f"{where}/changes", "changes must be a non-empty object {key: new value}")
        )
    return problems


# --------------------------------------------------------------------------- store

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS proposals (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('tool', 'skill', 'config_change')),
    status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected')),
    payload TEXT NOT NULL,
    digest TEXT NOT NULL,
    rationale TEXT NOT NULL,
    lane TEXT NOT NULL,
    session TEXT NOT NULL,
    created_at REAL NOT NULL,
    decided_at REAL,
    reason TEXT,
    registry_version TEXT
);
CREATE TABLE IF NOT EXISTS proposal_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    proposal_id TEXT NOT NULL,
    action TEXT NOT NULL,
    at REAL NOT NULL,
    detail TEXT NOT NULL
);
"""
_COLUMNS: Final = (
    "id, seq, kind, status, payload, digest, rationale, lane, session, created_at, "
    "decided_at, reason, registry_version"
)


class ProposalStore(Closing):
    """Pending proposals in one SQLite file (``":memory:"`` for tests), thread safe.

    ``tools`` (ids, or a callable returning them) is what proposed SkillSpecs'
    ``allowed_tools`` are checked against, at submission and at approval.
    """

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, tools: ToolNames = None):
        self.path = str(path)
        self.tools = tools
        self._lock = threading.Lock()
        self._file = Database(self.path, busy_timeout_s=5.0)
        self._file.script(_SCHEMA)

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._file.close()

    # ----------------------------------------------------------------------- submitting

    def check(self, kind: str, payload: Mapping[str, Any]) -> builtins.list[Problem]:
        """Every reason ``payload`` cannot become a pending ``kind`` proposal."""
        where = f"proposal:{kind}#"
        if kind not in KINDS:
            return [Problem(where, f"unknown proposal kind {kind!r}", f"use one of {KINDS}")]
        if kind == "skill":
            return skill_problems(payload.get("spec"), source=f"proposal:{kind}", tools=self.tools)
        if kind == "tool":
            return tool_manifest_problems(payload.get("manifest"), source=f"proposal:{kind}")
        return _changes_problems(payload.get("changes"), where)

    def submit(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        rationale: str = "",
        lane: str = "core",
        session: str = "",
    ) -> Proposal:
        """Store a pending proposal; executes nothing.

        Raises :class:`ExecutableProposalError` when ``payload`` (or the rationale) carries
        executable code and :class:`InvalidProposalError` for any other problem; nothing is
        stored then.
        """
        code = executable_problems(dict(payload), f"proposal:{kind}#")
        code += executable_problems(rationale, f"proposal:{kind}#/rationale")
        if code:
            raise ExecutableProposalError(code, subject=f"{kind} proposal")
        problems = self.check(kind, payload)
        if problems:
            raise InvalidProposalError(problems, subject=f"{kind} proposal")
        data = json.loads(json.dumps(dict(payload)))
        digest = sha256_hex(canonical_json(data))
        now = time.time()
        with self._lock, self._file.write() as db:
            cursor = db.execute(
                "INSERT INTO proposals (id, kind, status, payload, digest, rationale, lane, "
                "session, created_at) VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?)",
                (
                    f"tmp-{digest}-{now}",
                    kind,
                    json.dumps(data, sort_keys=True),
                    digest,
                    rationale,
                    lane,
                    session,
                    now,
                ),
            )
            seq = int(cursor.lastrowid or 0)
            proposal_id = f"prop-{seq:04d}-{digest[:8]}"
            db.execute("UPDATE proposals SET id = ? WHERE seq = ?", (proposal_id, seq))
            self._log(db, proposal_id, "submitted", {"kind": kind, "lane": lane}, now)
        return self.get(proposal_id)

    # ----------------------------------------------------------------------- reading

    def get(self, proposal_id: str) -> Proposal:
        """The proposal ``proposal_id``; :class:`ProposalNotFoundError` if there is none."""
        rows = self._file.rows(f"SELECT {_COLUMNS} FROM proposals WHERE id = ?", (proposal_id,))
        if not rows:
            raise ProposalNotFoundError(f"no proposal {proposal_id!r} in {self.path}")
        return _proposal(rows[0])

    def list(
        self, status: str | None = None, *, kind: str | None = None
    ) -> builtins.list[Proposal]:
        """Proposals in submission order, optionally only one ``status`` / ``kind``."""
        if status is not None and status not in STATUSES:
            raise ProposalStateError(f"unknown status {status!r}; use one of {STATUSES}")
        query = f"SELECT {_COLUMNS} FROM proposals WHERE 1 = 1"
        params: list[Any] = []
        if status is not None:
            query += " AND status = ?"
            params.append(status)
        if kind is not None:
            query += " AND kind = ?"
            params.append(kind)
        rows = self._file.rows(query + " ORDER BY seq", params)
        return [_proposal(row) for row in rows]

    def log(self, proposal_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """The decision log (every submission, approval and rejection), in order."""
        query = "SELECT proposal_id, action, at, detail FROM proposal_log"
        params: tuple[Any, ...] = ()
        if proposal_id is not None:
            query += " WHERE proposal_id = ?"
            params = (proposal_id,)
        rows = self._file.rows(query + " ORDER BY seq", params)
        return [
            {"proposal_id": r[0], "action": r[1], "at": r[2], "detail": json.loads(r[3])}
            for r in rows
        ]

    def __iter__(self) -> Iterator[Proposal]:
        return iter(self.list())

    def __len__(self) -> int:
        return int(self._file.rows("SELECT COUNT(*) FROM proposals")[0][0])

    # ----------------------------------------------------------------------- deciding

    def approve(
        self,
        proposal_id: str,
        registry: Any,
        *,
        implementation: Tool | None = None,
        note: str = "",
    ) -> Any:
        """Approve a pending proposal and return the **new** registry version built from
        ``registry`` (which is left untouched: whoever holds it keeps it).

        * ``skill``: ``registry`` is a :class:`SkillSpecRegistry` (a new one with the spec
          added or replaced) or a plugin ``Registry`` (``with_skill`` of the compiled spec).
        * ``tool``: ``registry`` is a ``ToolRegistry`` and ``implementation`` the human's
          tool whose spec matches the proposed manifest.
        * ``config_change``: ``registry`` is a mapping; returns a read-only merged copy.
        """
        proposal = self._pending(proposal_id)
        if proposal.kind == "skill":
            new, version = self._approve_skill(proposal, registry)
        elif proposal.kind == "tool":
            new, version = self._approve_tool(proposal, registry, implementation)
        else:
            new, version = self._approve_config(proposal, registry)
        self._decide(proposal_id, "approved", note or None, version)
        return new

    def reject(self, proposal_id: str, reason: str) -> Proposal:
        """Reject a pending proposal, recording ``reason``."""
        if not reason.strip():
            raise ProposalStateError("a rejection needs a reason")
        self._pending(proposal_id)
        self._decide(proposal_id, "rejected", reason, None)
        return self.get(proposal_id)

    def _pending(self, proposal_id: str) -> Proposal:
        proposal = self.get(proposal_id)
        if proposal.status != "pending":
            raise ProposalStateError(
                f"proposal {proposal_id!r} is already {proposal.status}; only pending "
                "proposals can be approved or rejected"
            )
        return proposal

    def _decide(
        self, proposal_id: str, status: str, reason: str | None, version: str | None
    ) -> None:
        now = time.time()
        with self._lock, self._file.write() as db:
            cursor = db.execute(
                "UPDATE proposals SET status = ?, decided_at = ?, reason = ?, "
                "registry_version = ? WHERE id = ? AND status = 'pending'",
                (status, now, reason, version, proposal_id),
            )
            if cursor.rowcount != 1:
                raise ProposalStateError(f"proposal {proposal_id!r} was decided concurrently")
            detail = {"reason": reason, "registry_version": version}
            self._log(db, proposal_id, status, detail, now)

    @staticmethod
    def _log(
        db: sqlite3.Connection,
        proposal_id: str,
        action: str,
        detail: Mapping[str, Any],
        at: float,
    ) -> None:
        db.execute(
            "INSERT INTO proposal_log (proposal_id, action, at, detail) VALUES (?, ?, ?, ?)",
            (proposal_id, action, at, json.dumps(dict(detail), sort_keys=True)),
        )

    def spec_of(self, proposal: Proposal) -> SkillSpec:
        """The SkillSpec a ``skill`` proposal carries (validated again)."""
        try:
            return parse_skillspec(
                proposal.payload.get("spec"),
                source=f"proposal:{proposal.id}",
                tools=_names(self.tools),
            )
        except CompileError as exc:
            raise InvalidProposalError(exc.problems, subject=f"proposal {proposal.id}") from None

    def _approve_skill(self, proposal: Proposal, registry: Any) -> tuple[Any, str]:
        spec = self.spec_of(proposal)
        if isinstance(registry, SkillSpecRegistry):
            specs = {s.name: s for s in registry}
            pruned = list(registry.report.pruned)
            if spec.name in specs:
                pruned.append(f"{spec.name} ({specs[spec.name].source})")
            specs[spec.name] = spec
            report = SkillLoadReport(
                tuple(sorted(specs)),
                registry.report.skipped,
                tuple(pruned),
                registry.report.total_on_disk,
            )
            new = SkillSpecRegistry(specs, report)
            return new, new.version
        if callable(getattr(registry, "with_skill", None)):
            from stargraph.skills.machine._compile import compile_skillspec

            plugin = registry.with_skill(
                compile_skillspec(spec), provider=f"proposal:{proposal.id}"
            )
            return plugin, str(plugin.version)
        raise ProposalStateError(
            f"cannot apply skill proposal {proposal.id!r} to {type(registry).__name__}; pass "
            "a SkillSpecRegistry or a plugin Registry"
        )

    def _approve_tool(
        self, proposal: Proposal, registry: Any, implementation: Tool | None
    ) -> tuple[Any, str]:
        if not isinstance(registry, ToolRegistry):
            raise ProposalStateError(
                f"cannot apply tool proposal {proposal.id!r} to {type(registry).__name__}; "
                "pass the ToolRegistry"
            )
        if implementation is None:
            raise ProposalStateError(
                f"tool proposal {proposal.id!r} carries a manifest only; approve it with "
                "implementation=<the tool a human wrote for it>"
            )
        manifest = proposal.payload.get("manifest")
        llm = manifest.get("llm") if isinstance(manifest, dict) else None
        name = str(llm.get("name", "")) if isinstance(llm, dict) else ""
        spec = implementation.spec
        if name.partition("@")[0] != spec.name:
            raise ProposalStateError(
                f"the implementation is {spec.id!r} but the proposal is for {name!r}"
            )
        proposed: Any = (
            llm.get("parameters", llm.get("input_schema")) if isinstance(llm, dict) else None
        )
        props = proposed.get("properties") if isinstance(proposed, dict) else None
        wanted = sorted(props) if isinstance(props, dict) else []
        have = sorted(spec.input_schema.get("properties", {}))
        if wanted != have:
            raise ProposalStateError(
                f"the implementation's arguments {have} differ from the proposed "
                f"parameters {wanted}"
            )
        tools = [t for t in registry if t.spec.name != spec.name]
        new = ToolRegistry.build(builtins=[*tools, implementation])
        return new, new.digest

    def _approve_config(self, proposal: Proposal, registry: Any) -> tuple[Any, str]:
        if not isinstance(registry, Mapping):
            raise ProposalStateError(
                f"cannot apply config proposal {proposal.id!r} to {type(registry).__name__}; "
                "pass the configuration mapping"
            )
        changes = proposal.payload.get("changes")
        merged = {**registry, **(changes if isinstance(changes, dict) else {})}
        version = sha256_hex(canonical_json(json.loads(json.dumps(merged, default=str))))
        return MappingProxyType(merged), version


def _proposal(row: tuple[Any, ...]) -> Proposal:
    keys = [c.strip() for c in _COLUMNS.split(",")]
    data = dict(zip(keys, row, strict=True))
    data["payload"] = json.loads(data["payload"])
    return Proposal.model_validate(data)


# --------------------------------------------------------------------------- tools


def proposal_tools(store: ProposalStore, *, session: str = "") -> tuple[PythonTool, ...]:
    """``propose.tool@1.0.0``, ``propose.skill@1.0.0`` and ``propose.config_change@1.0.0``:
    meta-tools bound to ``store``. Register them like any tool; each only stores a pending
    proposal and answers ``{"status": "pending", "proposal_id"}``."""

    def submit(
        kind: ProposalKind, payload: dict[str, Any], ctx: ToolContext, rationale: str
    ) -> dict[str, Any]:
        found = store.submit(kind, payload, rationale=rationale, lane=ctx.lane, session=session)
        return {"status": found.status, "proposal_id": found.id}

    @tool(id="propose.tool@1.0.0", side_effect="write")
    def propose_tool(
        manifest: dict[str, Any], ctx: ToolContext, rationale: str = ""
    ) -> dict[str, Any]:
        """Propose a new tool for human approval: its manifest {llm: {name, description,
        parameters}, runtime: {locks, timeout_ms, side_effect, ...}}. Data only: no code, no
        exec_path. Nothing is installed until a human approves."""
        return submit("tool", {"manifest": manifest}, ctx, rationale)

    @tool(id="propose.skill@1.0.0", side_effect="write")
    def propose_skill(
        spec: dict[str, Any], ctx: ToolContext, rationale: str = ""
    ) -> dict[str, Any]:
        """Propose a new or changed skill (a SkillSpec document) for human approval. Nothing
        is installed until a human approves."""
        return submit("skill", {"spec": spec}, ctx, rationale)

    @tool(id="propose.config_change@1.0.0", side_effect="write")
    def propose_config_change(
        changes: dict[str, Any], ctx: ToolContext, rationale: str = ""
    ) -> dict[str, Any]:
        """Propose configuration changes {key: new value} for human approval. Nothing changes
        until a human approves."""
        return submit("config_change", {"changes": changes}, ctx, rationale)

    return (propose_tool, propose_skill, propose_config_change)


def validator_tools(*, tools: ToolNames = None) -> tuple[PythonTool, ...]:
    """``skill.validate@1.0.0`` (the SkillSpec loader's validator: ``parse_skillspec`` and so
    ``validate_machine``; ``tools`` checks ``allowed_tools``) and ``tool.validate@1.0.0``
    (``ToolSpec`` and the arbiter's JSON Schema subset). Both answer ``{valid, problems}``."""

    @tool(id="skill.validate@1.0.0", side_effect="none", idempotent=True)
    def skill_validate(spec: dict[str, Any]) -> dict[str, Any]:
        """Validate a SkillSpec document: states, transitions, terminal states, reachability,
        schemas, registered tools. Answers {valid, problems[]}."""
        problems = skill_problems(spec, source="spec", tools=tools)
        return {"valid": not problems, "problems": [p.render() for p in problems]}

    @tool(id="tool.validate@1.0.0", side_effect="none", idempotent=True)
    def tool_validate(manifest: dict[str, Any]) -> dict[str, Any]:
        """Validate a tool manifest {llm, runtime}: id, description, parameters schema, locks,
        no executable code. Answers {valid, problems[]}."""
        problems = tool_manifest_problems(manifest, source="manifest")
        return {"valid": not problems, "problems": [p.render() for p in problems]}

    return (skill_validate, tool_validate)


def builtin_skillspecs(*, tools: KnownTools | None = None) -> tuple[SkillSpec, ...]:
    """The built-in ``skill-builder`` and ``tool-builder`` SkillSpecs (``builtin/*.json``),
    validated by the loader (``tools`` checks their allowlists)."""
    folder = resources.files("stargraph.skills.machine").joinpath("builtin")
    specs = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            data = json.loads(entry.read_text(encoding="utf-8"))
            specs.append(parse_skillspec(data, source=f"builtin/{entry.name}", tools=tools))
    return tuple(specs)
