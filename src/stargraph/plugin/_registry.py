"""One registry for skills, tools, nodes, rule packs, stores and models, from every source.

Sources, from lowest to highest scope: ``builtin`` (stargraph's own plugin), ``plugin``
(installed packages, entry-point group ``stargraph``), ``global`` (a directory, e.g.
``~/.stargraph``), ``agent`` (a directory next to the agent). A higher scope overrides a
lower one (logged); a clash within one scope fails loudly, naming both providers. The built
registry is frozen: new versions come from :meth:`Registry.with_skill` (approved proposals),
which returns a new registry and leaves running graphs on the old one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import pluggy

from stargraph.errors import (
    CompileError,
    PluginLoadError,
    Problem,
    RegistryError,
    SkillValidationError,
)
from stargraph.plugin._load import (
    DISABLE_ENV,
    PluginFailure,
    PluginSource,
    describe_error,
    plugin_source,
)
from stargraph.plugin._manager import get_plugin_manager

if TYPE_CHECKING:
    from stargraph.agents import SkillListing
    from stargraph.checkpoint import CheckpointStore
    from stargraph.llm import ChatModel
    from stargraph.tools import Arbiter, ToolRegistry

__all__ = ["Entry", "LoadReport", "Registry", "Scope", "SkillLoader"]

log = logging.getLogger("stargraph.registry")

Scope = Literal["builtin", "plugin", "global", "agent"]
"""Where an entry came from; later scopes override earlier ones."""

SCOPES: Final[tuple[Scope, ...]] = ("builtin", "plugin", "global", "agent")

Kind = Literal["skill", "tool", "node", "rule_pack", "store", "model"]

SkillLoader = Callable[[Path], Any]
"""Reads one skill file (SkillSpec JSON, SKILL.md) into a ``Skill``; raises CompileError."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One registered item and who provided it."""

    kind: Kind
    name: str
    item: Any
    scope: Scope
    provider: str
    source: PluginSource | None = None
    """The entry point and distribution of the installed plugin that registered it."""


@dataclass(frozen=True)
class LoadReport:
    """What a lenient directory scan did."""

    loaded: int = 0
    skipped: tuple[str, ...] = ()
    pruned: tuple[str, ...] = ()
    total_on_disk: int = 0
    problems: tuple[Problem, ...] = field(default=())


def _name_of(kind: Kind, item: Any) -> str:
    if kind == "skill":
        return str(item.name)
    if kind == "tool":
        return str(item.spec.id)
    if kind == "rule_pack":
        return str(item.id)
    raise AssertionError(kind)


def _registrar(
    collected: list[Entry],
    kind: Kind,
    origin: tuple[Scope, str, PluginSource | None],
    *,
    named: bool,
) -> Callable[..., None]:
    """The ``register`` a hook implementation is called with: ``register(item)`` (the item
    names itself) or, when ``named``, ``register(name, item)``; each call appends an entry
    from ``origin`` (scope, provider, source) to ``collected``."""
    scope, provider, source = origin

    def register_named(name: str, item: Any) -> None:
        collected.append(Entry(kind, name, item, scope, provider, source))

    def register(item: Any) -> None:
        register_named(_name_of(kind, item), item)

    return register_named if named else register


def _provider(pm: pluggy.PluginManager, plugin: Any) -> tuple[Scope, str, PluginSource | None]:
    from stargraph.plugin import _builtins

    if plugin is _builtins:
        return "builtin", "stargraph", None
    source = plugin_source(pm, plugin)
    if source is not None:
        return "plugin", source.distribution, source
    return "plugin", _plugin_name(pm, plugin), None


def _plugin_name(pm: pluggy.PluginManager, plugin: Any) -> str:
    return str(pm.get_name(plugin) or getattr(plugin, "__name__", repr(plugin)))


def _hook_failure(
    pm: pluggy.PluginManager, plugin: Any, hook: str, exc: BaseException
) -> PluginFailure:
    return PluginFailure(
        _plugin_name(pm, plugin),
        "hook",
        f"its hook {hook} raised {describe_error(exc)}",
        plugin_source(pm, plugin),
    )


