"""Reading skill files and turning pydantic's complaints into problems, the same way for
every skill format (SkillSpec JSON, SKILL.md) and every model a skill file fills; the base
of those models."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import ValidationError

from stargraph._typed import TypedModel
from stargraph.errors import Problem, SkillValidationError, _ProblemsError

__all__ = ["SkillModel", "read_utf8", "validation_problems"]


class SkillModel(TypedModel):
    """A public skill model (SkillSpec, prompt levels, schemas, SKILL.md parts) whose
    validation errors are one :class:`~stargraph.errors.SkillValidationError`."""

    typed_error: ClassVar[type[_ProblemsError]] = SkillValidationError


def read_utf8(path: Path, *, subject: str, encoding: str = "utf-8", rule: str) -> str:
    """The text of ``path``; a file that cannot be read or is not UTF-8 is a
    :class:`~stargraph.errors.SkillValidationError` about ``subject`` naming the first bad
    byte. ``rule`` says what the format asks for (``"SKILL.md files must be UTF-8 text"``);
    ``encoding="utf-8-sig"`` also accepts a byte-order mark."""
    try:
        return path.read_bytes().decode(encoding)
    except OSError as exc:
        raise SkillValidationError(
            [Problem(f"{path}#", f"cannot read the file: {exc}", "check the path")],
            subject=subject,
        ) from exc
    except UnicodeDecodeError as exc:
        raise SkillValidationError(
            [
                Problem(
                    f"{path}#",
                    f"the file is not UTF-8: byte 0x{exc.object[exc.start]:02x} at offset "
                    f"{exc.start} ({exc.reason})",
                    f"{rule}; save the file as UTF-8",
                )
            ],
            subject=subject,
        ) from None


def validation_problems(exc: ValidationError, hint: str) -> list[Problem]:
    """One problem per error of ``exc``, at its JSON pointer, with the value it got and
    ``hint``. A :class:`~stargraph.errors.SkillValidationError` that a validator raised
    keeps its own problems."""
    problems: list[Problem] = []
    for err in exc.errors(include_url=False):
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, SkillValidationError):
            problems.extend(cause.problems)
            continue
        where = "/" + "/".join(str(p) for p in err["loc"])
        problems.append(Problem(where, f"{err['msg']} (got {err.get('input')!r})", hint))
    return problems
