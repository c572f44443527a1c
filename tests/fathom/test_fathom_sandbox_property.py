"""Property (issue 25 acceptance): rule packs generated from the CLIPS grammar -- including
``funcall``, ``eval``, ``build``, ``system``, ``sym-cat`` name tricks, ``while``,
``loop-for-count``, recursion through ``deffunction``, ``defglobal`` initialisers and string
doubling -- either fail validation with a typed error or run ``decide()`` within its budget,
and the marker file a command would create never appears."""

from __future__ import annotations

import time
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from stargraph.errors import RuleBudgetError, RuleCompileError, RuleRuntimeError
from stargraph.fathom import ALLOWED_FUNCTIONS, RuleEngine, RulePack, validate_pack

BUDGET_S = 0.3
MEMORY_LIMIT = 8 * 2**20

# Commands that create MARKER, written every way CLIPS offers to reach a function.
COMMANDS = [
    '(system "touch MARKER")',
    '(funcall system "touch MARKER")',
    '(funcall (sym-cat sys tem) "touch MARKER")',
    '((sym-cat sys tem) "touch MARKER")',
    '(eval "(system \\"touch MARKER\\")")',
    '(funcall eval "(system \\"touch MARKER\\")")',
    '(funcall (sym-cat ev al) "(system \\"touch MARKER\\")")',
    '(build "(defglobal ?*q* = (system \\"touch MARKER\\"))")',
    '(funcall build "(defglobal ?*q* = (system \\"touch MARKER\\"))")',
    '(loop-for-count (system "touch MARKER") (bind ?x 1))',
    '(progn$ (system "touch MARKER") (bind ?x 1))',
    '(str-cat (funcall system "touch MARKER"))',
]

ATOMS = st.sampled_from(
    ["0", "1", "3", "-2", '"a"', '"xy"', "TRUE", "FALSE", "nil", "sym", "?n", "?s", "?x",
     "?*g*", "$?m"]
)  # fmt: skip
HEADS = st.sampled_from(
    [*sorted(ALLOWED_FUNCTIONS - {"assert", "modify", "duplicate", "retract"}),
     "while", "funcall", "eval", "build", "system", "f", "g", "printout", "format",
     "expand$", "implode$", "explode$", "str-index", "gensym*", "halt", "run", "reset"]
)  # fmt: skip


def _call(parts: tuple[str, list[str]]) -> str:
    head, args = parts
    return f"({head}{''.join(' ' + a for a in args)})"


# Anything in call position, including the forbidden and the unknown.
ANY_EXPRESSION = st.recursive(
    ATOMS | st.sampled_from(COMMANDS),
    lambda inner: st.tuples(HEADS, st.lists(inner, max_size=4)).map(_call),
    max_leaves=8,
)
# Mostly well-typed expressions, so that many packs validate and run.
NUMBERS = st.recursive(
    st.sampled_from(["0", "2", "-7", "?n", "?x"]),
    lambda inner: (
        st.tuples(
            st.sampled_from(["+", "-", "*", "max", "min"]), st.lists(inner, min_size=2, max_size=3)
        ).map(_call)
        | st.sampled_from(["(length$ ?m)", '(str-length "abc")', "(str-length ?s)"])
    ),
    max_leaves=4,
)
STRINGS = st.recursive(
    st.sampled_from(['"a"', '"xyz"', "sym", "?s"]),
    lambda inner: (
        st.tuples(
            st.sampled_from(["str-cat", "sym-cat"]),
            st.lists(inner | NUMBERS, min_size=1, max_size=3),
        ).map(_call)
        | inner.map(lambda e: f"(upcase {e})")
        | st.tuples(NUMBERS, inner, inner).map(
            lambda t: f"(if (> {t[0]} 1) then {t[1]} else {t[2]})"
        )
    ),
    max_leaves=4,
)
# Conditions see only the pattern's variables.
CONDITIONS = st.sampled_from(
    ["(> ?n 1)", '(eq ?s "a")', "(< (str-length ?s) 3)", "(neq ?n (+ 1 2))",
     '(if (> ?n 2) then (eq ?s "b") else TRUE)', "(> (length$ (create$ a b)) ?n)",
     '(eq (str-cat ?s ?s) "aa")']
)  # fmt: skip
MULTIFIELDS = st.sampled_from(["?m", "(create$ a b c)", "(create$ ?s ?n)", "(rest$ ?m)"])
EXPRESSIONS = NUMBERS | STRINGS | MULTIFIELDS
COUNTS = st.sampled_from(["3", "40", "10000", "1000000", "?n", "(+ 1 2)"])
GROWTH = st.sampled_from(
    ["(bind ?s (str-cat ?s ?s))", "(bind ?*g* (str-cat ?*g* ?*g*))",
     "(bind ?*g* (sym-cat ?*g* ?*g* ?*g*))", "(bind ?m (create$ ?m ?m))",
     '(bind ?s (str-cat ?s "abcdefgh" ?s))', "(bind ?*g* (create$ ?*g* ?*g*))"]
)  # fmt: skip