class Registry:
    """The built, frozen registry. Use :meth:`build`; read with the mappings below."""

    def __init__(
        self,
        entries: Iterable[Entry],
        *,
        version: int = 1,
        report: LoadReport | None = None,
        pm: pluggy.PluginManager | None = None,
    ) -> None:
        self._entries: dict[tuple[Kind, str], Entry] = {(e.kind, e.name): e for e in entries}
        self.version = version
        self.report = report or LoadReport()
        self.pm = pm
        self._frozen = True

    # ------------------------------------------------------------------ building

    @classmethod
    def build(
        cls,
        pm: pluggy.PluginManager | None = None,
        *,
        global_dir: str | Path | None = None,
        agent_dir: str | Path | None = None,
        strict: bool = True,
        skill_loaders: Mapping[str, SkillLoader] | None = None,
    ) -> Registry:
        """Collect every hook's registrations, then the skill files of the two directories.

        ``skill_loaders`` maps a file pattern (``"*.json"``, ``"SKILL.md"``) to its loader.
        ``strict=True`` fails with every problem found in the directories; ``strict=False``
        skips bad files and reports ``{loaded, skipped, pruned, total_on_disk}``.
        """
        pm = pm or get_plugin_manager()
        collected: list[Entry] = []
        problems: list[Problem] = []
        failures: list[PluginFailure] = []
        # (kind, hook, whether register() takes the name too): items name themselves.
        hooks: list[tuple[Kind, Any, bool]] = [
            ("skill", pm.hook.register_skills, False),
            ("tool", pm.hook.register_tools, False),
            ("rule_pack", pm.hook.register_rule_packs, False),
            ("node", pm.hook.register_nodes, True),
            ("store", pm.hook.register_checkpoint_stores, True),
            ("model", pm.hook.register_models, True),
        ]
        for kind, hook, named in hooks:
            for impl in hook.get_hookimpls():
                register = _registrar(collected, kind, _provider(pm, impl.plugin), named=named)
                try:
                    impl.function(register=register)
                except Exception as exc:  # any plugin bug: name the plugin, keep going
                    failures.append(_hook_failure(pm, impl.plugin, hook.name, exc))
        if failures:
            raise PluginLoadError(
                [f.problem() for f in failures], plugins=sorted({f.plugin for f in failures})
            )
        report = LoadReport()
        loaders = dict(skill_loaders or {})
        directories: tuple[tuple[Scope, str | Path | None], ...] = (
            ("global", global_dir),
            ("agent", agent_dir),
        )
        for scope, directory in directories:
            if directory is None:
                continue
            found, scan = _scan(Path(directory), loaders, scope, strict)
            collected += found
            problems += scan.problems
            report = LoadReport(
                loaded=report.loaded + scan.loaded,
                skipped=report.skipped + scan.skipped,
                pruned=report.pruned,
                total_on_disk=report.total_on_disk + scan.total_on_disk,
                problems=report.problems + scan.problems,
            )
        if strict and problems:
            raise RegistryError(problems, subject="skill directories")
        entries, report = _check_skill_tools(_resolve(collected), report, strict)
        return cls(entries, report=report, pm=pm)

    # ------------------------------------------------------------------ reading

    def _of(self, kind: Kind) -> dict[str, Any]:
        return {n: e.item for (k, n), e in sorted(self._entries.items()) if k == kind}

    @property
    def skills(self) -> Mapping[str, Any]:
        """Skills by name."""
        return self._of("skill")

    @property
    def tools(self) -> Mapping[str, Any]:
        """Tools by id."""
        return self._of("tool")

    @property
    def nodes(self) -> Mapping[str, Callable[..., Any]]:
        """Node callables by registry id (pass as ``Graph(ir, impls=registry.nodes)``)."""
        return self._of("node")

    @property
    def rule_packs(self) -> Mapping[str, Any]:
        """Rule packs by id (as registered: not checked, like skills and tools)."""
        return self._of("rule_pack")

    def provider(self, kind: Kind, name: str) -> str:
        """Who provided an entry (a distribution name, a file path, ``stargraph``)."""
        return self._entries[(kind, name)].provider

    def skill(self, name: str) -> Any:
        """The skill called ``name``; ``RegistryError`` listing the known ones otherwise."""
        found = self._entries.get(("skill", name))
        if found is None:
            raise RegistryError.at(
                f"skills/{name}",
                f"no skill {name!r}",
                f"known skills: {sorted(self.skills)}",
                subject="registry",
            )
        return found.item

    def match(self, task: str) -> list[Any]:
        """Skills whose triggers (keywords, tags, tool patterns) match ``task``.

        A skill with a ``matches(task)`` method (a SKILL.md skill) decides itself; otherwise
        any trigger contained in the task (case-insensitive) matches.
        """
        words = task.lower()
        out = []
        for skill in self.skills.values():
            matches = getattr(skill, "matches", None)
            if callable(matches):
                if matches(task):
                    out.append(skill)
                continue
            triggers = getattr(skill, "triggers", None) or ()
            if any(str(t).lower() in words for t in triggers):
                out.append(skill)
        return out

    def skill_list(
        self, search: str | None = None, capability: str | None = None
    ) -> list[SkillListing]:
        """The registered skills matching ``search`` (words in name, description, tags) and
        ``capability`` (a tier of the six-tier taxonomy, or any tag), as
        :class:`~stargraph.agents.SkillListing` rows sorted by name."""
        from stargraph.agents import skill_list

        return skill_list(self.skills.values(), search=search, capability=capability)

    def tool_registry(self) -> ToolRegistry:
        """A frozen ``stargraph.tools.ToolRegistry`` of the registered tools."""
        from stargraph.tools import ToolRegistry

        return ToolRegistry.build(builtins=list(self.tools.values()))

    def arbiter(self, workspace: str | Path, **options: Any) -> Arbiter:
        """An ``Arbiter`` over :meth:`tool_registry` wired to the plugin hooks
        ``authorize_action``, ``before_tool_call`` and ``after_tool_call``."""
        from stargraph.tools import Arbiter

        hooks = self.pm.hook if self.pm is not None else None
        policies = list(options.pop("policies", ()))
        if hooks is not None:
            policies.append(lambda call: hooks.authorize_action(call=call))
            options.setdefault("before_call", lambda call: hooks.before_tool_call(call=call))
            options.setdefault(
                "after_call",
                lambda call, result, error: hooks.after_tool_call(
                    call=call, result=result, error=error
                ),
            )
        return Arbiter(self.tool_registry(), workspace=workspace, policies=policies, **options)

    def store(self, url: str) -> CheckpointStore:
        """A checkpoint store for ``url`` from the registered factories (by URL scheme)."""
        scheme = url.split(":", 1)[0]
        factory = self._factory("store", scheme, url, f"no checkpoint store for scheme {scheme!r}")
        from stargraph.checkpoint import CheckpointStore

        store = factory.item(url)
        if not isinstance(store, CheckpointStore):
            raise _not_made(factory, store, "a CheckpointStore")
        return store

    def model(self, name: str, **options: Any) -> ChatModel:
        """A chat model from the registered factories."""
        factory = self._factory("model", name, name, f"no model factory {name!r}")
        from stargraph.llm import ChatModel

        model = factory.item(**options)
        if not isinstance(model, ChatModel):
            raise _not_made(factory, model, "a ChatModel")
        return model

    def _factory(self, kind: Kind, name: str, pointer: str, missing: str) -> Entry:
        """The registered factory ``name`` of ``kind``; ``RegistryError`` (``missing``,
        listing the known ones) when there is none."""
        factory = self._entries.get((kind, name))
        if factory is None:
            raise RegistryError.at(
                pointer, missing, f"known: {sorted(self._of(kind))}", subject="registry"
            )
        return factory

    # ------------------------------------------------------------------ versions

    def register(self, *_: Any, **__: Any) -> None:
        """Always refused: a built registry is frozen."""
        raise RegistryError.at(
            "registry",
            f"registry version {self.version} is frozen",
            "approve a proposal (registry.with_skill) to get a new version",
            subject="registry",
        )

    def with_skill(self, skill: Any, *, provider: str = "proposal") -> Registry:
        """A new registry version with ``skill`` added or replaced (agent scope); its tools
        must be registered and fit its kind, as at :meth:`build`."""
        problems = _tool_problems(skill, _effects(self._entries.values()))
        if problems:
            raise SkillValidationError(
                [
                    Problem(f"{provider}: skills/{skill.name}{p.pointer}", p.message, p.hint)
                    for p in problems
                ],
                subject="skill registry",
            )
        entries = dict(self._entries)
        entries[("skill", skill.name)] = Entry("skill", skill.name, skill, "agent", provider)
        return Registry(entries.values(), version=self.version + 1, report=self.report, pm=self.pm)


