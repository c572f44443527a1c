"""A small reader for CLIPS source that keeps line numbers, its printer, and the static checks.

CLIPS's own ``load()`` is not atomic and reports syntax errors at the wrong place, and a rule
that names an unknown template is accepted silently. Reading the text ourselves lets us split
it into top-level constructs (each built separately, so an error names its construct and
line) and inspect each rule before CLIPS sees it: unknown templates, functions outside the
allowlist (:mod:`._allow`), decision facts that do not name their rule, and ``goto`` targets
that are not successors. The reader never recurses, and it refuses lists nested deeper than
:data:`MAX_DEPTH`, so no text can exhaust the Python or the C stack.

What is checked is what runs: CLIPS is never given the author's text, only :func:`render` of
the tree the checks read. The tokenizer follows CLIPS's scanner (``scanner.c``: ``GetToken``,
``ScanSymbol``, ``ScanString``) so that the tree is also what the author's text means to
CLIPS, and it refuses every character CLIPS treats specially where a reader could disagree:
control characters other than its five spaces (NUL and Ctrl-C end CLIPS's input, a backspace
deletes the character before it, a vertical tab is no space to CLIPS) and lone surrogates
(no UTF-8 form, and CLIPS reads UTF-8 bytes).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "MAX_DEPTH",
    "Atom",
    "Construct",
    "Node",
    "SExpr",
    "SourceError",
    "read_constructs",
    "render",
]

# How deep lists may nest. Real rules nest a handful of levels; every later pass (ours, and
# CLIPS's parser and evaluator, which recurse in C) is then bounded by this depth.
MAX_DEPTH: Final = 64


@dataclass(frozen=True, slots=True)
class Atom:
    """A token: a symbol, number, variable or string (``string`` keeps the unquoted text).

    ``line`` locates it in the author's text; it takes no part in equality, so a tree read
    back from :func:`render` equals the tree it was printed from.
    """

    text: str
    line: int = field(compare=False)
    string: bool = False


@dataclass(frozen=True, slots=True)
class SExpr:
    """A parenthesised list; ``line`` is where its ``(`` is (not compared, as for Atom)."""

    items: tuple[Node, ...]
    line: int = field(compare=False)

    @property
    def head(self) -> str | None:
        """The leading symbol (``defrule``, ``assert``, a template name), if any."""
        first = self.items[0] if self.items else None
        return first.text if isinstance(first, Atom) and not first.string else None

    def walk(self) -> Iterator[SExpr]:
        """This list and every list nested in it, depth first."""
        yield self
        for item in self.items:
            if isinstance(item, SExpr):
                yield from item.walk()


Node = Atom | SExpr


class SourceError(Exception):
    """Unbalanced or malformed text; ``line`` locates it (internal, rewrapped by callers)."""

    def __init__(self, message: str, line: int, hint: str = "balance the parentheses/quotes"):
        self.line = line
        self.hint = hint
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class Construct:
    """One top-level construct: its kind (``defrule``...), name, first line, the text to
    build, its tree, and the author's text.

    ``text`` is :func:`render` of ``tree``: the only form of the construct CLIPS is given.
    ``source`` is the author's text, kept to locate CLIPS's errors in it; never build it.
    """

    kind: str
    name: str
    line: int
    text: str
    tree: SExpr
    source: str


# A plain CLIPS symbol usable as a rule, template or function name.
NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")

# The characters CLIPS skips between tokens (GetToken): C's isspace without the vertical tab.
_SPACE: Final = " \t\n\f\r"
# Tokens of one character, also ending any symbol or number before them.
_SINGLE: Final = frozenset("()&|~")
# A symbol, number or variable runs to the first of these (ScanSymbol); ``<`` only ends one,
# it can also start one (``<-``).
_ENDS: Final = frozenset('<"()&|~;' + _SPACE)
# What the reader refuses anywhere in a pack, even in comments and strings.
_REFUSED: Final = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f\ud800-\udfff]")
_WHY: Final = {
    "\x00": "CLIPS stops reading at NUL, so it would not see the rest of the text",
    "\x03": "CLIPS stops reading at Ctrl-C, so it would not see the rest of the text",
    "\x08": "CLIPS deletes the character before a backspace, so it would read another name",
    "\x0b": "CLIPS does not read a vertical tab as a space",
}
_COMMENT_END: Final = re.compile("[\r\n]")


def _line_breaks(text: str) -> int:
    """Line breaks in ``text``: ``\\n``, ``\\r\\n`` or a lone ``\\r`` (CLIPS ends a comment at
    either character, and editors show a lone ``\\r`` as a new line)."""
    return text.count("\n") + text.count("\r") - text.count("\r\n")


def _refuse(text: str) -> None:
    bad = _REFUSED.search(text)
    if bad is None:
        return
    ch = bad.group()
    hint = "remove it; separate tokens with spaces, tabs, newlines or form feeds"
    if "\ud800" <= ch <= "\udfff":
        why = "a lone surrogate is not a character and has no UTF-8 form, which CLIPS reads"
        hint = "remove it (JSON text can hold half of a \\ud83d\\ude00 pair)"
    else:
        why = _WHY.get(ch, "CLIPS reads a control character as neither a space nor text")
    raise SourceError(
        f"character U+{ord(ch):04X} is not allowed in a rule pack: {why}",
        1 + _line_breaks(text[: bad.start()]),
        hint,
    )


def _starts_name(text: str, i: int) -> bool:
    """CLIPS continues ``?`` or ``$?`` into a variable name only before a letter, a non-ASCII
    character or ``*`` (``?1`` is the wildcard ``?`` then the number ``1``)."""
    if i >= len(text):
        return False
    ch = text[i]
    return ch == "*" or not ch.isascii() or ch.isalpha()


def tokens(text: str) -> Iterator[tuple[str, int, int, bool]]:
    """Yield (token, line, offset, is_string); ``(``/``)`` are tokens of their own."""
    _refuse(text)
    i, line, n = 0, 1, len(text)
    while i < n:
        ch = text[i]
        if ch in _SPACE:
            if ch == "\n" or (ch == "\r" and text[i + 1 : i + 2] != "\n"):
                line += 1
            i += 1
        elif ch == ";":
            end = _COMMENT_END.search(text, i)
            i = n if end is None else end.start()
        elif ch in _SINGLE:
            yield ch, line, i, False
            i += 1
        elif ch == '"':
            start_line, j, buf = line, i + 1, []
            while True:
                if j >= n:
                    raise SourceError("string is never closed", start_line)
                c = text[j]
                if c == "\\" and j + 1 < n:
                    c = text[j + 1]
                    j += 1
                elif c == '"':
                    break
                buf.append(c)
                j += 1
            line += _line_breaks(text[i:j])
            yield "".join(buf), start_line, i, True
            i = j + 1
        else:
            j = i + 1
            if ch == "$" and text[j : j + 1] == "?":
                j += 1
            if text[i:j] in ("?", "$?") and not _starts_name(text, j):
                yield text[i:j], line, i, False  # a wildcard
                i = j
                continue
            while j < n and text[j] not in _ENDS:
                j += 1
            yield text[i:j], line, i, False
            i = j


def _read(text: str) -> list[tuple[SExpr, int, int]]:
    """Top-level lists with their start and end offsets."""
    stack: list[tuple[list[Node], int, int]] = []
    out: list[tuple[SExpr, int, int]] = []
    for token, line, offset, is_string in tokens(text):
        if token == "(" and not is_string:
            if len(stack) >= MAX_DEPTH:
                raise SourceError(
                    f"lists are nested more than {MAX_DEPTH} levels deep; no rule needs that "
                    "many, and deeper text could exhaust the parser's stack",
                    line,
                )
            stack.append(([], line, offset))
        elif token == ")" and not is_string:
            if not stack:
                raise SourceError("')' without a matching '('", line)
            items, start_line, start = stack.pop()
            expr = SExpr(tuple(items), start_line)
            if stack:
                stack[-1][0].append(expr)
            else:
                out.append((expr, start, offset + 1))
        elif not stack:
            raise SourceError(f"{token!r} outside any construct", line)
        else:
            stack[-1][0].append(Atom(token, line, is_string))
    if stack:
        outer = [i.text for i in stack[0][0][:2] if isinstance(i, Atom)]
        where = f" (in the construct '({' '.join(outer)}' at line {stack[0][1]})" if outer else ""
        raise SourceError(f"'(' is never closed{where}", stack[-1][1])
    return out


def _render_atom(atom: Atom) -> str:
    if atom.string:
        return '"' + atom.text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return atom.text


def render(node: Node) -> str:
    """CLIPS text for a tree, on one line: the one printer between the checks and CLIPS.

    Symbols, numbers and variables are written as read (the reader keeps only what CLIPS
    reads as one token), strings are quoted with ``\\`` and ``"`` escaped, and tokens are
    separated by single spaces, so comments and the author's layout never reach CLIPS.
    Reading the result gives back an equal tree. Iterative, like the reader.
    """
    parts: list[str] = []
    stack: list[Node | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, Atom):
            parts.append(_render_atom(item))
        else:
            parts.append("(")
            stack.append(")")
            for k in range(len(item.items) - 1, -1, -1):
                stack.append(item.items[k])
                if k:
                    stack.append(" ")
    return "".join(parts)


@functools.lru_cache(maxsize=256)
def read_constructs(text: str) -> tuple[Construct, ...]:
    """Split pack text into constructs (cached: the same pack is read once per process)."""
    constructs = []
    for expr, start, end in _read(text):
        kind = expr.head or ""
        second = expr.items[1] if len(expr.items) > 1 else None
        name = second.text if isinstance(second, Atom) and not second.string else ""
        constructs.append(Construct(kind, name, expr.line, render(expr), expr, text[start:end]))
    return tuple(constructs)


# --------------------------------------------------------------------------- rule analysis

# Conditional elements that wrap patterns rather than name a template.
_CE_WRAPPERS: Final = frozenset({"and", "or", "not", "exists", "forall", "logical"})


@dataclass(frozen=True, slots=True)
class DecisionSite:
    """One ``(assert (sg-decision ...))`` in a rule, with whatever is literal in it."""

    line: int
    kind: str | None
    target: str | None  # literal target string, None if absent or computed
    has_target: bool
    rule: str | None  # the literal rule slot, None if absent or computed


def split_rule(tree: SExpr) -> tuple[list[Node], list[Node]]:
    """LHS and RHS items of a ``defrule`` (after its name, comment and declare)."""
    items = list(tree.items[2:])
    if items and isinstance(items[0], Atom) and items[0].string:
        items = items[1:]  # the rule's comment string
    if items and isinstance(items[0], SExpr) and items[0].head == "declare":
        items = items[1:]  # (declare (salience n))
    for i, item in enumerate(items):
        if isinstance(item, Atom) and item.text == "=>" and not item.string:
            return items[:i], items[i + 1 :]
    return items, []


def patterns(lhs: list[Node]) -> Iterator[SExpr]:
    """Every pattern CE in a LHS, looking inside not/and/or/exists/forall/logical."""
    for item in lhs:
        if isinstance(item, SExpr):
            if item.head in _CE_WRAPPERS:
                yield from patterns(list(item.items[1:]))
            elif item.head != "test" and item.head is not None:
                yield item


def direct_patterns(lhs: list[Node]) -> Iterator[SExpr]:
    """Pattern CEs that must hold for the rule to fire (top level or inside and/logical)."""
    for item in lhs:
        if isinstance(item, SExpr):
            if item.head in ("and", "logical"):
                yield from direct_patterns(list(item.items[1:]))
            elif item.head not in _CE_WRAPPERS and item.head not in ("test", None):
                yield item


def slot(pattern: SExpr, name: str) -> tuple[Node, ...] | None:
    """The items of slot ``name`` in a template pattern or assert, None if absent."""
    for item in pattern.items[1:]:
        if isinstance(item, SExpr) and item.head == name:
            return item.items[1:]
    return None


def literal_strings(items: tuple[Node, ...] | None) -> frozenset[str] | None:
    """``"a"`` or ``"a"|"b"`` -> the set of strings; anything else (variables, ``~``) -> None."""
    if not items:
        return None
    values = set()
    for i, item in enumerate(items):
        if i % 2:
            if not (isinstance(item, Atom) and item.text == "|" and not item.string):
                return None
        elif isinstance(item, Atom) and item.string:
            values.add(item.text)
        else:
            return None
    return frozenset(values)


def decision_sites(rhs: list[Node]) -> Iterator[DecisionSite]:
    """Every decision fact a RHS asserts."""
    for item in rhs:
        if not isinstance(item, SExpr):
            continue
        for expr in item.walk():
            if expr.head != "assert":
                continue
            for fact in expr.items[1:]:
                if isinstance(fact, SExpr) and fact.head == "sg-decision":
                    yield _site(fact)


def _single_atom(items: tuple[Node, ...] | None) -> Atom | None:
    if items and len(items) == 1 and isinstance(items[0], Atom):
        return items[0]
    return None


def _site(fact: SExpr) -> DecisionSite:
    kind = _single_atom(slot(fact, "kind"))
    target = _single_atom(slot(fact, "target"))
    rule = _single_atom(slot(fact, "rule"))
    return DecisionSite(
        line=fact.line,
        kind=kind.text if kind and not kind.string else None,
        target=target.text if target and target.string else None,
        has_target=slot(fact, "target") is not None,
        rule=rule.text if rule and not rule.string and not rule.text.startswith("?") else None,
    )


def static_nodes(lhs: list[Node]) -> frozenset[str] | None:
    """The nodes a rule can fire at, when its ``sg-step`` patterns fix them literally."""
    allowed: frozenset[str] | None = None
    for pattern in direct_patterns(lhs):
        if pattern.head == "sg-step":
            nodes = literal_strings(slot(pattern, "node"))
            if nodes is not None:
                allowed = nodes if allowed is None else allowed & nodes
    return allowed


def goto_problem(
    nodes: frozenset[str] | None,
    target: str,
    successors: Mapping[str, frozenset[str]],
) -> str | None:
    """Why a literal ``goto target`` is impossible, or None if it may be fine."""
    every = set(successors).union(*successors.values()) if successors else set()
    if target not in every:
        return f"goto target {target!r} is not a node of the graph (nodes: {_names(every)})"
    if nodes is None:
        return None  # the node is only known at run time; decide() checks it there
    for node in sorted(nodes):
        if node not in successors:
            return f"the rule matches node {node!r}, which is not a node of the graph"
        if target not in successors[node]:
            return (
                f"goto target {target!r} is not a successor of node {node!r} "
                f"(successors: {_names(successors[node])})"
            )
    return None


def _names(names: object) -> str:
    assert isinstance(names, set | frozenset)
    return ", ".join(repr(n) for n in sorted(names)) or "none"
