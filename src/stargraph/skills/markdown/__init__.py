"""SKILL.md: skills written as a markdown file with YAML frontmatter.

A skill folder holds ``SKILL.md`` and, optionally, a ``references/`` folder of supporting
documents (recorded, not read)::

    ---
    name: save-notes                      # ^[a-z][a-z0-9-]+$
    description: Copy the notes into the archive.
    version: 1.0.0                        # SemVer; default 0.1.0
    kind: workflow                        # agent | workflow | utility
    tools: [choir.fs.read@1.0.0, choir.fs.write@1.0.0]
    triggers: [archive notes, "#notes", "tool:choir.fs.*"]
    tags: [gsd-execution, notes]          # at most one tier (SkillTier), plus free tags
    required_tools: [choir.fs.read, choir.fs.write]
    workflow:
      - {step: read the notes, tool: choir.fs.read@1.0.0, params: {path: notes.txt}}
      - {step: archive them, tool: choir.fs.write@1.0.0,
         params: {path: archive/notes.txt, content: archived}}
    verification:
      - "the archive exists"                                  # prose: listed, not checked
      - {check: archived, tool: choir.fs.read@1.0.0, params: {path: archive/notes.txt},
         contains: archived}
    ---
    The body becomes the skill's system prompt.

Without frontmatter the donor's section format is read instead: ``## Triggers``,
``## Required tools``, ``## Workflow``, ``## Verification`` ... headings whose content is the
YAML (a bulleted list is YAML); the name comes from a ``## Name`` section or a slug ``#``
title, and the remaining sections form the system prompt.

What a file compiles to:

* ``workflow`` - a linear graph over :class:`WorkflowState`: one node per step that calls
  the step's tool through ``ctx.services["arbiter"]`` with its static ``params`` (node config,
  so in the graph hash), then a ``verify`` node for ``verification``. A failed step halts the
  run (rule ``workflow/step_failed``); failed checks are listed in
  ``verification_failures`` and halt it with rule ``workflow/verification_failed``, so the
  run ends ``halted`` and ``stopped_by`` in the run record says which, and the state still
  holds every result.
  (A run error was the alternative; a halt keeps the results inspectable.)
* ``kind: agent`` without ``workflow`` - :func:`~stargraph.skills.react.react_skill` over the
  skill's ``tools`` with the body as system prompt (``model``, ``max_steps``,
  ``error_budget``, ``temperature`` and ``request``, the
  :class:`~stargraph.llm.RequestOptions` of every model call such as
  ``{max_tokens: 256, seed: 7}``, are passed through when given).

Every problem of a file is collected and raised as one
:class:`~stargraph.errors.SkillValidationError` whose pointers read ``<file>#/<key>``.
Unknown keys are kept (``MarkdownSkill.extra``) and warned about with
:class:`UnknownKeyWarning`. ``skill_md_loaders()`` plugs the loader into
``Registry.build(..., skill_loaders=...)``; ``registry.match(task)`` uses
:meth:`MarkdownSkill.matches`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from stargraph.errors import SkillValidationError
from stargraph.skills.markdown._parse import (
    MarkdownSkill,
    Trigger,
    UnknownKeyWarning,
    load_skill_md,
    parse_skill_md,
)
from stargraph.skills.markdown._workflow import (
    Check,
    StepResult,
    WorkflowOutput,
    WorkflowState,
    WorkflowStep,
    workflow_graph,
)

__all__ = [
    "Check",
    "ENV_VAR",
    "MarkdownSkill",
    "StepResult",
    "Trigger",
    "UnknownKeyWarning",
    "WorkflowOutput",
    "WorkflowState",
    "WorkflowStep",
    "discover_skill_dirs",
    "load_skill_md",
    "parse_skill_md",
    "registry_dirs",
    "skill_md_loaders",
    "workflow_graph",
]

ENV_VAR: Final = "STARGRAPH_SKILLS_DIR"
"""Environment variable naming a skills directory (searched first)."""


# --------------------------------------------------------------------------- discovery


def discover_skill_dirs(
    *, cwd: str | os.PathLike[str] | None = None, home: str | os.PathLike[str] | None = None
) -> list[Path]:
    """Existing skill directories, in search order: ``$STARGRAPH_SKILLS_DIR``, ``./skills/``,
    ``~/.stargraph/skills/``."""
    here = Path(cwd) if cwd is not None else Path.cwd()
    user = Path(home) if home is not None else Path.home()
    candidates = [here / "skills", user / ".stargraph" / "skills"]
    env = os.environ.get(ENV_VAR)
    if env:
        candidates.insert(0, Path(env).expanduser())
    out: list[Path] = []
    for path in candidates:
        if _is_dir(path) and path.resolve() not in [p.resolve() for p in out]:
            out.append(path)
    return out


def _is_dir(path: Path) -> bool:
    """Whether ``path`` is a directory; a typed error when that cannot even be checked (no
    search permission on a parent), instead of a bare ``PermissionError``."""
    try:
        return path.is_dir()
    except OSError as exc:
        raise SkillValidationError.at(
            str(path),
            f"cannot check the skill directory: {exc.strerror or exc}",
            f"make its parent directories searchable (chmod u+x), or point {ENV_VAR} elsewhere",
            subject="skill directories",
        ) from None


def registry_dirs(
    *, cwd: str | os.PathLike[str] | None = None, home: str | os.PathLike[str] | None = None
) -> dict[str, Path]:
    """``Registry.build`` keyword arguments for the discovered directories: ``agent_dir`` is
    ``./skills/`` (project skills win), ``global_dir`` is ``$STARGRAPH_SKILLS_DIR`` when set,
    else ``~/.stargraph/skills/``. Missing directories are left out."""
    here = Path(cwd) if cwd is not None else Path.cwd()
    user = Path(home) if home is not None else Path.home()
    env = os.environ.get(ENV_VAR)
    found = {
        "global_dir": Path(env).expanduser() if env else user / ".stargraph" / "skills",
        "agent_dir": here / "skills",
    }
    return {k: v for k, v in found.items() if _is_dir(v)}


def skill_md_loaders() -> dict[str, Any]:
    """The ``skill_loaders`` mapping for ``Registry.build``: ``{"SKILL.md": load_skill_md}``."""
    return {"SKILL.md": load_skill_md}