def _not_made(factory: Entry, made: object, what: str) -> RegistryError:
    """The error for a registered factory that made something else than ``what``, naming
    the factory and its provider (unchecked, a plugin's bug would surface later, far from
    its cause, as a missing method)."""
    return RegistryError.at(
        f"{factory.kind}s/{factory.name}",
        f"the {factory.kind} factory {factory.name!r} of {factory.provider} returned "
        f"{type(made).__name__}, not {what}",
        f"make the factory return {what}",
        subject="registry",
    )


def _effects(entries: Iterable[Entry]) -> dict[str, str]:
    return {e.name: str(e.item.spec.side_effect) for e in entries if e.kind == "tool"}


def _tool_problems(skill: Any, effects: Mapping[str, str]) -> list[Problem]:
    # A skill type of a third party may lack the check; everything a Skill is gets it.
    check = getattr(skill, "tool_problems", None)
    return list(check(effects, registered=True)) if callable(check) else []


def _check_skill_tools(
    entries: list[Entry], report: LoadReport, strict: bool
) -> tuple[list[Entry], LoadReport]:
    """Every skill's tools are registered and fit its kind (no write or external tool in
    a ``utility`` skill). A skill from a plugin that fails is always an error; a skill file
    from a directory is skipped and reported when ``strict`` is off."""
    effects = _effects(entries)
    problems: list[Problem] = []
    kept: list[Entry] = []
    for entry in entries:
        found = _tool_problems(entry.item, effects) if entry.kind == "skill" else []
        if not found:
            kept.append(entry)
            continue
        located = [
            Problem(f"{entry.provider}: skills/{entry.name}{p.pointer}", p.message, p.hint)
            for p in found
        ]
        if not strict and entry.scope in ("global", "agent"):
            for problem in located:
                log.warning("skipped skill %s", problem.render())
            report = LoadReport(
                loaded=report.loaded - 1,
                skipped=(*report.skipped, entry.provider),
                pruned=report.pruned,
                total_on_disk=report.total_on_disk,
                problems=report.problems + tuple(located),
            )
            continue
        problems.extend(located)
    if problems:
        raise SkillValidationError(problems, subject="skill registry")
    return kept, report


