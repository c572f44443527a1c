"""The rule-pack allowlist: which constructs and functions a pack may use, checked on the
parsed text before CLIPS sees any of it.

A rule pack is data from wherever the graph came from (a ``.clp`` file, an IR, a plugin), so
it must not be able to run commands, hang the process, crash it or exhaust its memory. CLIPS
has no sandbox of its own: ``funcall``, ``eval`` and ``build`` reach any function by a name
computed at run time, ``system`` runs a shell, a ``defglobal`` initialiser or a template
default is evaluated while the construct is built, a recursive ``deffunction`` overflows the
C stack. So nothing is refused by name here; everything not named below is refused, and
nothing that is named can name another function:

* **Constructs**: ``defrule``, ``deftemplate``, ``deffacts`` and ``defglobal``. Template
  defaults, fact values and global initialisers must be literals, so building a pack (which
  is all :func:`~stargraph.fathom.validate_pack` and ``stargraph rules check`` do) evaluates
  nothing. ``deffunction`` is refused: it is the only construct that can recurse, and a chain
  of functions that each call the previous one twice makes an exponential amount of work
  with no loop in which the engine could check its budget. A helper is a Python function
  passed to the engine (``functions=``), which is the application's own code.
* **Functions**: every call is ``(name args...)`` with ``name`` a plain symbol from
  :data:`FUNCTIONS` or a Python function the engine defines. No form takes a function name as
  data, so there is no way to call anything indirectly.
* **Bounded work**: ``while`` is refused; ``loop-for-count`` needs literal bounds; fact
  queries bind one fact variable and their conditions cannot loop, query or build values;
  functions that take quadratic time in one call (``str-index``, ``subsetp``) are left out.
  The engine's watchdog (:class:`._raw.Watchdog`) checks time and memory after every rule
  firing and every loop iteration; this module bounds what can happen *between* two
  checks: a rule's actions may build strings and multifields totalling at most
  :data:`MAX_GROWTH` times the largest value that existed at the last check (``(str-cat ?s
  ?s)`` doubles ``?s``: a rule may do that three times, not thirty) plus
  :data:`MAX_LITERAL_BYTES` from the pack's literals, and conditions (evaluated inside
  pattern matching, where no check can run) build nothing from variables.

CLIPS matches patterns inside each ``assert``, where no check runs: how much matching the
packs can ask for is bounded separately, by :mod:`._bounds` (``docs/trust.md``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from stargraph.fathom import _sexpr as sx

__all__ = [
    "FUNCTIONS",
    "MAX_GROWTH",
    "MAX_LITERAL_BYTES",
    "MAX_LOOP",
    "Analysis",
    "Finding",
]

CONSTRUCTS: Final = frozenset({"defrule", "deftemplate", "deffacts", "defglobal"})

# Pure functions whose result has a small, fixed size (a number or a symbol).
SCALAR: Final = frozenset(
    {
        "+", "-", "*", "/", "div", "mod", "abs", "min", "max", "integer", "float", "round",
        "=", "<>", "<", "<=", ">", ">=", "eq", "neq", "and", "or", "not",
        "numberp", "integerp", "floatp", "stringp", "symbolp", "lexemep", "multifieldp",
        "evenp", "oddp", "str-length", "str-compare", "length$", "member$",
        "fact-existp", "fact-index",
    }
)  # fmt: skip
# Results no larger than their largest argument (a part or a case-changed copy).
COPY: Final = frozenset(
    {"sub-string", "upcase", "lowcase", "subseq$", "rest$", "first$", "nth$", "delete$"}
)
# Results as large as all their arguments together.
SUM: Final = frozenset({"str-cat", "sym-cat", "create$", "insert$", "replace$"})
# Special forms, checked by shape.
CONTROL: Final = frozenset(
    {"bind", "if", "switch", "progn", "break", "loop-for-count", "progn$", "foreach"}
)
FACT_CHANGES: Final = frozenset({"assert", "retract", "modify", "duplicate"})
QUERIES: Final = frozenset(
    {"any-factp", "find-fact", "find-all-facts", "do-for-fact", "do-for-all-facts",
     "delayed-do-for-all-facts"}
)  # fmt: skip
_QUERY_ACTIONS: Final = frozenset({"do-for-fact", "do-for-all-facts", "delayed-do-for-all-facts"})
# What only a rule's actions may do: change state, or loop (if, switch and progn are
# expressions too, and are checked like the condition around them).
_ACTIONS: Final = (CONTROL - {"if", "switch", "progn"}) | FACT_CHANGES | _QUERY_ACTIONS

FUNCTIONS: Final = SCALAR | COPY | SUM | CONTROL | FACT_CHANGES | QUERIES | {"fact-slot-value"}
"""Every CLIPS function a rule pack may call (besides the engine's Python functions)."""

MAX_GROWTH: Final = 16
"""How much a rule's actions may build before the next check, as a multiple of the largest
value in the engine (see the module docstring)."""

MAX_LITERAL_BYTES: Final = 2**20
"""How many bytes a rule's actions may build from the pack's own literals between two checks
(a literal doubled by ``(bind ?s (str-cat ?s ?s))`` grows as fast as any other value)."""

MAX_LOOP: Final = 10_000
"""The most iterations a ``loop-for-count`` may declare."""

# Why the functions people reach for are refused: the message names the real reason.
_REFUSED: Final = {
    "funcall": "calls a function whose name is computed at run time, so it could reach any "
    "function (system, eval, ...)",
    "eval": "runs CLIPS text computed at run time",
    "build": "defines constructs from text computed at run time",
    "system": "runs a shell command",
    "while": "loops without a bound",
    "printout": "writes output nobody reads (decisions are audited through sg-decision)",
    "format": "can pad its output to any width",
    "str-replace": "can multiply the size of a string",
    "str-index": "takes time quadratic in its arguments' length in one uninterruptible call",
    "subsetp": "takes time quadratic in its arguments' length in one uninterruptible call",
    "explode$": "turns one string into any number of values",
    "implode$": "turns any number of values into one string",
    "expand$": "spreads a multifield into arguments",
    "string-to-field": "parses text at run time",
    "assert-string": "parses text at run time",
    "random": "is not deterministic, so a replayed run could decide differently",
    "seed": "is not deterministic, so a replayed run could decide differently",
    "time": "is not deterministic, so a replayed run could decide differently",
    "gensym": "is not deterministic, so a replayed run could decide differently",
    "gensym*": "is not deterministic, so a replayed run could decide differently",
    "halt": "stops rule execution behind the engine's back",
    "exit": "ends the process",
    "run": "runs the agenda from inside a rule",
    "reset": "resets the environment the engine owns",
    "clear": "clears the environment the engine owns",
    "focus": "changes the module focus the engine owns",
    "return": "belongs in a deffunction, which rule packs cannot define",
}

_TEMPLATE_SLOTS: Final = frozenset({"slot", "multislot"})
_FACETS: Final = frozenset(
    {"type", "allowed-symbols", "allowed-strings", "allowed-lexemes", "allowed-integers",
     "allowed-floats", "allowed-numbers", "allowed-values", "range", "cardinality", "default"}
)  # fmt: skip
_FACET_VARIABLES: Final = frozenset({"?NONE", "?DERIVE", "?VARIABLE"})
_CE_WRAPPERS: Final = frozenset({"and", "or", "not", "exists", "forall", "logical"})


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the allowlist refuses: where, what, and how to fix it."""

    line: int
    message: str
    hint: str


def _is_variable(atom: sx.Atom) -> bool:
    return not atom.string and (atom.text.startswith("?") or atom.text.startswith("$?"))


def _variable(atom: sx.Atom) -> str:
    """The variable an atom reads: ``$?x`` and ``?x`` are the same variable; ``?f:slot`` (a
    fact-query slot) reads the fact variable."""
    name = atom.text.removeprefix("$")
    if not name.startswith("?*"):
        name = name.split(":", 1)[0]
    return name


def _spread(node: sx.Node) -> bool:
    """``$?x``: a multifield variable spread into separate arguments."""
    return isinstance(node, sx.Atom) and not node.string and node.text.startswith("$?")


def _literal(node: sx.Node) -> bool:
    """A constant: a string, number or symbol, not a variable or a global."""
    return isinstance(node, sx.Atom) and (node.string or not _is_variable(node))


class Size(NamedTuple):
    """A bound on a value's size: ``units`` times the largest value the engine held at the last
    check (no value can be larger than the memory limit then allowed), plus ``chars`` bytes
    made from the pack's own literals."""

    units: int
    chars: int

    def plus(self, other: Size) -> Size:
        """The bound of both together (a concatenation)."""
        return Size(self.units + other.units, self.chars + other.chars)

    def join(self, other: Size) -> Size:
        """The larger bound of two."""
        return Size(max(self.units, other.units), max(self.chars, other.chars))


_ZERO: Final = Size(0, 0)
_UNIT: Final = Size(1, 0)  # a value that existed at the last check


def _total(sizes: Iterable[Size]) -> Size:
    out = _ZERO
    for size in sizes:
        out = out.plus(size)
    return out


@dataclass
class _Region:
    """What is known between two watchdog checks: each variable's size bound and how much has
    been built so far."""

    sizes: dict[str, Size] = field(default_factory=dict)
    built: Size = _ZERO
    first_growth: int | None = None  # line of the first call that built something

    def size(self, name: str) -> Size:
        return self.sizes.get(name, _UNIT)

    def grow(self, amount: Size, line: int) -> None:
        if amount != _ZERO and self.first_growth is None:
            self.first_growth = line
        self.built = self.built.plus(amount)

    def copy(self) -> _Region:
        return _Region(dict(self.sizes), self.built, self.first_growth)

    def merge(self, other: _Region) -> None:
        """Join ``other``, a copy that took another path from the same start: the larger
        bound of each variable, and the larger amount built."""
        for name, size in other.sizes.items():
            self.sizes[name] = self.sizes.get(name, _ZERO).join(size)
        self.built = self.built.join(other.built)
        if self.first_growth is None:
            self.first_growth = other.first_growth


# Where an expression is evaluated. "rhs": a rule's actions (checked after each firing and
# loop iteration). "lhs": a pattern constraint or test, and "cond": a fact-query condition --
# both evaluated many times inside one match or query, where no check can run.
_RHS: Final = "rhs"
_LHS: Final = "lhs"
_COND: Final = "cond"


class Analysis:
    """Checks constructs against the allowlist; ``findings`` says what is refused.

    ``functions`` are the Python functions the engine defines (callable by name);
    ``multislots`` maps each known template to its multislot names (a fact copies a value
    into a multislot; a single slot only refers to it). ``asserted`` and ``queried`` collect
    the fact specs and fact-query templates met, so the caller can check they exist.
    """

    def __init__(
        self, functions: Collection[str], multislots: Mapping[str, frozenset[str]]
    ) -> None:
        self.functions = frozenset(functions)
        self.multislots = multislots
        self.findings: list[Finding] = []
        self.asserted: list[sx.SExpr] = []
        self.queried: list[sx.Atom] = []
        self._facts: dict[str, str] = {}  # ?f <- (template ...) in the rule being checked

    def refuse(self, line: int, message: str, hint: str) -> None:
        self.findings.append(Finding(line, message, hint))

    # ------------------------------------------------------------------ constructs

    def construct(self, c: sx.Construct) -> None:
        """Check one top-level construct (its kind is already known to be allowed)."""
        if c.kind == "defrule":
            self._defrule(c.tree)
        elif c.kind == "deftemplate":
            self._deftemplate(c.tree)
        elif c.kind == "deffacts":
            self._deffacts(c.tree)
        elif c.kind == "defglobal":
            self._defglobal(c.tree)

    def _defglobal(self, tree: sx.SExpr) -> None:
        items = list(tree.items[1:])
        if items and isinstance(items[0], sx.Atom) and not _is_variable(items[0]):
            items = items[1:]  # a module name
        for i in range(0, len(items), 3):
            name, eq, value = [*items[i : i + 3], None, None][:3]
            if not (isinstance(name, sx.Atom) and name.text.startswith("?*")):
                self.refuse(
                    _line(name, tree),
                    "a defglobal lists ?*name* = <literal> triples",
                    "write (defglobal ?*name* = 0)",
                )
                return
            if not (isinstance(eq, sx.Atom) and eq.text == "=" and not eq.string):
                self.refuse(name.line, f"{name.text} needs '= <literal>'", "write = 0")
                return
            if value is None or not _literal(value):
                self.refuse(
                    _line(value, tree),
                    f"the initialiser of {name.text} is not a literal; it would be evaluated "
                    "when the pack is built, even by validation and 'stargraph rules check'",
                    "initialise it with a number, string or symbol and set it from a rule "
                    "with (bind ...)",
                )

    def _deftemplate(self, tree: sx.SExpr) -> None:
        for item in tree.items[2:]:
            if isinstance(item, sx.Atom):
                continue  # the template's comment string
            name = _name(item.items[1] if len(item.items) > 1 else None)
            if item.head not in _TEMPLATE_SLOTS or name is None:
                self.refuse(item.line, "a template holds (slot name ...) lists", "write one")
                continue
            for facet in item.items[2:]:
                self._facet(facet, name, item)

    def _facet(self, facet: sx.Node, slot_name: str, slot_def: sx.SExpr) -> None:
        if not isinstance(facet, sx.SExpr) or facet.head not in _FACETS:
            head = facet.head if isinstance(facet, sx.SExpr) else facet.text
            why = (
                "default-dynamic is evaluated at every assert"
                if head == "default-dynamic"
                else f"({head}) is not a slot attribute a rule pack may use"
            )
            self.refuse(
                _line(facet, slot_def),
                f"slot {slot_name!r}: {why}",
                "use type, allowed-*, range, cardinality or a literal (default ...)",
            )
            return
        for value in facet.items[1:]:
            if isinstance(value, sx.SExpr) or (
                _is_variable(value) and value.text not in _FACET_VARIABLES
            ):
                self.refuse(
                    value.line,
                    f"slot {slot_name!r}: ({facet.head} ...) must hold literals; an expression "
                    "would be evaluated when the template is built",
                    "write a number, string or symbol (or ?NONE / ?DERIVE)",
                )
                return

    def _deffacts(self, tree: sx.SExpr) -> None:
        for fact in tree.items[2:]:
            if not isinstance(fact, sx.SExpr):
                continue  # the comment string
            for slot in fact.items[1:]:
                values = slot.items[1:] if isinstance(slot, sx.SExpr) else (slot,)
                for value in values:
                    if not _literal(value):
                        self.refuse(
                            _line(value, fact),
                            f"a value in the ({fact.head} ...) fact is not a literal; it "
                            "would be evaluated at every reset",
                            "write a number, string or symbol",
                        )
                        return

    def _defrule(self, tree: sx.SExpr) -> None:
        items = list(tree.items[2:])
        if items and isinstance(items[0], sx.Atom) and items[0].string:
            items = items[1:]
        if items and isinstance(items[0], sx.SExpr) and items[0].head == "declare":
            self._declare(items[0])
        lhs, rhs = sx.split_rule(tree)
        self._facts = {}
        self._lhs(lhs)
        region = _Region()
        for action in rhs:
            self._expr(action, region, _RHS)
        units, chars = region.built
        if units > MAX_GROWTH or chars > MAX_LITERAL_BYTES:
            amount = (
                f"up to {units} times the size of the largest value (at most {MAX_GROWTH})"
                if units > MAX_GROWTH
                else f"{chars:,} bytes from the pack's literals (at most {MAX_LITERAL_BYTES:,})"
            )
            self.refuse(
                region.first_growth or tree.line,
                f"the actions can build strings or multifields of {amount} before the engine "
                "can check its memory; e.g. each (bind ?s (str-cat ?s ?s)) doubles ?s",
                "build smaller values, or spread the work over several firings (each "
                "firing is checked)",
            )

    def _declare(self, declare: sx.SExpr) -> None:
        for prop in declare.items[1:]:
            ok = False
            if isinstance(prop, sx.SExpr) and len(prop.items) == 2:
                value = prop.items[1]
                if prop.head == "salience":
                    number = _integer(value)
                    ok = number is not None and -10000 <= number <= 10000
                elif prop.head == "auto-focus":
                    ok = isinstance(value, sx.Atom) and value.text in ("TRUE", "FALSE")
            if not ok:
                self.refuse(
                    _line(prop, declare),
                    "a declare holds (salience <integer literal>) or (auto-focus TRUE|FALSE)",
                    "write (declare (salience 10)); salience is never computed",
                )

    def _lhs(self, items: Sequence[sx.Node]) -> None:
        for i, item in enumerate(items):
            if not isinstance(item, sx.SExpr):
                continue  # ?f <-
            bound = items[i - 2] if i >= 2 else None
            if isinstance(bound, sx.Atom) and item.head is not None:
                self._facts[bound.text] = item.head
            if item.head in _CE_WRAPPERS:
                self._lhs(item.items[1:])
            elif item.head == "test":
                for arg in item.items[1:]:
                    self._condition(arg, "a (test ...) condition")
            elif item.head is None:
                self.refuse(item.line, "a pattern starts with its template's name", "name it")
            else:  # a pattern: predicate (:) and return-value (=) constraints are calls
                for slot in item.items[1:]:
                    if not isinstance(slot, sx.SExpr):
                        continue  # an ordered pattern's value; unknown templates are refused
                    if _name(slot.items[0] if slot.items else None) is None:
                        self.refuse(slot.line, "a slot constraint starts with the slot name", "")
                        continue
                    for inner in slot.items[1:]:
                        if isinstance(inner, sx.SExpr):
                            self._condition(inner, f"a constraint on ({item.head} ...)")

    def _condition(self, node: sx.Node, what: str, mode: str = _LHS) -> None:
        region = _Region()
        self._expr(node, region, mode)
        if region.built.units:
            self.refuse(
                region.first_growth or _line(node, None),
                f"{what} builds a string or multifield from variables; conditions are "
                "evaluated once per candidate fact, where the engine cannot check its memory",
                "compare the parts instead (e.g. with sub-string), or build the value in a "
                "rule's actions",
            )

    # ------------------------------------------------------------------ expressions

    def _expr(self, node: sx.Node, region: _Region, mode: str) -> Size:
        """Check one expression; return a bound on its result's size."""
        if isinstance(node, sx.Atom):
            return region.size(_variable(node)) if _is_variable(node) else Size(0, len(node.text))
        head = node.head
        if head is None:
            self.refuse(
                node.line,
                "the function position of a call must be a plain function name; a computed "
                "name, a variable or a string there is refused",
                "call the function by its name, e.g. (str-cat ...)",
            )
            return _ZERO
        args = node.items[1:]
        if head in self.functions:
            for arg in args:
                self._expr(arg, region, mode)
            return _ZERO
        if head not in FUNCTIONS:
            self._unknown(node)
            return _ZERO
        if mode != _RHS and head in _ACTIONS:
            self.refuse(
                node.line,
                f"({head} ...) is an action, not allowed inside a condition",
                "move it to the rule's right-hand side",
            )
            return _ZERO
        if head in SCALAR:
            for arg in args:
                self._expr(arg, region, mode)
            return _ZERO
        if head in COPY:
            size = _ZERO
            for arg in args:
                size = size.join(self._expr(arg, region, mode))
            region.grow(size, node.line)
            return size
        if head in SUM:
            size = _ZERO
            for arg in args:
                if head in ("str-cat", "sym-cat") and _spread(arg):
                    self.refuse(
                        arg.line,
                        f"({head} ...) spreads a multifield into one string, which can be far "
                        "larger than the multifield",
                        "concatenate single values",
                    )
                size = size.plus(self._expr(arg, region, mode))
            region.grow(size, node.line)
            return size
        if head == "fact-slot-value":
            for arg in args:
                self._expr(arg, region, mode)
            region.grow(_UNIT, node.line)  # a multislot's value is copied out
            return _UNIT
        if head in QUERIES:
            return self._query(node, region, mode)
        if head in FACT_CHANGES:
            return self._fact_change(node, region)
        return self._control(node, region, mode)

    def _unknown(self, node: sx.SExpr) -> None:
        head = node.head
        why = _REFUSED.get(head or "", "is not on the rule-pack allowlist")
        self.refuse(
            node.line,
            f"calls ({head}), which a rule pack may not use: it {why}"
            if head in _REFUSED
            else f"calls ({head}), which {why}",
            "use the allowed CLIPS functions (stargraph.fathom.ALLOWED_FUNCTIONS), or pass a "
            "Python function to the engine with functions={...}; decide through "
            "(assert (sg-decision ...))",
        )

    def _fact_change(self, node: sx.SExpr, region: _Region) -> Size:
        args = node.items[1:]
        if node.head == "assert":
            for fact in args:
                if isinstance(fact, sx.SExpr):
                    self.asserted.append(fact)
                    self._slot_values(fact.items[1:], region, fact.head)
                else:
                    self.refuse(_line(fact, node), "assert takes facts", "write (assert (t))")
            return _ZERO
        if node.head in ("modify", "duplicate"):
            target = args[0] if args else None
            if target is not None:
                self._expr(target, region, _RHS)
            template = self._facts.get(target.text) if isinstance(target, sx.Atom) else None
            self._slot_values(args[1:], region, template)
            return _ZERO
        for arg in args:  # retract
            self._expr(arg, region, _RHS)
        return _ZERO

    def _slot_values(self, slots: Sequence[sx.Node], region: _Region, template: str | None) -> None:
        """Slot values of an assert/modify: a fact keeps its own copy of a multislot's value,
        so that counts as built (every slot does when the template is not known here)."""
        multislots = self.multislots.get(template) if template is not None else None
        for slot in slots:
            name = _name(_first(slot)) if isinstance(slot, sx.SExpr) else None
            if name is None:
                self.refuse(slot.line, "a fact lists (slot-name value...) pairs", "write (x 1)")
                continue
            size = _total(self._expr(value, region, _RHS) for value in slot.items[1:])  # type: ignore[union-attr]
            if multislots is None or name in multislots:
                region.grow(size, slot.line)

    def _control(self, node: sx.SExpr, region: _Region, mode: str) -> Size:
        head, args = node.head, node.items[1:]
        if head == "bind":
            target = args[0] if args else None
            if not (isinstance(target, sx.Atom) and _is_variable(target)):
                self.refuse(node.line, "bind needs a variable", "write (bind ?x value)")
                return _ZERO
            if target.text.startswith("?*sg-"):
                self.refuse(node.line, f"{target.text} belongs to the engine", "bind your own")
            size = _total(self._expr(arg, region, _RHS) for arg in args[1:])
            if len(args) > 2:  # several values: a new multifield
                region.grow(size, node.line)
            region.sizes[_variable(target)] = size
            return size
        if head in ("progn", "break"):
            return self._sequence(args, region, mode)
        if head == "if":
            return self._if(node, region, mode)
        if head == "switch":
            return self._switch(node, region, mode)
        if head == "loop-for-count":
            return self._loop_for_count(node, region)
        return self._foreach(node, region)  # progn$ / foreach

    def _sequence(self, actions: Sequence[sx.Node], region: _Region, mode: str = _RHS) -> Size:
        size = _ZERO
        for action in actions:
            if isinstance(action, sx.Atom) and action.text in ("then", "else", "do"):
                continue
            size = self._expr(action, region, mode)
        return size

    def _if(self, node: sx.SExpr, region: _Region, mode: str) -> Size:
        args = list(node.items[1:])
        if not args:
            return _ZERO
        self._expr(args[0], region, mode)
        words = [i for i, a in enumerate(args) if isinstance(a, sx.Atom) and a.text == "else"]
        split = words[0] if words else len(args)
        other = region.copy()
        size = self._sequence(args[1:split], region, mode)
        size = size.join(self._sequence(args[split + 1 :], other, mode))
        region.merge(other)
        return size

    def _switch(self, node: sx.SExpr, region: _Region, mode: str) -> Size:
        args = node.items[1:]
        if args:
            self._expr(args[0], region, mode)
        size, start = _ZERO, region.copy()
        for case in args[1:]:
            if not isinstance(case, sx.SExpr) or case.head not in ("case", "default"):
                self.refuse(_line(case, node), "a switch holds (case ...) and (default ...)", "")
                continue
            body = case.items[1:]
            if case.head == "case" and body:
                if not _literal(body[0]):
                    self.refuse(body[0].line, "a case value must be a literal", "write one")
                body = body[1:]
            branch = start.copy()
            size = size.join(self._sequence(body, branch, mode))
            region.merge(branch)
        return size

    def _loop_body(self, actions: Sequence[sx.Node], region: _Region) -> None:
        """A loop body, accounted once: the engine checks memory after every iteration, so each
        iteration starts from values no larger than the last check allowed. Every variable is
        therefore at least one unit at the body's start (a literal bound before the loop may
        have grown in an earlier iteration)."""
        body = region.copy()
        body.sizes = {name: size.join(_UNIT) for name, size in region.sizes.items()}
        self._sequence(actions, body)
        region.merge(body)

    def _loop_for_count(self, node: sx.SExpr, region: _Region) -> Size:
        args = node.items[1:]
        spec = args[0] if args else None
        counter: sx.Node | None = None
        bounds: list[sx.Node] = []
        if isinstance(spec, sx.SExpr):
            counter, bounds = (spec.items[0], list(spec.items[1:])) if spec.items else (None, [])
        elif spec is not None:
            bounds = [spec]
        numbers = [_integer(b) for b in bounds]
        counted = isinstance(spec, sx.Atom) or (
            isinstance(counter, sx.Atom) and _is_variable(counter)
        )
        if not counted or not 1 <= len(numbers) <= 2 or None in numbers:
            self.refuse(
                node.line,
                "loop-for-count needs literal integer bounds (a computed bound is refused)",
                "write (loop-for-count (?i 1 10) ...) with numbers",
            )
            return _ZERO
        low, high = (1, numbers[0]) if len(numbers) == 1 else (numbers[0], numbers[1])
        count = (high or 0) - (low or 0) + 1
        if count > MAX_LOOP:
            self.refuse(
                node.line,
                f"loop-for-count runs {count} times; at most {MAX_LOOP}",
                "loop less, or spread the work over several firings",
            )
        if isinstance(counter, sx.Atom):
            region.sizes[_variable(counter)] = _ZERO  # an integer
        self._loop_body(args[1:], region)
        return _ZERO

    def _foreach(self, node: sx.SExpr, region: _Region) -> Size:
        args = list(node.items[1:])
        first = args[0] if args else None
        var: sx.Node | None = None
        if node.head == "foreach":
            var, source, body = first, args[1:2], args[2:]
        elif (
            isinstance(first, sx.SExpr)
            and first.items
            and isinstance(first.items[0], sx.Atom)
            and _is_variable(first.items[0])
        ):
            var, source, body = first.items[0], list(first.items[1:]), args[1:]
        else:  # (progn$ <multifield expression> ...)
            source, body = args[:1], args[1:]
        if node.head == "foreach" and not (isinstance(var, sx.Atom) and _is_variable(var)):
            self.refuse(node.line, "foreach needs a variable and a multifield", "")
            return _ZERO
        size = _total(self._expr(s, region, _RHS) for s in source)
        if isinstance(var, sx.Atom):
            region.sizes[_variable(var)] = size
        self._loop_body(body, region)
        return _ZERO

    def _query(self, node: sx.SExpr, region: _Region, mode: str) -> Size:
        if mode != _RHS:
            self.refuse(
                node.line,
                f"({node.head} ...) inside a condition runs a query per candidate fact",
                "query from a rule's actions, or match the facts with patterns",
            )
            return _ZERO
        args = node.items[1:]
        spec = args[0] if args else None
        sets = list(spec.items) if isinstance(spec, sx.SExpr) else []
        if len(sets) != 1 or not isinstance(sets[0], sx.SExpr) or len(sets[0].items) < 2:
            self.refuse(
                node.line,
                f"({node.head} ...) must bind exactly one fact variable; several multiply "
                "the work by each other's fact counts",
                f"write ({node.head} ((?f template)) ...)",
            )
            return _ZERO
        var, *templates = sets[0].items
        if not (isinstance(var, sx.Atom) and _is_variable(var)):
            self.refuse(_line(var, node), "a fact query binds a ?variable", "write ((?f t))")
            return _ZERO
        for template in templates:
            if isinstance(template, sx.Atom) and not _is_variable(template):
                self.queried.append(template)
            else:
                self.refuse(_line(template, node), "a fact query names templates", "name one")
        if len(args) > 1:
            self._condition(args[1], f"the condition of ({node.head} ...)", _COND)
        if node.head in _QUERY_ACTIONS:
            self._loop_body(args[2:], region)
            return _ZERO
        if node.head == "find-all-facts":
            region.grow(_UNIT, node.line)
            return _UNIT
        return _ZERO


def _integer(node: sx.Node | None) -> int | None:
    if not isinstance(node, sx.Atom) or node.string:
        return None
    try:
        return int(node.text)
    except ValueError:
        return None


def _first(expr: sx.SExpr) -> sx.Node | None:
    return expr.items[0] if expr.items else None


def _name(node: sx.Node | None) -> str | None:
    """A plain symbol's text (a slot or construct name), None for anything else."""
    if isinstance(node, sx.Atom) and not node.string and sx.NAME.fullmatch(node.text):
        return node.text
    return None


def _line(node: sx.Node | None, parent: sx.SExpr | None) -> int:
    if node is not None:
        return node.line
    return parent.line if parent is not None else 1
