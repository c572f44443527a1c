"""``SkillSpecRegistry``: every SkillSpec of an agent, loaded once and frozen.

Load order is built-ins, then the global directory, then the agent directory:
a spec in a later scope replaces the spec of the same name from an earlier scope and the
override is logged; two specs with one name in the *same* scope fail, naming both files.
``strict=True`` (the default) fails on any invalid file with every problem of every file and
builds nothing; ``strict=False`` skips bad files and reports them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

from stargraph.errors import Problem, RegistryError, SkillValidationError
from stargraph.skills.machine._spec import SkillSpec, load_skillspec
from stargraph.tools import canonical_json, sha256_hex

__all__ = ["SkillLoadReport", "SkillSpecRegistry", "SkippedSpec"]

logger = logging.getLogger("stargraph.skills.machine")


@dataclass(frozen=True, slots=True)
class SkippedSpec:
    """A SkillSpec file left out by a non-strict build, with every reason."""

    path: str
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SkillLoadReport:
    """What a build did: ``{loaded, skipped, pruned, total_on_disk}``."""

    loaded: tuple[str, ...]
    skipped: tuple[SkippedSpec, ...]
    pruned: tuple[str, ...]
    total_on_disk: int

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data."""
        return {
            "loaded": list(self.loaded),
            "skipped": [{"path": s.path, "reasons": list(s.reasons)} for s in self.skipped],
            "pruned": list(self.pruned),
            "total_on_disk": self.total_on_disk,
        }


class SkillSpecRegistry:
    """Frozen mapping from skill name to :class:`SkillSpec`; build it with :meth:`build`.

    ``version`` is a digest over every spec: a changed skill set is a new registry version.
    """

    __slots__ = ("_specs", "report", "version")

    def __init__(self, specs: Mapping[str, SkillSpec], report: SkillLoadReport) -> None:
        self._specs: Mapping[str, SkillSpec] = MappingProxyType(dict(sorted(specs.items())))
        self.report = report
        self.version = sha256_hex(canonical_json([s.to_json() for s in self._specs.values()]))

    @classmethod
    def build(
        cls,
        *,
        builtins: Iterable[SkillSpec] = (),
        global_dir: str | os.PathLike[str] | None = None,
        agent_dir: str | os.PathLike[str] | None = None,
        tools: Collection[str] | None = None,
        strict: bool = True,
    ) -> SkillSpecRegistry:
        """Load built-ins, then ``global_dir``, then ``agent_dir`` (``*.json`` SkillSpecs).

        ``tools`` (a ``ToolRegistry``) checks every ``allowed_tools`` entry.
        """
        scopes: list[tuple[str, list[tuple[SkillSpec, str]]]] = [
            ("builtin", [(spec, spec.source) for spec in builtins])
        ]
        problems: list[Problem] = []
        skipped: list[SkippedSpec] = []
        total = 0
        for scope, directory in (("global", global_dir), ("agent", agent_dir)):
            if directory is None:
                continue
            files, unreadable = _json_files(Path(directory))
            if unreadable is not None:
                problems.append(unreadable)
                skipped.append(SkippedSpec(str(directory), (unreadable.render(),)))
            total += len(files)
            loaded: list[tuple[SkillSpec, str]] = []
            for file in files:
                try:
                    loaded.append((load_skillspec(file, tools=tools), str(file)))
                except SkillValidationError as exc:
                    problems.extend(exc.problems)
                    skipped.append(SkippedSpec(str(file), tuple(p.render() for p in exc.problems)))
            scopes.append((scope, loaded))
        if strict and problems:
            raise SkillValidationError(problems, subject="skill registry")
        specs: dict[str, SkillSpec] = {}
        sources: dict[str, tuple[str, str]] = {}
        pruned: list[str] = []
        for scope, entries in scopes:
            seen: dict[str, str] = {}
            clashes: list[Problem] = []
            for spec, source in entries:
                if spec.name in seen:
                    clashes.append(
                        Problem(
                            f"{scope}:{spec.name}",
                            f"skill {spec.name!r} is defined twice in the {scope} scope: "
                            f"{seen[spec.name]} and {source}",
                            "remove or rename one of them",
                        )
                    )
                    continue
                seen[spec.name] = source
                if spec.name in specs:
                    old_scope, old_source = sources[spec.name]
                    logger.info(
                        "skill %s from %s (%s) overrides the one from %s (%s)",
                        spec.name,
                        scope,
                        source,
                        old_scope,
                        old_source,
                    )
                    pruned.append(f"{spec.name} ({old_source})")
                specs[spec.name] = spec
                sources[spec.name] = (scope, source)
            if clashes:
                raise RegistryError(clashes, subject="skill registry")
        for skip in skipped:
            logger.warning("skipped SkillSpec %s: %s", skip.path, "; ".join(skip.reasons))
        report = SkillLoadReport(tuple(sorted(specs)), tuple(skipped), tuple(pruned), total)
        return cls(specs, report)

    def register(self, *_: Any, **__: Any) -> NoReturn:
        """Always raises: the registry is frozen once built."""
        raise RegistryError.at(
            "skill registry",
            "the skill registry is frozen after build",
            "build a new registry version with SkillSpecRegistry.build(...)",
            subject="skill registry",
        )

    def __getitem__(self, name: str) -> SkillSpec:
        return self._specs[name]

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[SkillSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    @property
    def names(self) -> tuple[str, ...]:
        """Every skill name, sorted."""
        return tuple(self._specs)

    def __repr__(self) -> str:
        return f"SkillSpecRegistry({list(self._specs)}, version={self.version[:12]})"


def _json_files(directory: Path) -> tuple[list[Path], Problem | None]:
    """The ``*.json`` files of ``directory`` (none if it does not exist), or the problem
    when it cannot be listed: ``Path.glob`` would silently find nothing there."""
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries if e.name.endswith(".json")]
    except FileNotFoundError:
        return [], None
    except OSError as exc:
        return [], Problem(
            str(directory),
            f"cannot list the skill directory: {exc.strerror or exc}",
            "make it readable (chmod u+rx) or remove it",
        )
    return sorted(directory / n for n in names), None