@st.composite
def actions(draw: st.DrawFn, hostile: bool, depth: int = 0) -> str:
    """One action; a hostile pack also draws commands, junk calls, while and computed
    loop bounds, a friendly one only forms the allowlist may accept."""
    kinds = ["bind", "bind", "growth", "assert"]
    if hostile:
        kinds += ["command", "junk", "while"]
    if depth < 2:
        kinds += ["loop", "loop", "progn", "query"]
    kind = draw(st.sampled_from(kinds))
    if kind == "bind":
        target, values = draw(
            st.sampled_from(
                [("?s", STRINGS), ("?x", NUMBERS), ("?m", MULTIFIELDS), ("?*g*", EXPRESSIONS)]
            )
        )
        return f"(bind {target} {draw(values)})"
    if kind == "growth":
        return draw(GROWTH)
    if kind == "assert":
        return f'(assert (sg-fact (name "k") (value {draw(NUMBERS | STRINGS)})))'
    if kind == "command":
        return draw(st.sampled_from(COMMANDS))
    if kind == "junk":
        return draw(ANY_EXPRESSION)
    body = " ".join(draw(st.lists(actions(hostile, depth + 1), min_size=1, max_size=3)))
    if kind == "while":
        return f"(while {draw(st.sampled_from(['TRUE', '(> 3 1)', '?x']))} do {body})"
    if kind == "loop":
        counts = COUNTS if hostile else st.sampled_from(["3", "40", "10000"])
        return f"(loop-for-count {draw(counts)} do {body})"
    if kind == "progn":
        return f"(progn$ (?e ?m) {body})"
    return f"(do-for-all-facts ((?f sg-fact)) TRUE {body})"


@st.composite
def packs(draw: st.DrawFn) -> str:
    hostile = draw(st.booleans())
    initial = draw(st.sampled_from(["1", '"ab"', "x", *(["(+ 1 2)", *COMMANDS] * hostile)]))
    parts = [f"(defglobal ?*g* = {initial})"]
    recursion = draw(
        st.sampled_from(
            ["", "", "", "(deffunction f (?k) (f ?k))",
             "(deffunction g (?k) (f ?k))\n(deffunction f (?k) (g ?k))",
             "(deffunction f (?k) (if (> ?k 0) then (f (- ?k 1)) else 0))"]
        )
    )  # fmt: skip
    if recursion and hostile:
        parts.append(recursion)
    if draw(st.booleans()):
        default = draw(st.sampled_from(['"d"', *(["(+ 1 1)", *COMMANDS] * hostile)]))
        parts.append(f"(deftemplate t (slot v (default {default})))")
    for i in range(draw(st.integers(1, 3))):
        test = f" (test {draw(CONDITIONS)})" if draw(st.booleans()) else ""
        body = " ".join(draw(st.lists(actions(hostile), min_size=1, max_size=3)))
        decide = f"(assert (sg-decision (kind continue) (rule r{i})))"
        parts.append(
            f"(defrule r{i} (sg-step (step ?n) (node ?s)){test} => "
            f"(bind ?x 1) (bind ?m (create$ a b)) {body} {decide})"
        )
    return "\n".join(parts)


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=packs())
def test_every_generated_pack_is_refused_or_decides_within_budget(
    text: str, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    source = text.replace("MARKER", str(marker))
    pack = RulePack.from_clp("gen", "1", source)
    try:
        validate_pack(pack)
    except RuleCompileError:
        event("refused at validation")  # typed (any other exception fails the test)
    else:
        try:
            engine = RuleEngine(
                [pack], decide_timeout_s=BUDGET_S, memory_limit=MEMORY_LIMIT, run_limit=50
            )
        except RuleRuntimeError:
            event("failed while the engine started")  # deffacts-triggered rules: typed
        else:
            with engine:
                for step in (1, 2):
                    started = time.monotonic()
                    try:
                        engine.decide(step=step, node="a", state_facts={})
                        event("decided")
                    except RuleBudgetError as exc:
                        event(f"stopped by the {'time' if 'time' in str(exc) else 'memory'} budget")
                    except RuleRuntimeError:
                        event("a rule failed")  # typed: CLIPS reported an error
                    # Generous: the budget is 0.3 s; this only catches a decision nothing
                    # stopped (a loaded machine may add seconds, never minutes).
                    assert time.monotonic() - started < 30, source
    assert not marker.exists(), source
