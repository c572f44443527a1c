"""The project the ``skills`` commands work in: its folder, its ``@tool``s and its skills.

The project is the nearest folder holding ``.stargraph/`` (searched upwards as ``--db`` is,
stopping at the top of a git repository), else the top of the git repository, else the
current folder. Its tools are the ``Tool`` objects (``@tool`` functions) at module level of
the module ``[tool.stargraph] tools = "mypkg.tools"`` in its ``pyproject.toml`` names, else of
``tools.py`` (or a ``tools/`` package) in the project folder: no plugin package is needed.
Its skills are the ``SKILL.md`` files and the SkillSpec ``*.json`` files under ``skills/``.

Project skills and installed ones share one name space: a name defined twice (in two project
files, or by a project file and an installed plugin) is an error naming both, since the
command line could not tell which one the user means.
"""

from __future__ import annotations

import importlib
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from stargraph.errors import CompileError, Problem, RegistryError, SkillValidationError
from stargraph.plugin import hookimpl

__all__ = ["Project", "find_project", "load_project"]

SKILLS_DIR: Final = "skills"
"""The project's skills folder."""


def _tools_hint(tool: str) -> str:
    """How to provide ``tool``: a project ``@tool`` (with a version, as ids need) or a
    plugin."""
    tool_id = tool if "@" in tool or tool.endswith(".*") else f"{tool}@1.0.0"
    return (
        f"define it with @tool(id={tool_id!r}) in tools.py in the project folder (or in the "
        "module [tool.stargraph] tools names in pyproject.toml), or install a plugin that "
        "registers it"
    )


def find_project(start: Path | None = None) -> Path:
    """The project folder for ``start`` (the current folder): see the module docstring."""
    here = (Path.cwd() if start is None else start).resolve()
    for folder in (here, *here.parents):
        if (folder / ".stargraph").is_dir():
            return folder
        if (folder / ".git").exists():
            return folder
    return here


@dataclass(frozen=True)
class Project:
    """A project's registry (installed skills and tools plus the project's own) and where
    each of its own skills came from."""

    root: Path
    """The project folder."""
    registry: Any
    """The :class:`~stargraph.plugin.Registry` the commands read."""
    tools_module: str | None = None
    """The module the project's tools came from, if any."""
    files: Mapping[str, Path] = field(default_factory=dict)
    """Project skill name -> the file that defines it."""
    specs: Mapping[str, Any] = field(default_factory=dict)
    """Project skill name -> its SkillSpec (for the skills that are state machines)."""

    def provider(self, name: str) -> str:
        """Who provides skill ``name``: its file relative to the project, or the plugin."""
        if name in self.files:
            return _relative(self.files[name], self.root)
        return str(self.registry.provider("skill", name))


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------- tools


def _tools_module_name(root: Path) -> tuple[str | None, str]:
    """The module holding the project's tools and how it was found (for messages)."""
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise RegistryError.at(
                str(pyproject),
                f"cannot read the project's pyproject.toml: {exc}",
                "fix the file (it must be UTF-8 TOML)",
                subject="project tools",
            ) from None
        named = data.get("tool", {}).get("stargraph", {}).get("tools")
        if named is not None:
            if not isinstance(named, str) or not all(p.isidentifier() for p in named.split(".")):
                raise RegistryError.at(
                    f"{pyproject}#/tool/stargraph/tools",
                    f"[tool.stargraph] tools must name a module, got {named!r}",
                    'write e.g. tools = "mypkg.tools"',
                    subject="project tools",
                )
            return named, f"[tool.stargraph] tools in {pyproject}"
    if (root / "tools.py").is_file() or (root / "tools" / "__init__.py").is_file():
        return "tools", f"tools module in {root}"
    return None, ""


def _import_tools(root: Path, name: str, how: str) -> ModuleType:
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    loaded = sys.modules.get(name)
    where = getattr(loaded, "__file__", None)
    if loaded is not None and where and not Path(where).resolve().is_relative_to(root):
        raise RegistryError.at(
            how,
            f"the project's tools module {name!r} is already imported from {where}",
            'name the project\'s module in pyproject.toml: [tool.stargraph] tools = "mypkg.tools"',
            subject="project tools",
        )
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise RegistryError.at(
            how,
            f"importing the project's tools module {name!r} raised {type(exc).__name__}: {exc}",
            "fix the module (this is an error in your code, not in stargraph; --debug shows "
            "the traceback)",
            subject="project tools",
        ) from exc


def project_tools(root: Path) -> tuple[str | None, list[Any]]:
    """The project's tools module (or None) and the tools defined in it."""
    from stargraph.tools import Tool

    name, how = _tools_module_name(root)
    if name is None:
        return None, []
    module = _import_tools(root, name, how)
    found = [v for k, v in vars(module).items() if not k.startswith("_") and isinstance(v, Tool)]
    return name, found


class _ProjectToolsPlugin:
    """Registers the project's tools through the same hook as an installed plugin."""

    def __init__(self, tools: Iterable[Any]) -> None:
        self.tools = list(tools)

    @hookimpl
    def register_tools(self, register: Any) -> None:
        """Each of the project's tools."""
        for tool in self.tools:
            register(tool)


# --------------------------------------------------------------------------- skills