def _resolve(collected: list[Entry]) -> list[Entry]:
    """Apply scopes: clashes within a scope fail (all listed), higher scopes override."""
    by_key: dict[tuple[Kind, str], dict[Scope, list[Entry]]] = {}
    for entry in collected:
        by_key.setdefault((entry.kind, entry.name), {}).setdefault(entry.scope, []).append(entry)
    problems = []
    culprits: set[str] = set()
    out = []
    for (kind, name), scopes in sorted(by_key.items()):
        for scope, entries in scopes.items():
            providers = sorted({e.provider for e in entries})
            if len(entries) > 1:
                sources = sorted({e.source for e in entries if e.source}, key=lambda s: s.name)
                culprits.update(s.name for s in sources)
                problems.append(
                    Problem(
                        f"{kind}s/{name}",
                        f"{kind} {name!r} is registered twice in scope {scope!r}, by "
                        + " and ".join(repr(p) for p in providers)
                        + "".join(f"; {s.describe()}" for s in sources),
                        "uninstall one of the plugins or rename its "
                        + kind.replace("_", " ")
                        + (
                            f", or skip one with {DISABLE_ENV}="
                            + " or ".join(s.name for s in sources)
                            if sources
                            else ""
                        ),
                    )
                )
        winner_scope = max(scopes, key=SCOPES.index)
        winner = scopes[winner_scope][0]
        for scope in scopes:
            if scope != winner_scope:
                for lost in scopes[scope]:
                    log.info(
                        "%s %r from %s (%s scope) overrides the one from %s (%s scope)",
                        kind,
                        name,
                        winner.provider,
                        winner_scope,
                        lost.provider,
                        scope,
                    )
        out.append(winner)
    if problems and culprits:  # installed plugins clash: name their entry points
        raise PluginLoadError(problems, subject="plugin registry", plugins=sorted(culprits))
    if problems:
        raise RegistryError(problems, subject="plugin registry")
    return out


def _walk(directory: Path, patterns: Iterable[str]) -> tuple[list[Path], list[Problem]]:
    """The files under ``directory`` matching a pattern, and a problem for every directory
    that cannot be listed (``Path.rglob`` skips those silently: skills would go missing).
    A directory that does not exist holds no skills."""
    errors: list[OSError] = []
    found: set[Path] = set()
    for root, _dirs, names in os.walk(directory, onerror=errors.append):
        for name in names:
            path = Path(root) / name
            if not any(path.match(pattern) for pattern in patterns):
                continue
            try:
                if path.is_file():
                    found.add(path)
            except OSError as exc:  # listed but not searchable (r without x)
                errors.append(exc)
    problems = [
        Problem(
            str(exc.filename or directory),
            f"cannot list the skill directory: {exc.strerror or exc}",
            "make it readable (chmod u+rx) or remove it",
        )
        for exc in errors
        if not (isinstance(exc, FileNotFoundError) and Path(exc.filename or "") == directory)
    ]
    return sorted(found), problems


def _scan(
    directory: Path, loaders: Mapping[str, SkillLoader], scope: Scope, strict: bool
) -> tuple[list[Entry], LoadReport]:
    files, problems = _walk(directory, loaders)
    entries: list[Entry] = []
    skipped: list[str] = [p.pointer for p in problems]  # directories it could not list
    if not strict:
        for problem in problems:
            log.warning("skipped skill directory %s", problem.render())
    for path in files:
        loader = next(fn for pattern, fn in loaders.items() if path.match(pattern))
        try:
            skill = loader(path)
        except CompileError as exc:
            problems.extend(
                Problem(f"{path}: {p.pointer}", p.message, p.hint) for p in exc.problems
            )
            skipped.append(str(path))
            if not strict:
                log.warning("skipped skill file %s: %s", path, exc)
            continue
        entries.append(Entry("skill", skill.name, skill, scope, str(path)))
    return entries, LoadReport(
        loaded=len(entries),
        skipped=tuple(skipped),
        total_on_disk=len(files),
        problems=tuple(problems),
    )
