"""Static bounds on how much pattern matching a set of rule packs can make CLIPS do.

CLIPS matches patterns inside each ``assert`` (and each ``modify``, and the reset that
asserts the deffacts), in one C call where no budget check can run: a rule joining ``k``
patterns over ``n`` candidate facts each holds ``n**k`` partial matches (about 250 bytes
apiece, activations included). A 650-byte pack of 60 literal facts and one rule joining four
unconstrained patterns asked for 1.4 GB before any check could stop it. So the packs loaded
together are bounded before anything is built:

* **patterns per rule** (:attr:`RuleBounds.max_patterns`), which bounds a rule's join network;
* **facts** the deffacts assert (:attr:`RuleBounds.max_facts`, over all the packs);
* **matches**: for each rule, the product over its patterns of the facts each pattern can
  match; over all the rules, the sum of those products (:attr:`RuleBounds.max_matches`).

A pattern's candidates are counted conservatively: the deffacts facts of its template that
agree with its literal slot constraints, the engine's own facts of that template (one
``sg-step``, one ``sg-state``), and :attr:`RuleBounds.asserted_facts` more when some rule's
actions can assert (or duplicate) a fact of that template that the pattern could match.
A variable shared with another pattern does not narrow the count (every fact may hold the
same value). Facts asserted at run time beyond that allowance are what the engine's
watchdog catches: it checks time and memory after every firing and loop iteration, and the
bound keeps each single assert's matching work to a product of statically known counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from stargraph.fathom import _sexpr as sx

__all__ = ["DEFAULT_BOUNDS", "Exceeded", "RuleBounds", "check_bounds"]

# Template -> slot -> a literal's key; a fact with no value for a slot holds its default.
_Fact = tuple[str, dict[str, tuple[str, object]]]
_Key = tuple[str, object]

# The engine asserts these itself (see fathom._load's sg-init): one fact each.
_ENGINE_FACTS: Final = {"sg-step": 1, "sg-state": 1}


@dataclass(frozen=True, slots=True)
class RuleBounds:
    """How much pattern matching the rule packs of one engine may ask for (checked when
    they load, see ``docs/trust.md``). Pass a larger one to
    :class:`~stargraph.fathom.RuleEngine` and :func:`~stargraph.fathom.validate_pack`
    (``bounds=RuleBounds(max_matches=...)``) for packs that really need it, with a
    ``memory_limit`` to match: a match costs about 250 bytes."""

    max_patterns: int = 16
    """The most patterns one rule may have (``not``/``exists``/``or`` branches included)."""
    max_facts: int = 1000
    """The most facts the packs' deffacts may assert, together."""
    max_matches: int = 100_000
    """The most partial matches the rules may hold: for one rule, the product of its
    patterns' candidate facts; for all rules together, the sum of those products."""
    asserted_facts: int = 100
    """How many facts a pattern is assumed to see from rules that assert its template at
    run time (more are stopped by the watchdog's memory check, not refused here)."""


DEFAULT_BOUNDS: Final = RuleBounds()
"""The bounds an engine and :func:`~stargraph.fathom.validate_pack` apply unless given others."""


@dataclass(frozen=True, slots=True)
class Exceeded:
    """One bound a pack exceeds: which construct, where, and by how much."""

    pack: int  # the index of the pack in the load
    what: str  # "rule 'x'" / "deffacts 'y'"
    line: int
    message: str
    hint: str


def _key(atom: sx.Atom) -> _Key:
    """What CLIPS compares a literal by. Numbers compare by value (an int and a float of the
    same value are taken as equal, which only ever over-counts)."""
    if atom.string:
        return ("string", atom.text)
    try:
        return ("number", float(atom.text))
    except ValueError:
        return ("symbol", atom.text)


def _literal_keys(items: Sequence[sx.Node]) -> frozenset[_Key] | None:
    """``a``, ``"a"``, ``1`` or ``a|b|c`` -> the keys it allows; anything else (a variable,
    ``~``, a predicate, a multislot's several values) -> None, i.e. any value."""
    keys = set()
    for i, item in enumerate(items):
        if not isinstance(item, sx.Atom):
            return None
        if i % 2:
            if item.string or item.text != "|":
                return None
        elif item.string or not (
            item.text.startswith(("?", "$?", "~", "&", ":", "=")) or item.text in "|&~"
        ):
            keys.add(_key(item))
        else:
            return None
    return frozenset(keys) if keys else None


def _slot_literals(spec: sx.SExpr) -> dict[str, frozenset[_Key]]:
    """The slots of a pattern (or an asserted fact) fixed to literals."""
    out: dict[str, frozenset[_Key]] = {}
    for item in spec.items[1:]:
        if isinstance(item, sx.SExpr) and item.head is not None:
            keys = _literal_keys(item.items[1:])
            if keys is not None:
                out[item.head] = keys
    return out


def _agrees(a: dict[str, frozenset[_Key]], b: dict[str, frozenset[_Key]]) -> bool:
    """Whether two literal constraints can hold for the same fact."""
    return all(a[s] & b[s] for s in a.keys() & b.keys())


def _fact_specs(tree: sx.SExpr) -> Iterator[sx.SExpr]:
    for item in tree.items[2:]:
        if isinstance(item, sx.SExpr) and item.head is not None:
            yield item


