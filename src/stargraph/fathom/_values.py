"""State fields marked as facts, and the strings that cross into CLIPS and back.

Values reach CLIPS only as clipspy values (``Environment.call`` arguments), never as source
text, so no value can inject a construct. Two things still need care, because clipspy hands
strings to C as NUL-terminated UTF-8:

* a NUL would silently truncate the string, and
* a lone surrogate cannot be encoded at all.

Such strings are escaped reversibly with a private-use character (U+F8FF) before they cross,
and decoded when they come back. Strings without those three characters, which is every
string a rule pack is likely to compare against, cross unchanged, so literals in rules still
match. The conversion of whole values, which needs clipspy, is
:mod:`stargraph.fathom._clipsval`: this module does not import clipspy, so declaring a state
with facts or a rule pack does not load it.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Final, Union, get_args, get_origin

from pydantic import BaseModel

from stargraph.errors import Problem, RuleCompileError

__all__ = ["Fact", "FactField", "decode_string", "encode_string", "fact_fields"]


class Fact:
    """Marks a state field as visible to rules: ``steps: Annotated[int, Fact()] = 0``.

    Only marked fields become slots of the ``sg-state`` template; the rest of the state stays
    out of CLIPS, so rules cannot depend on data the graph did not choose to expose.
    """

    __slots__ = ()
    # How stargraph.state recognises the marker without importing this package (and clipspy).
    __stargraph_fact__ = True

    def __repr__(self) -> str:
        return "Fact()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fact)

    def __hash__(self) -> int:
        return hash(Fact)


# The Python types a fact slot can carry, and the CLIPS slot declaration each one gets.
_SLOT_TYPES: Final[dict[type, str]] = {
    bool: "(type SYMBOL) (allowed-symbols TRUE FALSE) (default FALSE)",
    int: "(type INTEGER) (default 0)",
    float: "(type FLOAT) (default 0.0)",
    str: '(type STRING) (default "")',
}
_OPTIONAL_SLOT_TYPES: Final[dict[type, str]] = {
    bool: "(type SYMBOL) (allowed-symbols TRUE FALSE nil) (default nil)",
    int: "(type INTEGER SYMBOL) (allowed-symbols nil) (default nil)",
    float: "(type FLOAT SYMBOL) (allowed-symbols nil) (default nil)",
    str: "(type STRING SYMBOL) (allowed-symbols nil) (default nil)",
}
_SLOT_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


class FactField(typing.NamedTuple):
    """One fact slot: its Python base type and whether ``None`` is allowed."""

    base: type
    optional: bool

    def slot_declaration(self) -> str:
        """The CLIPS type/default attributes of this slot (constant text, no user values)."""
        table = _OPTIONAL_SLOT_TYPES if self.optional else _SLOT_TYPES
        return table[self.base]


class OpenField(FactField):
    """A slot of any type, for checking a pack without the state model it will run with:
    CLIPS then checks how a rule uses the slot, not what it holds."""

    __slots__ = ()

    def slot_declaration(self) -> str:
        """No type constraint, ``nil`` by default."""
        return "(default nil)"


def _unwrap(annotation: Any) -> Any:
    """Strip ``Annotated`` so ``Annotated[int | None, Fact()]`` yields ``int | None``."""
    while get_origin(annotation) is typing.Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def fact_field(name: str, annotation: Any) -> FactField:
    """Classify one annotation as a fact slot; raise RuleCompileError if CLIPS cannot hold it."""
    problem = None
    tp = _unwrap(annotation)
    optional = False
    if get_origin(tp) in (Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        optional = len(members) < len(get_args(tp))
        tp = _unwrap(members[0]) if len(members) == 1 else None
    if not _SLOT_NAME.match(name):
        problem = Problem(
            f"fact {name!r}",
            "a fact field name must be a plain identifier starting with a letter",
            "rename the field",
        )
    elif tp not in _SLOT_TYPES:
        problem = Problem(
            f"fact {name!r}",
            f"type {annotation!r} cannot be a rule fact; supported: bool, int, float, str "
            "and their Optional forms",
            "expose a derived scalar field to rules instead",
        )
    if problem is not None:
        raise RuleCompileError([problem], subject="fact fields")
    assert isinstance(tp, type)
    return FactField(tp, optional)


def fact_fields(model: type[BaseModel]) -> dict[str, type]:
    """The fields of a state model marked ``Fact()``, mapped to their annotation.

    >>> class State(BaseModel):
    ...     steps: typing.Annotated[int, Fact()] = 0
    ...     notes: str = ""
    >>> fact_fields(State)
    {'steps': <class 'int'>}
    """
    found: dict[str, type] = {}
    for name, info in model.model_fields.items():
        if any(isinstance(m, Fact) for m in info.metadata):
            annotation: Any = info.annotation
            fact_field(name, annotation)  # reject unsupported types at authoring time
            found[name] = annotation
    return found


def normalise_fields(fields: Mapping[str, Any]) -> dict[str, FactField]:
    """Classify every fact field; ``done`` is always present (the default pack reads it)."""
    out = {name: fact_field(name, tp) for name, tp in fields.items()}
    done = out.get("done")
    if done is not None and done.base is not bool:
        raise RuleCompileError.at(
            "fact 'done'",
            "the fact 'done' is read by the termination rules and must be a bool",
            "declare it as done: Annotated[bool, Fact()] = False",
            subject="fact fields",
        )
    out.setdefault("done", FactField(bool, False))
    return out


# --------------------------------------------------------------------------- strings

_ESC: Final = "\uf8ff"
_NEEDS_ESCAPE: Final = re.compile("[\x00\uf8ff\ud800-\udfff]")
_ESCAPED: Final = re.compile("\uf8ff(?:(e)|(0)|s([0-9a-f]{4}))")


_ENCODED: dict[str, str] = {}
_KEPT_ENCODED: Final = 512


def _escape_char(match: re.Match[str]) -> str:
    char = match.group(0)
    if char == _ESC:
        return _ESC + "e"
    if char == "\x00":
        return _ESC + "0"
    return f"{_ESC}s{ord(char):04x}"


def _unescape_char(match: re.Match[str]) -> str:
    if match.group(1):
        return _ESC
    if match.group(2):
        return "\x00"
    return chr(int(match.group(3), 16))


def encode_string(text: str) -> str:
    """Make ``text`` safe for a NUL-terminated UTF-8 C string, reversibly."""
    # Node names and events repeat at every decision: the texts already seen are kept
    # (bounded; a lost race only computes one again).
    if type(text) is not str:  # a subclass (a clips.Symbol) is equal to its plain text
        return _NEEDS_ESCAPE.sub(_escape_char, text) if _NEEDS_ESCAPE.search(text) else text
    encoded = _ENCODED.get(text)
    if encoded is None:
        encoded = _NEEDS_ESCAPE.sub(_escape_char, text) if _NEEDS_ESCAPE.search(text) else text
        if len(_ENCODED) >= _KEPT_ENCODED:
            _ENCODED.clear()
        _ENCODED[text] = encoded
    return encoded


def decode_string(text: str) -> str:
    """Undo :func:`encode_string`."""
    return _ESCAPED.sub(_unescape_char, text) if _ESC in text else text
