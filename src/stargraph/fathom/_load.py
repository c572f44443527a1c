"""Loading rule packs into a CLIPS environment, with every check that guards against CLIPS.

The environment is created here with the engine's own templates and functions, then each pack
construct is checked statically (:mod:`._sexpr` reads it, :mod:`._allow` holds the allowlist)
and built one at a time, so an error names its pack, rule and line. Any problem fails the
whole load: the environment is discarded by the caller and nothing runs.
:func:`validate_pack` runs the same load into a scratch environment.

This is the only place pack text reaches CLIPS (``tests/fathom/test_fathom_sandbox.py`` pins
that), and what reaches it is never the author's text: each construct is built from
:func:`._sexpr.render` of the very tree the checks read (``Construct.text``), so a comment,
an escape or a character the two readers might take differently cannot hide code from the
checks. The static check runs before anything is built: building evaluates template
defaults, fact values, global initialisers and salience, which the allowlist requires to be
literals, so validating a pack evaluates nothing.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import clips
from clips._clips import lib

from stargraph.errors import Problem, RuleCompileError
from stargraph.fathom import _allow
from stargraph.fathom import _sexpr as sx
from stargraph.fathom._bounds import DEFAULT_BOUNDS, RuleBounds, check_bounds
from stargraph.fathom._pack import RulePack
from stargraph.fathom._values import FactField, OpenField, normalise_fields

__all__ = ["Capture", "Loaded", "load_packs", "new_environment", "validate_pack"]

ENGINE_TEMPLATES: Final = frozenset({"sg-step", "sg-state", "sg-decision", "sg-fact"})

# The engine's constant CLIPS source. No run-time value is ever formatted into CLIPS text;
# the only generated part is the sg-state template and sg-begin, from validated field names.
_BASE: Final = (
    """(deftemplate sg-step
  (slot tick (type INTEGER) (default 0))
  (slot step (type INTEGER) (default 0))
  (slot node (type STRING) (default ""))
  (slot last-event (type STRING SYMBOL) (allowed-symbols nil) (default nil))
  (slot tool-result (type STRING SYMBOL) (allowed-symbols nil) (default nil))
  (slot error-count (type INTEGER) (default 0)))""",
    """(deftemplate sg-decision
  (slot kind (type SYMBOL) (allowed-symbols continue goto halt finish interrupt) (default ?NONE))
  (slot target (type STRING SYMBOL) (allowed-symbols nil) (default nil))
  (slot reason (type STRING SYMBOL) (allowed-symbols nil) (default nil))
  (slot rule (type SYMBOL) (default ?NONE)))""",
    """(deftemplate sg-fact (slot name (type STRING) (default ?NONE)) (slot value))""",
    """(defglobal ?*sg-step* = FALSE ?*sg-state* = FALSE)""",
)
# Built after the sg-state template, which they name.
_FUNCTIONS: Final = (
    """(deffunction sg-init ()
  (bind ?*sg-step* (assert (sg-step)))
  (bind ?*sg-state* (assert (sg-state))))""",
    # Decisions are read back as plain values and retracted inside CLIPS, so Python never
    # holds a fact that is later retracted (clipspy 1.0.6 would never release it).
    """(deffunction sg-collect ()
  (bind ?out (create$))
  (do-for-all-facts ((?d sg-decision)) TRUE
    (bind ?out (create$ ?out ?d:kind ?d:target ?d:reason ?d:rule))
    (retract ?d))
  ?out)""",
    """(deffunction sg-rebind ()
  (do-for-fact ((?f sg-step)) TRUE (bind ?*sg-step* ?f))
  (do-for-fact ((?f sg-state)) TRUE (bind ?*sg-state* ?f)))""",
)


def _state_constructs(fields: Mapping[str, FactField]) -> tuple[str, str]:
    """The sg-state template and sg-begin, which modifies both engine facts inside CLIPS.

    Modifying inside CLIPS (not through clipspy's shared FactModifier) avoids the memory
    corruption seen when Python modifies facts of templates with different slot counts. The
    ``tick`` slots change at every step: CLIPS 6.4 ignores a modify that changes nothing,
    and rules must be re-evaluated at every step even when the state did not change.
    """
    names = sorted(fields)
    slots = "".join(f"\n  (slot {n} {fields[n].slot_declaration()})" for n in names)
    template = f"(deftemplate sg-state\n  (slot sg-tick (type INTEGER) (default 0)){slots})"
    params = " ".join(f"?s{i}" for i in range(len(names)))
    puts = " ".join(f"({n} ?s{i})" for i, n in enumerate(names))
    begin = f"""(deffunction sg-begin (?step ?node ?event ?result ?errors {params})
  (bind ?tick (+ 1 (fact-slot-value ?*sg-step* tick)))
  (bind ?*sg-step* (modify ?*sg-step* (tick ?tick) (step ?step) (node ?node)
    (last-event ?event) (tool-result ?result) (error-count ?errors)))
  (bind ?*sg-state* (modify ?*sg-state* (sg-tick ?tick) {puts})))"""
    return template, begin


class Capture(clips.Router):  # type: ignore[misc]  # clipspy is untyped
    """Takes every message CLIPS writes, so nothing reaches the process's stdout/stderr and
    the engine can turn error output into typed errors.

    Its priority is above clipspy's own error router, which would otherwise echo each error
    to the real stderr. It holds only its own buffers, never the engine: the router lives in
    clipspy's module-global environment table, and a reference to the engine from there
    would keep the environment alive forever.
    """

    def __init__(self) -> None:
        super().__init__("sg-capture", 50)
        self.errors: list[str] = []
        self.output: list[str] = []

    def query(self, name: str) -> bool:
        """Claim every logical name CLIPS writes to."""
        return name in ("stderr", "stdwrn", "stdout", "t")

    def write(self, name: str, message: str) -> None:
        """Keep errors and warnings apart from ordinary output, bounded in count and size (an
        error message can quote a value a rule built)."""
        target = self.errors if name in ("stderr", "stdwrn") else self.output
        if len(target) < 1000:
            target.append(message[:_MESSAGE_MAX])

    def take_errors(self) -> str:
        """The error text written since the last call, emptied."""
        text = "".join(self.errors)
        self.errors.clear()
        return text


_MESSAGE_MAX: Final = 4000


def new_environment() -> tuple[clips.Environment, Capture]:
    """A CLIPS environment with the capture router installed but not yet active.

    CLIPS asks every active router about every character it parses, and each question is a
    Python callback: with routers active, building the engine's constructs alone takes
    ~4 ms. So routers stay off while known-good text is built, and :func:`load_packs`
    turns the capture on where an error message may be needed.
    """
    env = clips.Environment()
    # clipspy's error router echoes every error to the process's stderr; ours replaces it.
    lib.DeactivateRouter(env._env, b"python-error-router")
    capture = Capture()
    env.add_router(capture)
    capture.deactivate()
    return env, capture


_TRACEBACK: Final = re.compile(r"Traceback \(most recent call last\):.*?(?=^\[|\Z)", re.S | re.M)


def clips_message(text: str) -> str:
    """A CLIPS error on one line: the construct echo after ``ERROR:`` and the Python
    traceback clipspy prints for a failed function are dropped (the cause is chained)."""
    head = _TRACEBACK.sub("", text.split("ERROR:", maxsplit=1)[0])
    return " ".join(head.split()) or "CLIPS rejected the construct"


def _error_line(construct: sx.Construct, text: str) -> int:
    """The line CLIPS stopped at: it echoes the construct up to the bad token, so the echo's
    token count indexes the same token in our text."""
    _, _, echo = text.partition("ERROR:")
    try:
        count = sum(1 for _ in sx.tokens(echo))
        for i, (_, line, _, _) in enumerate(sx.tokens(construct.source), start=1):
            if i == count:
                return construct.line + line - 1
    except sx.SourceError:
        pass  # an echo cut inside a string: fall back to the construct's first line
    return construct.line


# --------------------------------------------------------------------------- static checks

_NAMED: Final = frozenset({"defrule", "deftemplate", "deffacts"})


@dataclass
class _Checker:
    """Collects problems for one load; ``known`` grows as packs declare templates."""

    successors: Mapping[str, frozenset[str]] | None
    functions: frozenset[str] = frozenset()
    fields: frozenset[str] = frozenset()  # the state fields marked fathom.Fact()
    known: set[str] = field(default_factory=lambda: set(ENGINE_TEMPLATES))
    # template -> its multislot names (the engine's templates have none)
    multislots: dict[str, frozenset[str]] = field(
        default_factory=lambda: dict.fromkeys(ENGINE_TEMPLATES, frozenset())
    )
    rules: dict[str, str] = field(default_factory=dict)  # rule name -> pack id
    problems: list[Problem] = field(default_factory=list)

    def problem(self, pack: RulePack, what: str, line: int, message: str, hint: str) -> None:
        where = f"pack {pack.id!r} v{pack.version}, {what}, line {line}"
        self.problems.append(Problem(where, message, hint))

    def check(self, pack: RulePack, constructs: Sequence[sx.Construct]) -> None:
        for c in constructs:
            if c.kind == "deftemplate" and c.name:
                self.known.add(c.name)
                self.multislots[c.name] = frozenset(
                    s.items[1].text
                    for s in c.tree.items[2:]
                    if isinstance(s, sx.SExpr)
                    and s.head == "multislot"
                    and len(s.items) > 1
                    and isinstance(s.items[1], sx.Atom)
                )
        for c in constructs:
            what = f"{c.kind.removeprefix('def') or 'construct'} {c.name!r}"
            if c.kind not in _allow.CONSTRUCTS:
                why = (
                    ": a function can recurse or call others exponentially often, which no "
                    "budget check could stop"
                    if c.kind == "deffunction"
                    else ""
                )
                self.problem(
                    pack,
                    what,
                    c.line,
                    f"{c.kind or 'this'} is not allowed in a rule pack{why}",
                    "use defrule, deftemplate, deffacts or defglobal; a helper is a Python "
                    "function passed to the engine with functions={...}",
                )
                continue
            if c.kind in _NAMED and not sx.NAME.fullmatch(c.name):
                self.problem(
                    pack, what, c.line, f"{c.kind} needs a plain name", "name it like my-rule"
                )
                continue
            reserved = c.name.startswith("sg-") or (
                c.kind == "defglobal"
                and any(isinstance(a, sx.Atom) and a.text.startswith("?*sg-") for a in c.tree.items)
            )
            if reserved:
                self.problem(
                    pack,
                    what,
                    c.line,
                    "names starting with sg- belong to the engine",
                    "rename the construct",
                )
            analysis = _allow.Analysis(self.functions, self.multislots)
            analysis.construct(c)
            for finding in analysis.findings:
                self.problem(pack, what, finding.line, finding.message, finding.hint)
            for asserted in analysis.asserted:
                self._check_fact(pack, what, c, asserted)
            for template in analysis.queried:
                if template.text not in self.known:
                    self._unknown(pack, what, template.text, template.line)
            if c.kind == "defrule":
                self._check_rule(pack, what, c)
            elif c.kind == "deffacts":
                for fact in c.tree.items[2:]:
                    if isinstance(fact, sx.SExpr) and fact.head not in self.known:
                        self._unknown(pack, what, fact.head, fact.line)

    def _unknown(self, pack: RulePack, what: str, template: str | None, line: int) -> None:
        self.problem(
            pack,
            what,
            line,
            f"template {template!r} is not declared (CLIPS would accept it silently and "
            "the pattern would never match)",
            f"declare (deftemplate {template} ...) or use a known template: "
            f"{', '.join(sorted(self.known))}",
        )

    def _check_fact(self, pack: RulePack, what: str, c: sx.Construct, fact: sx.SExpr) -> None:
        if fact.head not in self.known:
            self._unknown(pack, what, fact.head, fact.line)
        elif fact.head == "sg-decision" and c.kind != "defrule":
            self.problem(
                pack,
                what,
                fact.line,
                "only a rule may assert sg-decision",
                "move the assert into the rule's right-hand side",
            )

    def _check_state_slots(self, pack: RulePack, what: str, pattern: sx.SExpr) -> None:
        """A rule reads only the state fields marked as facts (CLIPS would say
        ``[TMPLTDEF1] Invalid slot``)."""
        for item in pattern.items[1:]:
            if not isinstance(item, sx.SExpr) or not isinstance(item.head, str):
                continue
            name = item.head
            if name in self.fields or name == "sg-tick":
                continue
            marked = ", ".join(sorted(self.fields)) or "none"
            self.problem(
                pack,
                what,
                item.line,
                f"the rule reads state field {name!r}, which is not a rule fact (fields "
                f"marked fathom.Fact(): {marked})",
                f"mark it in the state model, e.g. {name}: Annotated[str, fathom.Fact()] = "
                "''; rules see only the fields marked so (`stargraph rules check` needs "
                "--graph to know them)",
            )

    def _check_rule(self, pack: RulePack, what: str, c: sx.Construct) -> None:
        if c.name in self.rules:
            self.problem(
                pack,
                what,
                c.line,
                f"rule {c.name!r} is already defined by pack {self.rules[c.name]!r} (CLIPS "
                "would silently replace it)",
                "rename one of the rules",
            )
        self.rules[c.name] = pack.id
        lhs, rhs = sx.split_rule(c.tree)
        for pattern in sx.patterns(lhs):
            if pattern.head not in self.known:
                self._unknown(pack, what, pattern.head, pattern.line)
            elif pattern.head == "sg-state":
                self._check_state_slots(pack, what, pattern)
        nodes = sx.static_nodes(lhs)
        if nodes is not None and self.successors is not None:
            # Only when no node it names exists can the rule never fire (a pack shared by
            # graphs may name a node some of them lack).
            graph_nodes = set(self.successors).union(*self.successors.values())
            missing = sorted(nodes - graph_nodes) if nodes.isdisjoint(graph_nodes) else []

            for node in missing:
                close = difflib.get_close_matches(node, sorted(graph_nodes), n=1)
                self.problem(
                    pack,
                    what,
                    c.line,
                    f"the rule matches node {node!r}, which is not a node of the graph "
                    f"(nodes: {', '.join(repr(n) for n in sorted(graph_nodes))}), so it "
                    "would never fire",
                    f"did you mean {close[0]!r}?" if close else "fix the node's name",
                )
            if missing:
                return  # a goto check would only repeat it
        for site in sx.decision_sites(rhs):
            if site.rule != c.name:
                self.problem(
                    pack,
                    what,
                    site.line,
                    "the decision does not name its rule, so it could not be audited",
                    f"write (rule {c.name}) in the sg-decision",
                )
            if site.kind == "goto" and not site.has_target:
                self.problem(
                    pack,
                    what,
                    site.line,
                    "a goto decision needs a target",
                    'write (target "node-name")',
                )
            if site.kind == "goto" and site.target is not None and self.successors is not None:
                why = sx.goto_problem(nodes, site.target, self.successors)
                if why:
                    self.problem(
                        pack,
                        what,
                        site.line,
                        why,
                        "goto one of the node's successors, or add the edge to the graph",
                    )


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class Loaded:
    """A loaded environment and what the load learned."""

    env: clips.Environment
    capture: Capture
    rule_packs: dict[str, str]  # rule name -> pack id


def _stub(*_args: Any) -> None:
    """Stands in for an engine function while a pack is only validated."""


# Configurations that loaded cleanly before, with their rule -> pack maps. A run creates one
# engine, so a service creates many engines from the same packs: those skip the checks and
# build with the routers off (see new_environment), which keeps creation under 5 ms.
_VALIDATED: dict[Hashable, dict[str, str]] = {}
_VALIDATED_MAX: Final = 512


def _key(
    packs: Sequence[RulePack],
    fields: Mapping[str, FactField],
    successors: Mapping[str, frozenset[str]] | None,
    functions: Mapping[str, Any],
    bounds: RuleBounds,
) -> Hashable:
    graph = None if successors is None else tuple(sorted(successors.items(), key=str))
    return (
        tuple((p.id, p.version, p.origin, p.source) for p in packs),
        tuple(sorted(fields.items())),
        graph,
        tuple(sorted(functions)),
        bounds,
    )


def load_packs(
    packs: Sequence[RulePack],
    *,
    fields: Mapping[str, FactField],
    successors: Mapping[str, frozenset[str]] | None,
    functions: Mapping[str, Callable[..., Any]],
    bounds: RuleBounds = DEFAULT_BOUNDS,
) -> Loaded:
    """A new environment with the engine constructs and every pack built into it.

    Raises one RuleCompileError naming every problem in every pack (``bounds`` included);
    the environment is then dropped, so nothing half-loaded can run.
    """
    env, capture = new_environment()
    state_template, begin = _state_constructs(fields)
    for text in (*_BASE, state_template, *_FUNCTIONS, begin):
        env.build(text)  # constant text: failure here is a bug, let CLIPSError surface
    key = _key(packs, fields, successors, functions, bounds)
    known = _VALIDATED.get(key)
    if known is not None:
        try:
            for name, function in functions.items():
                env.define_function(function, name)
            for pack in packs:
                for c in sx.read_constructs(pack.source):
                    env.build(c.text)
        except clips.CLIPSError:  # pragma: no cover - the same input built cleanly before
            _VALIDATED.pop(key, None)
            return load_packs(
                packs, fields=fields, successors=successors, functions=functions, bounds=bounds
            )
        capture.activate()
        return Loaded(env, capture, dict(known))
    capture.activate()
    rule_packs = _check_and_build(
        env, capture, packs, successors, functions, fields=fields, bounds=bounds
    )
    if len(_VALIDATED) >= _VALIDATED_MAX:
        _VALIDATED.clear()
    _VALIDATED[key] = rule_packs
    return Loaded(env, capture, dict(rule_packs))


def _check_and_build(
    env: clips.Environment,
    capture: Capture,
    packs: Sequence[RulePack],
    successors: Mapping[str, frozenset[str]] | None,
    functions: Mapping[str, Callable[..., Any]],
    *,
    fields: Iterable[str] = (),
    bounds: RuleBounds = DEFAULT_BOUNDS,
) -> dict[str, str]:
    checker = _Checker(successors, frozenset(functions), frozenset(fields))
    for name, function in functions.items():
        if not sx.NAME.fullmatch(name) or name.startswith("sg-"):
            checker.problems.append(
                Problem(f"function {name!r}", "not a usable CLIPS function name", "rename it")
            )
            continue
        try:
            env.define_function(function, name)
        except clips.CLIPSError:
            checker.problems.append(
                Problem(
                    f"function {name!r}",
                    clips_message(capture.take_errors()),
                    "pick a name that is not a CLIPS built-in",
                )
            )
    seen: set[str] = set()
    read: list[tuple[RulePack, Sequence[sx.Construct]]] = []
    for pack in packs:
        if pack.id in seen:
            checker.problems.append(
                Problem(f"pack {pack.id!r}", "the pack is loaded twice", "load it once")
            )
            continue
        seen.add(pack.id)
        try:
            constructs = sx.read_constructs(pack.source)
        except sx.SourceError as exc:
            checker.problem(pack, "text", exc.line, str(exc), exc.hint)
            continue
        read.append((pack, constructs))
        before = len(checker.problems)
        checker.check(pack, constructs)
        if len(checker.problems) > before:
            continue  # building would only repeat (or mask) what the static check found
        for c in constructs:
            try:
                env.build(c.text)
            except clips.CLIPSError:
                text = capture.take_errors()
                what = f"{c.kind.removeprefix('def')} {c.name!r}"
                checker.problem(
                    pack,
                    what,
                    _error_line(c, text),
                    f"CLIPS: {clips_message(text)}",
                    "fix the construct; the line is where CLIPS stopped reading",
                )
    # Nothing built so far matches anything (no fact exists before the engine resets), so
    # refusing here comes before any of the matching the bounds are about.
    for over in check_bounds([constructs for _, constructs in read], bounds):
        checker.problem(read[over.pack][0], over.what, over.line, over.message, over.hint)
    implied = sorted(t.name for t in env.templates() if t.implied)
    for name in implied:  # backstop: an unknown template the static reading did not see
        checker.problems.append(
            Problem(f"template {name!r}", "used but never declared", "declare it")
        )
    capture.take_errors()
    if checker.problems:
        subject = f"rule pack {packs[0].id!r}" if len(packs) == 1 else "rule packs"
        raise RuleCompileError(checker.problems, subject=subject)
    return dict(checker.rules)


def validate_pack(
    pack: RulePack,
    *,
    fact_fields: Mapping[str, Any] | None = None,
    successors: Mapping[str, Iterable[str]] | None = None,
    functions: Iterable[str] = (),
    bounds: RuleBounds | None = None,
    open_state: bool = False,
) -> frozenset[str]:
    """Load ``pack`` into a scratch environment and raise RuleCompileError if it is invalid.

    Checks the allowlist of constructs and functions (:mod:`stargraph.fathom._allow`) before
    CLIPS builds anything, so validation evaluates nothing; then syntax (per construct, with
    the line CLIPS stopped at), unknown templates and slots, decisions that do not name their
    rule, and -- when
    ``successors`` is given and a rule fixes its node literally -- every ``goto`` target.
    ``functions`` names the Python functions the engine will define. The pack must also
    stay within ``bounds`` (:class:`~stargraph.fathom.RuleBounds`: patterns per rule,
    deffacts facts, partial matches), as it must in the engine.

    With ``open_state``, every ``sg-state`` slot the rules match on and ``fact_fields`` does
    not declare is declared without a type, so a pack can be checked without the state model
    it will run with; the names of those unchecked slots are returned (else an empty set).
    """
    fields = normalise_fields(fact_fields or {})
    unchecked = frozenset(_state_slots_read(pack) - fields.keys()) if open_state else frozenset()
    fields.update((name, OpenField(object, True)) for name in unchecked)
    load_packs(
        [pack],
        fields=fields,
        successors=freeze_successors(successors),
        functions=dict.fromkeys(functions, _stub),
        bounds=bounds or DEFAULT_BOUNDS,
    )  # the scratch environment is dropped on return
    return unchecked


def _state_slots_read(pack: RulePack) -> set[str]:
    """The ``sg-state`` slots the rules of ``pack`` match on (none when it cannot be read:
    the load proper reports that, with its line)."""
    try:
        constructs = sx.read_constructs(pack.source)
    except sx.SourceError:
        return set()
    found: set[str] = set()
    for c in constructs:
        if c.kind != "defrule":
            continue
        lhs, _ = sx.split_rule(c.tree)
        for pattern in sx.patterns(lhs):
            if pattern.head != "sg-state":
                continue
            for item in pattern.items[1:]:
                if isinstance(item, sx.SExpr) and isinstance(item.head, str):
                    found.add(item.head)
    found.discard("sg-tick")
    return found


def freeze_successors(
    successors: Mapping[str, Iterable[str]] | None,
) -> dict[str, frozenset[str]] | None:
    """Successor sets as frozensets (callers may pass lists or sets)."""
    if successors is None:
        return None
    return {node: frozenset(targets) for node, targets in successors.items()}