def _bound_facts(lhs: Sequence[sx.Node]) -> dict[str, str]:
    """``?f <- (template ...)`` in a rule's conditions: fact variable -> template."""
    out: dict[str, str] = {}
    items = list(lhs)
    for i in range(len(items) - 2):
        var, arrow, pattern = items[i : i + 3]
        if (
            isinstance(var, sx.Atom)
            and isinstance(arrow, sx.Atom)
            and arrow.text == "<-"
            and isinstance(pattern, sx.SExpr)
            and pattern.head is not None
        ):
            out[var.text] = pattern.head
    return out


def _asserted(rhs: Sequence[sx.Node], facts: dict[str, str]) -> Iterator[tuple[str, sx.SExpr]]:
    """(template, spec) of every fact a rule's actions can create."""
    for action in rhs:
        if not isinstance(action, sx.SExpr):
            continue
        for expr in action.walk():
            if expr.head == "assert":
                for spec in expr.items[1:]:
                    if isinstance(spec, sx.SExpr) and spec.head is not None:
                        yield spec.head, spec
            elif expr.head == "duplicate" and len(expr.items) > 1:
                target = expr.items[1]
                template = facts.get(target.text) if isinstance(target, sx.Atom) else None
                # A duplicate's unchanged slots are copied: only its new values are known.
                yield (template or "*"), sx.SExpr((sx.Atom("*", expr.line), *expr.items[2:]), 0)


def check_bounds(packs: Sequence[Sequence[sx.Construct]], bounds: RuleBounds) -> list[Exceeded]:
    """Every bound the constructs of ``packs`` (loaded together) exceed."""
    out: list[Exceeded] = []
    deffacts: list[tuple[str, dict[str, frozenset[_Key]]]] = []
    total_facts = 0
    crossing: tuple[int, sx.Construct] | None = None  # the deffacts that crossed max_facts
    rules: list[tuple[int, sx.Construct, list[sx.Node], list[sx.Node]]] = []
    creates: list[tuple[str, dict[str, frozenset[_Key]]]] = []
    for index, constructs in enumerate(packs):
        for c in constructs:
            if c.kind == "deffacts":
                specs = list(_fact_specs(c.tree))
                total_facts += len(specs)
                deffacts.extend((s.head or "", _slot_literals(s)) for s in specs)
                if total_facts > bounds.max_facts and crossing is None:
                    crossing = (index, c)
            elif c.kind == "defrule":
                lhs, rhs = sx.split_rule(c.tree)
                rules.append((index, c, lhs, rhs))
                creates.extend(
                    (template, _slot_literals(spec))
                    for template, spec in _asserted(rhs, _bound_facts(lhs))
                )
    if crossing is not None:
        out.append(
            Exceeded(
                crossing[0],
                f"deffacts {crossing[1].name!r}",
                crossing[1].line,
                f"the packs' deffacts assert {total_facts:,} facts, over the bound of "
                f"{bounds.max_facts:,} (max_facts)",
                "assert fewer facts, or pass bounds=RuleBounds(max_facts=...) to the engine "
                "and validate_pack",
            )
        )
    per_template = Counter(template for template, _ in deffacts)
    estimates: list[tuple[int, int, sx.Construct]] = []
    for index, c, lhs, _ in rules:
        patterns = list(sx.patterns(lhs))
        what = f"rule {c.name!r}"
        if len(patterns) > bounds.max_patterns:
            out.append(
                Exceeded(
                    index,
                    what,
                    c.line,
                    f"the rule has {len(patterns)} patterns, over the bound of "
                    f"{bounds.max_patterns} (max_patterns)",
                    "split it into rules that assert intermediate facts, or pass "
                    "bounds=RuleBounds(max_patterns=...) to the engine and validate_pack",
                )
            )
            continue
        product = 1
        for pattern in patterns:
            template = pattern.head or ""
            literals = _slot_literals(pattern)
            if literals:
                count = sum(
                    1 for t, slots in deffacts if t == template and _agrees(literals, slots)
                )
            else:
                count = per_template[template]
            count += _ENGINE_FACTS.get(template, 0)
            if any(t in (template, "*") and _agrees(literals, s) for t, s in creates):
                count += bounds.asserted_facts
            product *= max(count, 1)
        estimates.append((product, index, c))
        if product > bounds.max_matches:
            out.append(
                Exceeded(
                    index,
                    what,
                    c.line,
                    f"the rule can hold up to {product:,} partial matches ({len(patterns)} "
                    "patterns, each multiplying by the facts it can match), over the bound "
                    f"of {bounds.max_matches:,} (max_matches); CLIPS builds them inside one "
                    "assert, where no budget check can run",
                    "constrain the patterns with literal slot values, match fewer facts, "
                    "or pass bounds=RuleBounds(max_matches=...) (and a memory_limit to "
                    "match) to the engine and validate_pack",
                )
            )
    total = sum(p for p, _, _ in estimates)
    if total > bounds.max_matches and not any(p > bounds.max_matches for p, _, _ in estimates):
        largest = sorted(estimates, key=lambda e: -e[0])[:3]
        names = ", ".join(f"{c.name!r} ({p:,})" for p, _, c in largest)
        product, index, c = largest[0]
        out.append(
            Exceeded(
                index,
                f"rule {c.name!r}",
                c.line,
                f"the rules together can hold up to {total:,} partial matches, over the bound "
                f"of {bounds.max_matches:,} (max_matches); the largest: {names}",
                "constrain the patterns with literal slot values, match fewer facts, or pass "
                "bounds=RuleBounds(max_matches=...) to the engine and validate_pack",
            )
        )
    return out
