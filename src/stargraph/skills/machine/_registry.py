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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NoReturn

from stargraph.errors import RegistryError, SkillValidationError
from stargraph.skills.machine._spec import KnownTools, SkillSpec, load_skillspec
from stargraph.tools import canonical_json, sha256_hex
from stargraph.tools._layers import LayerReport, SkippedFile, load_layers

__all__ = ["SkillLoadReport", "SkillSpecRegistry", "SkippedSpec"]

logger = logging.getLogger("stargraph.skills.machine")


@dataclass(frozen=True, slots=True)
class SkippedSpec(SkippedFile):
    """A SkillSpec file left out by a non-strict build, with every reason."""


@dataclass(frozen=True, slots=True)
class SkillLoadReport(LayerReport[SkippedSpec]):
    """What a build did: ``{loaded, skipped, pruned, total_on_disk}``."""


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
        tools: KnownTools | None = None,
        strict: bool = True,
    ) -> SkillSpecRegistry:
        """Load built-ins, then ``global_dir``, then ``agent_dir`` (``*.json`` SkillSpecs).

        ``tools`` (a ``ToolRegistry``) checks every ``allowed_tools`` entry.
        """
        layered = load_layers(
            [(spec, spec.source) for spec in builtins],
            [("global", global_dir), ("agent", agent_dir)],
            load=lambda file: load_skillspec(file, tools=tools),
            name_of=lambda spec: spec.name,
            label_of=lambda spec: spec.name,
            invalid=SkillValidationError,
            noun="skill",
            file_noun="SkillSpec",
            subject="skill registry",
            strict=strict,
            logger=logger,
        )
        specs = {name: placed.item for name, placed in layered.placed.items()}
        report = SkillLoadReport(
            tuple(sorted(specs)),
            tuple(SkippedSpec(path, reasons) for path, reasons in layered.skipped),
            tuple(f"{old.item.name} ({old.source})" for old in layered.replaced),
            layered.total_on_disk,
        )
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