def _skill_files(folder: Path) -> list[Path]:
    """SKILL.md files, and SkillSpec JSON files outside SKILL.md folders (a SKILL.md skill
    may keep JSON among its own files), under ``folder``; hidden folders are skipped."""
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.rglob("*")):
        inside = path.relative_to(folder).parts
        if any(part.startswith(".") for part in inside) or not path.is_file():
            continue
        in_skill_md_folder = any(
            (parent / "SKILL.md").is_file()
            for parent in path.parents
            if parent != folder and parent.is_relative_to(folder)
        )
        if path.name == "SKILL.md" or (path.suffix == ".json" and not in_skill_md_folder):
            found.append(path)
    return found


def _load_skill(path: Path) -> tuple[Any, Any]:
    """The Skill in ``path`` and, for a SkillSpec file, its spec."""
    if path.name == "SKILL.md":
        from stargraph.skills.markdown import load_skill_md

        return load_skill_md(path), None
    from stargraph.skills.machine import compile_skillspec, load_skillspec

    spec = load_skillspec(path)
    return compile_skillspec(spec), spec


def _tools_named(skill: Any, spec: Any) -> list[tuple[str, str]]:
    """``(pointer, tool)`` for every tool a project skill names."""
    if spec is not None:
        return [
            (f"#/states/{name}/allowed_tools/{i}", tool)
            for name, state in sorted(spec.states.items())
            for i, tool in enumerate(state.allowed_tools)
        ]
    out = [(f"#/tools/{i}", tool) for i, tool in enumerate(skill.tools)]
    out += [(f"#/workflow/{i}/tool", s.tool) for i, s in enumerate(getattr(skill, "workflow", ()))]
    for i, check in enumerate(getattr(skill, "verification", ())):
        if getattr(check, "tool", None):
            out.append((f"#/verification/{i}/tool", check.tool))
    return out


def _provided(tool: str, tools: Any) -> bool:
    from stargraph.tools import matches_allowlist

    if tool.endswith(".*"):
        return any(matches_allowlist(t, [tool]) for t in tools.ids)
    return tool in tools


def _missing_tools(name: str, shown: str, skill: Any, spec: Any, tools: Any) -> list[Problem]:
    return [
        Problem(
            f"{shown}{pointer}",
            f"skill {name!r} names tool {tool!r}, which no one provides (known tools: "
            f"{', '.join(tools.ids) or 'none'})",
            _tools_hint(tool),
        )
        for pointer, tool in _tools_named(skill, spec)
        if not _provided(tool, tools)
    ]


def load_project(start: Path | None = None) -> Project:
    """The installed registry plus the project's tools and skills; every problem of the
    project's files at once (:class:`~stargraph.errors.SkillValidationError`), and a skill
    name defined twice as a :class:`~stargraph.errors.RegistryError` naming both places."""
    from stargraph.plugin import Registry, get_plugin_manager

    root = find_project(start)
    module, tools = project_tools(root)
    pm = get_plugin_manager()
    if tools:
        pm.register(_ProjectToolsPlugin(tools), name=f"{module} (project tools)")
    base = Registry.build(pm)
    tool_registry = base.tool_registry()
    problems: list[Problem] = []
    loaded: dict[str, list[tuple[Path, Any, Any]]] = {}
    for path in _skill_files(root / SKILLS_DIR):
        shown = _relative(path, root)
        try:
            skill, spec = _load_skill(path)
        except CompileError as exc:
            problems += [_rehome(p, path, shown) for p in exc.problems]
            continue
        problems += _missing_tools(skill.name, shown, skill, spec, tool_registry)
        loaded.setdefault(skill.name, []).append((path, skill, spec))
    if problems:
        raise SkillValidationError(problems, subject=f"skills folder {root / SKILLS_DIR}")
    clashes = []
    for name, places in sorted(loaded.items()):
        where = [_relative(p, root) for p, _, _ in places]
        if name in base.skills:
            provider = base.provider("skill", name)
            where.append(
                "stargraph (built in)" if provider == "stargraph" else f"plugin {provider}"
            )
        if len(where) > 1:
            clashes.append(
                Problem(
                    f"skills/{name}",
                    f"skill {name!r} is defined twice, by {' and by '.join(where)}",
                    "rename one of them (a SKILL.md's name:, a SkillSpec's name), or skip the "
                    "plugin with STARGRAPH_DISABLE_PLUGINS",
                )
            )
    if clashes:
        raise RegistryError(clashes, subject=f"skills folder {root / SKILLS_DIR}")
    registry = base
    files: dict[str, Path] = {}
    specs: dict[str, Any] = {}
    for name, [(path, skill, spec)] in sorted(loaded.items()):
        registry = registry.with_skill(skill, provider=_relative(path, root))
        files[name] = path
        if spec is not None:
            specs[name] = spec
    return Project(root, registry, module, files, specs)


def _rehome(problem: Problem, path: Path, shown: str) -> Problem:
    """A loader's problem, pointing at the file as the project shows it."""
    pointer = problem.pointer
    for prefix in (str(path), str(path.resolve())):
        if pointer.startswith(prefix):
            pointer = shown + pointer[len(prefix) :]
            break
    return Problem(pointer, problem.message, problem.hint)
