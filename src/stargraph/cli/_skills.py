"""``stargraph skills``: the skills of the project (``./skills/``) and the installed plugins.

``list``, ``show`` and ``run`` read one registry: stargraph's built-ins, every installed
plugin, the project's own ``@tool``s and the SKILL.md and SkillSpec files under its
``skills/`` folder (see :mod:`stargraph.cli._project`). ``run`` keeps the run in the run
database like ``stargraph run`` does, and files as its GRAPH argument a reference to
:data:`project` (``stargraph.cli._skills:project.NAME``, with the model and workspace the
run used), so ``resume``, ``replay`` and ``show`` rebuild the skill with its tools and model.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import secrets
import sys
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, unquote

import click

from stargraph.cli._load import (
    DEFAULT_DB,
    CliError,
    CliUsageError,
    archive_ir,
    open_store,
    parse_object,
    resolve_db,
)
from stargraph.cli._output import describe_error, drive, print_table, report, view
from stargraph.cli._project import Project, load_project
from stargraph.errors import InvalidInputError, RunError

__all__ = ["project", "skills_group"]

DEFAULT_MODEL: Final = "gpt-4o-mini"
_REFERENCE: Final = "stargraph.cli._skills:project"


# --------------------------------------------------------------------------- building


def _is_reference(value: str) -> bool:
    """Whether ``--model`` names a Python object (``module:attr`` of an importable module)
    rather than a model of the OpenAI-compatible endpoint (``qwen2.5:7b`` is a name)."""
    module, colon, attr = value.partition(":")
    if not colon or not all(p.isidentifier() for p in (*module.split("."), *attr.split("."))):
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _model(value: str, project: Project) -> Any:
    """The chat model ``--model`` names: a ``module:attr`` ChatModel (or a function returning
    one) of the project, else a model of the endpoint in ``OPENAI_BASE_URL``."""
    from stargraph.skills._services import is_chat_model

    if str(project.root) not in sys.path:
        sys.path.insert(0, str(project.root))
    if not _is_reference(value):
        return project.registry.model("openai", model=value)
    module_name, _, attr = value.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            found = getattr(found, part)
    except Exception as exc:
        raise CliError(
            f"--model {value}: loading it raised {type(exc).__name__}: {exc}; this is an error "
            "in your code, not in stargraph - rerun with --debug for the traceback"
        ) from exc
    if not is_chat_model(found) and callable(found):
        found = found()
    if not is_chat_model(found):
        raise CliUsageError(
            f"--model {value} is an object of type {type(found).__name__}, not a chat model "
            "(an object with complete(request), e.g. stargraph.testing.ScriptedChatModel) or a "
            "function returning one; or pass a model name of the endpoint in OPENAI_BASE_URL"
        )
    return found


def _build(
    project: Project, name: str, model: str, workspace: Path | None, store: Any = None
) -> Any:
    """Skill ``name`` compiled with its services: the arbiter over the registry's tools in
    ``workspace`` (default: the project folder) and, for agents, the model."""
    from stargraph.graph import Graph

    skill = project.registry.skill(name)
    if not hasattr(skill.subgraph, "graph_hash"):
        raise CliUsageError(
            f"skill {name!r} refers to its graph by hash ({skill.subgraph}) instead of "
            "carrying it; mount it in a graph with SubgraphNode.from_skill(registry=...)"
        )
    folder = workspace if workspace is not None else project.root
    folder.mkdir(parents=True, exist_ok=True)
    services: dict[str, Any] = {"arbiter": project.registry.arbiter(folder)}
    if str(skill.kind) == "agent":
        services["model"] = _model(model, project)
    options: dict[str, Any] = {"store": store, "services": services}
    spec = project.specs.get(name)
    if spec is not None:  # one graph step per LLM step, plus the stop node
        options["max_steps"] = spec.max_steps + 2
    return Graph(skill.subgraph, impls=skill.impls).compile(**options)


def _quoted(value: str) -> str:
    # A dot would split the attribute path the reference is read by.
    return quote(value, safe="").replace(".", "%2E")


def reference(name: str, model: str | None, workspace: Path | None) -> str:
    """The GRAPH argument a skill run is filed under: ``module:attr`` naming :data:`project`,
    the skill and the options that rebuild it (``resume`` imports it again)."""
    spec = f"{_REFERENCE}.{name}"
    if model is not None:
        spec += f".model={_quoted(model)}"
    if workspace is not None:
        spec += f".workspace={_quoted(str(workspace.resolve()))}"
    return spec


class _Reference:
    """``project.NAME[.model=M][.workspace=W]``: calling it builds skill ``NAME`` of the
    project of the current folder, as ``stargraph skills run`` did."""

    def __init__(self, **parts: str) -> None:
        self._parts = parts

    def __getattr__(self, part: str) -> _Reference:
        if part.startswith("_"):
            raise AttributeError(part)
        if "skill" not in self._parts:
            return _Reference(**self._parts, skill=part)
        key, sep, value = part.partition("=")
        if not sep or key not in ("model", "workspace"):
            raise AttributeError(part)
        return _Reference(**{**self._parts, key: unquote(value)})

    def __call__(self) -> Any:
        if "skill" not in self._parts:
            raise CliUsageError(f"{_REFERENCE} names no skill; pass {_REFERENCE}.NAME")
        workspace = self._parts.get("workspace")
        return _build(
            load_project(),
            self._parts["skill"],
            self._parts.get("model", DEFAULT_MODEL),
            None if workspace is None else Path(workspace),
        )


project: Final = _Reference()
"""What a skill run is filed under: ``project.NAME()`` builds skill ``NAME``."""


# --------------------------------------------------------------------------- commands


@click.group("skills")
def skills_group() -> None:
    """Skills of the project (./skills/: SKILL.md and SkillSpec JSON) and the installed
    plugins."""


@skills_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the skills as JSON.")
def skills_list(as_json: bool) -> None:
    """List skills: name, version, kind, provider (a project file or a plugin), description."""
    found = load_project()
    rows = [
        (
            name,
            skill.version,
            "machine" if name in found.specs else str(skill.kind),
            found.provider(name),
            skill.description.splitlines()[0] if skill.description else "",
        )
        for name, skill in found.registry.skills.items()
    ]
    if as_json:
        keys = ("name", "version", "kind", "provider", "description")
        click.echo(json.dumps([dict(zip(keys, r, strict=True)) for r in rows], indent=2))
        return
    if not rows:
        click.echo(
            "no skills found; write skills/NAME/SKILL.md or a SkillSpec skills/NAME.json in "
            "the project, or install a plugin that provides some (hook register_skills)",
            err=True,
        )
        return
    print_table(("NAME", "VERSION", "KIND", "PROVIDER", "DESCRIPTION"), rows)


def _machine_lines(spec: Any) -> list[str]:
    lines = [f"initial    {spec.initial_state}", f"max steps  {spec.max_steps}", "states:"]
    for name, state in sorted(spec.states.items()):
        moves = ", ".join(f"{t.on} -> {t.to}" for t in state.transitions)
        lines.append(
            f"  {name}{' (terminal: finish)' if state.terminal else ''}: tools "
            f"[{', '.join(state.allowed_tools)}] events [{moves}]"
        )
    return lines


def _workflow_lines(skill: Any) -> list[str]:
    lines = ["workflow:"] if getattr(skill, "workflow", ()) else []
    for i, step in enumerate(getattr(skill, "workflow", ()), 1):
        params = json.dumps(step.params, sort_keys=True)
        lines.append(f"  {i}. {step.step}: {step.tool} {params}")
    return lines


@skills_group.command("show")
@click.argument("name")
def skills_show(name: str) -> None:
    """Show one skill: metadata, tools, declared outputs, graph hash, its states or workflow
    steps, examples."""
    found = load_project()
    skill = found.registry.skill(name)
    graph = skill.subgraph
    graph_hash = graph if isinstance(graph, str) else graph.graph_hash if graph else "-"
    lines = [
        f"skill      {skill.name}@{skill.version}",
        f"kind       {'machine (agent)' if name in found.specs else skill.kind}",
        f"provider   {found.provider(name)}",
        f"graph      {graph_hash}",
        f"outputs    {', '.join(skill.declared_outputs) or '-'}",
        f"tools      {', '.join(skill.tools) or '-'}",
        f"requires   {', '.join(skill.requires) or '-'}",
    ]
    spec = found.specs.get(name)
    lines += _machine_lines(spec) if spec is not None else _workflow_lines(skill)
    lines += ["", skill.description]
    if skill.system_prompt:
        lines += ["", "system prompt:", skill.system_prompt]
    for i, example in enumerate(skill.examples, 1):
        lines += ["", f"example {i}: {example.description}".rstrip(": ")]
        lines.append(f"  input  {json.dumps(example.input, sort_keys=True)}")
        if example.output is not None:
            lines.append(f"  output {json.dumps(example.output, sort_keys=True)}")
    for line in lines:
        click.echo(line)


@skills_group.command("run")
@click.argument("name")
@click.option(
    "--input",
    "input_json",
    help="Input state as JSON (or @file.json); for a SkillSpec machine, its input.",
)
@click.option("--run-id", help="Id for the run (default: a fresh random id).")
@click.option(
    "--db", default=DEFAULT_DB, callback=resolve_db, show_default=True, help="SQLite run database."
)
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder the skill's tools work in (default: the project folder).",
)
@click.option(
    "--model",
    envvar="STARGRAPH_MODEL",
    default=DEFAULT_MODEL,
    show_default=True,
    help="For agents and machines: a model name of the endpoint in OPENAI_BASE_URL, or "
    "module:attr naming a chat model of the project (or a function returning one).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--live/--plain", default=None, help="Live view or plain lines.")
def skills_run(
    *,
    name: str,
    input_json: str | None,
    run_id: str | None,
    db: str,
    workspace: Path | None,
    model: str,
    quiet: bool,
    live: bool | None,
) -> None:
    """Run skill NAME durably on --input; print its final state (JSON) on stdout.

    A SKILL.md workflow calls the project's tools; an agent or a SkillSpec machine talks to
    --model. Every tool call goes through the arbiter with the plugin hooks, inside
    --workspace. The run is kept in --db: `stargraph resume`, `replay` and `show` take it.
    """
    from stargraph.cli._run import _stoppable, _stored

    data = parse_object(input_json, "--input") or {}
    found = load_project()
    skill = found.registry.skill(name)
    if name in found.specs:
        data = {"input": data}
    agent = str(skill.kind) == "agent"
    spec = reference(name, model if agent else None, workspace)
    run_id = run_id or f"{name}-{secrets.token_hex(6)}"
    with open_store(db, must_exist=False) as store:
        app = _build(found, name, model, workspace, store=store)
        archive_ir(db, app.ir, spec=spec)
        hint = f"stargraph resume {run_id}"
        try:
            with _stoppable(store, run_id, hint, quiet=quiet):
                outcome = drive(app.stream(data, run_id=run_id), view(live, quiet))
        except RunError as exc:
            if not _stored(store, run_id):
                error = CliUsageError if isinstance(exc, InvalidInputError) else CliError
                raise error(f"no run was started: {describe_error(exc)}") from exc
            raise CliError(
                f"{describe_error(exc)}. The run is kept: fix the cause and continue it with: "
                f"{hint}"
            ) from exc
        finally:
            app.close()
            for service in app.services.values():
                close = getattr(service, "close", None)
                if callable(close):
                    close()
        report(outcome, app, run_id, spec, db)
