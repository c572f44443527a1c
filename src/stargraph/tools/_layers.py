"""Scoped loading, shared by the tool registry and the SkillSpec registry.

Both load built-ins, then the ``*.json`` files of a global directory, then those of an agent
directory. An item of a later scope replaces the item of the same name from an earlier one
(the override is logged); two items with one name in the *same* scope fail, naming both
sources. ``strict`` fails on any invalid file with every problem of every file; otherwise
bad files are skipped and reported. A directory that cannot be listed is a problem like an
invalid file (``Path.glob`` would silently find nothing there); one that does not exist
holds nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from stargraph.errors import CompileError, Problem, RegistryError

__all__ = ["LayerReport", "Layered", "Placed", "SkippedFile", "load_layers"]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file left out by a non-strict build, with every reason."""

    path: str
    reasons: tuple[str, ...]


_Skipped = TypeVar("_Skipped", bound=SkippedFile)


@dataclass(frozen=True, slots=True)
class LayerReport(Generic[_Skipped]):
    """What a layered build did: what it loaded, the files it skipped (non-strict), what
    later scopes overrode, and how many files the directories held."""

    loaded: tuple[str, ...]
    skipped: tuple[_Skipped, ...]
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


@dataclass(frozen=True, slots=True)
class Placed(Generic[_T]):
    """An item with the scope it came from and its source (a file, ``module:qualname``)."""

    item: _T
    scope: str
    source: str


@dataclass(frozen=True, slots=True)
class Layered(Generic[_T]):
    """What :func:`load_layers` found."""

    placed: dict[str, Placed[_T]]
    """The item kept for each name: the one of the latest scope."""
    replaced: tuple[Placed[_T], ...]
    """Every item a later scope overrode, in the order they were overridden."""
    skipped: tuple[tuple[str, tuple[str, ...]], ...]
    """``(path, reasons)`` of every file or directory left out (non-strict builds)."""
    total_on_disk: int
    """How many ``*.json`` files the directories held."""


def load_layers(
    builtins: Iterable[tuple[_T, str]],
    directories: Iterable[tuple[str, str | os.PathLike[str] | None]],
    *,
    load: Callable[[Path], _T],
    name_of: Callable[[_T], str],
    label_of: Callable[[_T], str],
    invalid: type[CompileError],
    noun: str,
    file_noun: str,
    subject: str,
    strict: bool,
    logger: logging.Logger,
) -> Layered[_T]:
    """Load ``builtins`` (``(item, source)``) as scope ``builtin``, then each
    ``(scope, directory)`` with ``load`` (which raises ``invalid`` for a bad file).

    ``name_of`` is the key items override each other by; ``label_of`` names an item in the
    log. ``noun`` (``"tool"``) and ``file_noun`` (``"tool manifest"``) word the log and the
    problems; ``subject`` (``"tool registry"``) the errors.
    """
    scopes: list[tuple[str, list[tuple[_T, str]]]] = [("builtin", list(builtins))]
    problems: list[Problem] = []
    skipped: list[tuple[str, tuple[str, ...]]] = []
    total = 0
    for scope, directory in directories:
        if directory is None:
            continue
        files, unreadable = _json_files(Path(directory), noun)
        if unreadable is not None:
            problems.append(unreadable)
            skipped.append((str(directory), (unreadable.render(),)))
        total += len(files)
        loaded: list[tuple[_T, str]] = []
        for file in files:
            try:
                loaded.append((load(file), str(file)))
            except invalid as exc:
                problems.extend(exc.problems)
                skipped.append((str(file), tuple(p.render() for p in exc.problems)))
        scopes.append((scope, loaded))
    if strict and problems:
        raise invalid(problems, subject=subject)
    placed: dict[str, Placed[_T]] = {}
    replaced: list[Placed[_T]] = []
    for scope, items in scopes:
        seen: dict[str, str] = {}
        clashes: list[Problem] = []
        for item, source in items:
            name = name_of(item)
            if name in seen:
                clashes.append(
                    Problem(
                        f"{scope}:{name}",
                        f"defined twice in the {scope} scope: {seen[name]} and {source}",
                        "remove or rename one of them",
                    )
                )
                continue
            seen[name] = source
            previous = placed.get(name)
            if previous is not None:
                logger.info(
                    "%s %s from %s (%s) overrides %s from %s (%s)",
                    noun,
                    label_of(item),
                    scope,
                    source,
                    label_of(previous.item),
                    previous.scope,
                    previous.source,
                )
                replaced.append(previous)
            placed[name] = Placed(item, scope, source)
        if clashes:
            raise RegistryError(clashes, subject=subject)
    for path, reasons in skipped:
        logger.warning("skipped %s %s: %s", file_noun, path, "; ".join(reasons))
    return Layered(placed, tuple(replaced), tuple(skipped), total)


def _json_files(directory: Path, noun: str) -> tuple[list[Path], Problem | None]:
    """The ``*.json`` files of ``directory`` (none if it does not exist), or the problem
    when it cannot be listed."""
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries if e.name.endswith(".json")]
    except FileNotFoundError:
        return [], None
    except OSError as exc:
        return [], Problem(
            str(directory),
            f"cannot list the {noun} directory: {exc.strerror or exc}",
            "make it readable (chmod u+rx) or remove it",
        )
    return sorted(directory / n for n in names), None
