"""Rule packs are data: they cannot run commands, hang, crash or exhaust the process.

Regression tests for issue 25 items 1 and 2 (and the 5,000-deep expression of item 12),
the allowlist's refusals one by one, the decision watchdog, and the one path by which pack
text reaches CLIPS.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stargraph import fathom
from stargraph.errors import RuleBudgetError, RuleCompileError, RuleRuntimeError
from stargraph.fathom import RuleEngine, RulePack, validate_pack

SRC = Path(__file__).resolve().parents[2] / "src"


def refusal(text: str, **options: object) -> str:
    """The RuleCompileError message for a pack, asserting that validation refuses it."""
    with pytest.raises(RuleCompileError) as info:
        validate_pack(RulePack.from_clp("p", "1", text), **options)  # type: ignore[arg-type]
    return str(info.value)


def run_child(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with a deadline, so a pack that hangs or crashes
    the process fails the test instead of the suite (the address space is capped at 2 GiB,
    so a pack that exhausts memory fails fast instead of swapping the machine)."""
    prelude = (
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))\n"
        f"import sys; sys.path.insert(0, {str(SRC)!r})\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# --------------------------------------------------------------------------- issue 25, item 1

# Each of these ran `touch MARKER` before the allowlist: validation accepted the pack, and
# either building it (validate_pack, `rules check`) or the first decision ran the command.
ATTACKS = {
    "funcall system": '(defrule r (sg-step) => (funcall system "touch MARKER"))',
    "funcall eval": '(defrule r (sg-step) => (funcall eval "(system \\"touch MARKER\\")"))',
    "funcall build": (
        '(defrule r (sg-step) => (funcall build "(defglobal ?*z* = (system \\"touch MARKER\\"))"))'
    ),
    "funcall sym-cat": '(defrule r (sg-step) => (funcall (sym-cat sys tem) "touch MARKER"))',
    "defglobal initialiser": '(defglobal ?*x* = (funcall system "touch MARKER"))',
    "template default": (
        '(deftemplate t (slot x (default (funcall system "touch MARKER"))))\n'
        "(defrule r (t) (sg-step) => )"
    ),
    "deffacts value": (
        "(deftemplate t (slot x))\n"
        '(deffacts f (t (x (funcall system "touch MARKER"))))\n'
        "(defrule r (t) (sg-step) => )"
    ),
    "salience": ('(defrule r (declare (salience (funcall system "touch MARKER"))) (sg-step) => )'),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_a_pack_cannot_run_a_command(name: str, tmp_path: Path) -> None:
    """Issue 25 item 1: refused at validation, and nothing runs -- not at validation, not
    when an engine is built from it, not at a decision."""
    marker = tmp_path / "pwned"
    text = ATTACKS[name].replace("MARKER", str(marker))
    message = refusal(text)
    assert re.search(r"pack 'p' v1, \w+ '[^']*', line \d+: ", message), message
    assert "(fix: " in message
    with pytest.raises(RuleCompileError), RuleEngine([RulePack.from_clp("p", "1", text)]) as e:
        e.decide(step=1, node="n", state_facts={})
    assert not marker.exists()


def test_funcall_is_refused_by_name_with_the_reason_and_the_fix(tmp_path: Path) -> None:
    message = refusal('(defrule sneaky\n  (sg-step)\n  =>\n  (funcall system "touch x"))')
    assert message == (
        "rule pack 'p' is invalid: pack 'p' v1, rule 'sneaky', line 4: calls (funcall), which "
        "a rule pack may not use: it calls a function whose name is computed at run time, so "
        "it could reach any function (system, eval, ...) (fix: use the allowed CLIPS "
        "functions (stargraph.fathom.ALLOWED_FUNCTIONS), or pass a Python function to the "
        "engine with functions={...}; decide through (assert (sg-decision ...)))"
    )


def test_a_computed_function_name_is_refused() -> None:
    message = refusal('(defrule r (sg-step) => ((sym-cat sys tem) "touch x"))')
    assert "the function position of a call must be a plain function name" in message


def test_a_global_initialiser_must_be_a_literal() -> None:
    message = refusal("(defglobal ?*x* = (+ 1 2))")
    assert (
        "global '?*x*', line 1: the initialiser of ?*x* is not a literal; it would be "
        "evaluated when the pack is built, even by validation and 'stargraph rules check'"
    ) in message
    validate_pack(RulePack.from_clp("p", "1", '(defglobal ?*a* = 1 ?*b* = "s" ?*c* = sym)'))


# --------------------------------------------------------------------------- issue 25, item 2

SPIN = "(defrule spin (sg-step) => (while TRUE do (bind ?x 1)))"
RECURSE = "(deffunction f (?n) (f (+ ?n 1)))\n(defrule r (sg-step) => (f 1))"
DOUBLING = (
    '(defglobal ?*s* = "ab")\n'
    "(defrule grow (sg-step) => (loop-for-count 64 (bind ?*s* (str-cat ?*s* ?*s*))))"
)
DECIDE_ONCE = """
    import json
    from stargraph.fathom import RuleEngine, RulePack
    try:
        with RuleEngine([RulePack.from_clp("p", "1", {text!r})]) as engine:
            engine.decide(step=1, node="n", state_facts={{}})
        print(json.dumps(["decided", ""]))
    except Exception as exc:
        print(json.dumps([type(exc).__name__, str(exc)]))
"""


def decide_in_child(text: str) -> tuple[str, str]:
    """(error class name or "decided", message) of one decision, made in a child process."""
    child = run_child(DECIDE_ONCE.format(text=text))
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    kind, message = json.loads(child.stdout.strip().splitlines()[-1])
    return kind, message


def test_an_endless_loop_is_refused_instead_of_hanging_decide() -> None:
    """Issue 25 item 2: `while TRUE` used to hang decide() forever (the child's deadline
    fails the test); now validation refuses it."""
    kind, message = decide_in_child(SPIN)
    assert kind == "RuleCompileError"
    assert (
        "rule 'spin', line 1: calls (while), which a rule pack may not use: it loops "
        "without a bound"
    ) in message


def test_recursion_is_refused_instead_of_crashing_the_process() -> None:
    """Issue 25 item 2: a recursive deffunction killed the process with SIGSEGV (the child's
    return code); now deffunction is not a construct a pack may define."""
    kind, message = decide_in_child(RECURSE)
    assert kind == "RuleCompileError"
    assert "function 'f', line 1: deffunction is not allowed in a rule pack" in message


def test_string_doubling_is_stopped_by_the_memory_limit() -> None:
    """Issue 25 item 2: a str-cat doubling loop exhausted memory (the child, capped at 2 GiB,
    died); each iteration only doubles, so it validates, and the watchdog stops it at the
    engine's memory limit."""
    kind, message = decide_in_child(DOUBLING)
    assert kind == "RuleBudgetError"
    assert "over the engine's memory_limit of 33,554,432, and was stopped in rule p/grow" in (
        message
    )


def test_a_long_loop_is_stopped_by_the_time_budget() -> None:
    """A pack whose loops are bounded but far too long: the watchdog stops the decision at
    its time budget and the engine decides normally afterwards (a child with a deadline, in
    case it does not)."""
    child = run_child(
        """
        from stargraph.errors import RuleBudgetError
        from stargraph.fathom import RuleEngine, RulePack
        pack = RulePack.from_clp("slow", "1",
            '(defrule crawl (sg-step (node "a")) => '
            '(loop-for-count 10000 (loop-for-count 10000 (loop-for-count 10000 (bind ?x 1)))))'
            '(defrule go (sg-step (node "b")) => '
            '(assert (sg-decision (kind halt) (reason "ok") (rule go))))')
        with RuleEngine([pack], decide_timeout_s=0.2) as engine:
            try:
                engine.decide(step=1, node="a", state_facts={})
            except RuleBudgetError as exc:
                print(exc)
            print(engine.decide(step=2, node="b", state_facts={}).reason)
        """
    )
    assert child.returncode == 0, child.stderr[-2000:]
    first, second = child.stdout.strip().splitlines()
    assert first.startswith(
        "the rules ran past the decision's time budget of 0.2 s and were stopped in rule "
        "slow/crawl; "
    )
    assert first.endswith("(step 1, node 'a')")
    assert second == "ok"


def test_budget_errors_are_rule_runtime_errors_and_the_engine_recovers() -> None:
    pack = RulePack.from_clp(
        "g",
        "1",
        '(defglobal ?*s* = "abcd")\n'
        '(defrule grow (sg-step (node "a")) => '
        "(loop-for-count 40 (bind ?*s* (str-cat ?*s* ?*s*))))\n"
        '(defrule reset (sg-step (node "b")) => (bind ?*s* "x")'
        " (assert (sg-decision (kind halt) (reason ?*s*) (rule reset))))",
    )
    with RuleEngine([pack], memory_limit=8 * 2**20) as engine:
        with pytest.raises(RuleBudgetError) as info:
            engine.decide(step=1, node="a", state_facts={})
        assert isinstance(info.value, RuleRuntimeError)
        assert (info.value.step, info.value.node) == (1, "a")
        assert "memory_limit of 8,388,608" in str(info.value)
        assert engine.decide(step=2, node="b", state_facts={}).reason == "x"


def test_budget_arguments_are_checked() -> None:
    pack = fathom.default_termination_pack(max_steps=3, error_budget=3)
    for bad in (0, -1.0, float("inf"), "1"):
        with pytest.raises(ValueError, match="decide_timeout_s must be a positive number"):
            RuleEngine([pack], decide_timeout_s=bad)  # type: ignore[arg-type]
    for bad_limit in (0, 1.5, True):
        with pytest.raises(ValueError, match="memory_limit must be a positive int"):
            RuleEngine([pack], memory_limit=bad_limit)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- issue 25, item 12


def test_a_5000_deep_expression_is_a_typed_error() -> None:
    """It raised RecursionError from the checker's recursive walk."""
    deep = "(+ 1 " * 5000 + "1" + ")" * 5000
    message = refusal(f"(defrule r (sg-step) => (bind ?x {deep}))")
    assert (
        "pack 'p' v1, text, line 1: lists are nested more than 64 levels deep; no rule needs "
        "that many, and deeper text could exhaust the parser's stack"
    ) in message


# --------------------------------------------------------------------------- the allowlist

ALL_FORMS = """\
(defglobal ?*count* = 0 ?*label* = "start")
(deftemplate note
  "A note."
  (slot text (type STRING) (default "none"))
  (multislot tags (default a b))
  (slot n (type INTEGER) (range 0 ?VARIABLE)))
(deffacts seed (note (text "hello") (tags x y) (n 1)))
(defrule count-errors
  "Counts errors."
  (declare (salience 5))
  (sg-step (step ?s) (error-count ?e&:(> ?e 0)))
  ?n <- (note (text ?t) (tags $?tags) (n ?k))
  (test (and (stringp ?t) (>= ?s 1)))
  (not (note (text "stop")))
  =>
  (bind ?*count* (+ ?*count* 1))
  (bind ?msg (str-cat ?t "-" ?s))
  (if (> ?*count* 2) then (bind ?*label* "many") else (bind ?*label* (sym-cat x ?s)))
  (switch ?k (case 1 then (bind ?x 1)) (default (bind ?x 2)))
  (loop-for-count (?i 1 3) do (bind ?x (+ ?x ?i)))
  (progn$ (?tag ?tags) (bind ?y (upcase ?tag)))
  (foreach ?tag (create$ a b c) (bind ?z (lowcase ?tag)))
  (do-for-all-facts ((?f note)) (eq ?f:text "hello") (bind ?w ?f:n))
  (bind ?all (find-all-facts ((?f note)) TRUE))
  (if (any-factp ((?f note)) (> ?f:n 0)) then (bind ?q 1))
  (if (< ?k 2) then (modify ?n (n (+ ?k 1))))
  (assert (sg-fact (name "seen") (value ?msg)))
  (assert (sg-decision (kind halt) (rule count-errors)
    (reason (str-cat "count " ?*count* " " (sub-string 1 3 ?msg) " " (length$ ?all))))))
"""


def test_a_pack_using_every_allowed_form_validates_and_runs() -> None:
    pack = RulePack.from_clp("forms", "1", ALL_FORMS)
    validate_pack(pack)
    with RuleEngine([pack]) as engine:
        assert engine.decide(step=1, node="n", state_facts={}).kind == "continue"
        decision = engine.decide(step=2, node="n", state_facts={}, error_count=1)
    assert (decision.kind, decision.rule) == ("halt", "forms/count-errors")
    assert str(decision.reason).startswith("count ")


REFUSED = {
    "defmodule": ("(defmodule OTHER)", "defmodule is not allowed in a rule pack"),
    "deffunction": ("(deffunction f () 1)", "deffunction is not allowed in a rule pack"),
    "unknown function": (
        "(defrule r (sg-step) => (gensym*))",
        "calls (gensym*), which a rule pack may not use: it is not deterministic",
    ),
    "not on the list": (
        "(defrule r (sg-step) => (frobnicate 1))",
        "calls (frobnicate), which is not on the rule-pack allowlist",
    ),
    "nested funcall": (
        '(defrule r (sg-step) => (bind ?x (str-cat "a" (+ 1 (funcall eval "1")))))',
        "calls (funcall)",
    ),
    "funcall in a condition": (
        '(defrule r (sg-step (node ?n&:(funcall system "x"))) => )',
        "calls (funcall)",
    ),
    "funcall in a test": ('(defrule r (sg-step) (test (funcall system "x")) => )', "(funcall)"),
    "computed loop bound": (
        "(defrule r (sg-step (step ?s)) => (loop-for-count ?s (bind ?x 1)))",
        "loop-for-count needs literal integer bounds",
    ),
    "a call as the loop range": (
        "(defrule r (sg-step) => (loop-for-count (system 1 2) (bind ?x 1)))",
        "loop-for-count needs literal integer bounds",
    ),
    "too many iterations": (
        "(defrule r (sg-step) => (loop-for-count 100000 (bind ?x 1)))",
        "loop-for-count runs 100000 times; at most 10000",
    ),
    "a call as the progn$ source": (
        '(defrule r (sg-step) => (progn$ (funcall system "x") (bind ?x 1)))',
        "calls (funcall)",
    ),
    "default-dynamic": (
        "(deftemplate t (slot x (default-dynamic (+ 1 1))))",
        "slot 'x': default-dynamic is evaluated at every assert",
    ),
    "computed default": (
        "(deftemplate t (slot x (default (+ 1 1))))",
        "slot 'x': (default ...) must hold literals",
    ),
    "computed fact value": (
        "(deftemplate t (slot x))\n(deffacts f (t (x (+ 1 1))))",
        "a value in the (t ...) fact is not a literal",
    ),
    "computed salience": (
        "(defrule r (declare (salience (+ 1 1))) (sg-step) => )",
        "a declare holds (salience <integer literal>)",
    ),
    "spread into one string": (
        "(defrule r (sg-step) => (bind ?m (create$ a b)) (bind ?s (str-cat $?m)))",
        "(str-cat ...) spreads a multifield into one string",
    ),
    "two query variables": (
        "(defrule r (sg-step) => (do-for-all-facts ((?a sg-fact) (?b sg-fact)) TRUE))",
        "must bind exactly one fact variable",
    ),
    "a query inside a condition": (
        "(defrule r (sg-step) (test (any-factp ((?f sg-fact)) TRUE)) => )",
        "inside a condition runs a query per candidate fact",
    ),
    "a query inside a query condition": (
        "(defrule r (sg-step) => (do-for-all-facts ((?f sg-fact))"
        " (any-factp ((?g sg-fact)) TRUE) (bind ?x 1)))",
        "inside a condition runs a query per candidate fact",
    ),
    "building in a condition": (
        '(defrule r (sg-step (node ?n&:(eq (str-cat ?n ?n) "aa"))) => )',
        "builds a string or multifield from variables; conditions are evaluated once per "
        "candidate fact",
    ),
    "an action in a condition": (
        "(defrule r (sg-step) (test (bind ?x 1)) => )",
        "(bind ...) is an action, not allowed inside a condition",
    ),
    "doubling five times": (
        "(defrule r (sg-step (node ?s)) => " + " ".join(["(bind ?s (str-cat ?s ?s))"] * 5) + ")",
        "the actions can build strings or multifields of up to 62 times the size of the "
        "largest value (at most 16)",
    ),
    "doubling a literal": (
        '(defrule r (sg-step) => (bind ?s "abcdefgh") '
        + " ".join(["(bind ?s (str-cat ?s ?s))"] * 20)
        + ")",
        "bytes from the pack's literals (at most 1,048,576)",
    ),
    "binding an engine global": (
        "(defrule r (sg-step) => (bind ?*sg-step* 1))",
        "?*sg-step* belongs to the engine",
    ),
    "quadratic search": (
        '(defrule r (sg-step (node ?n)) (test (str-index "a" ?n)) => )',
        "calls (str-index), which a rule pack may not use: it takes time quadratic",
    ),
    "printout": ('(defrule r (sg-step) => (printout t "hi"))', "calls (printout)"),
    "unknown query template": (
        "(defrule r (sg-step) => (do-for-all-facts ((?f nothing)) TRUE (bind ?x 1)))",
        "template 'nothing' is not declared",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_allowlist_refuses(name: str) -> None:
    text, expected = REFUSED[name]
    message = refusal(text)
    assert expected in message, message
    assert "(fix: " in message


def test_python_functions_the_engine_defines_may_be_called() -> None:
    text = "(defrule r (sg-step (node ?n)) (test (check ?n)) => (bind ?x (note ?n)))"
    message = refusal(text)
    assert "calls (check), which is not on the rule-pack allowlist" in message
    validate_pack(RulePack.from_clp("p", "1", text), functions=["check", "note"])


# --------------------------------------------------------------------------- one way in

BUILDERS = re.compile(
    r"\.build\(|\.eval\(|\.load\(|\.batch|lib\.(Build|Eval|Load|Batch|Bload)\b|Environment\("
)


def test_pack_text_reaches_clips_only_through_the_checked_loader() -> None:
    """Every pack -- from a .clp file, a JSON spec, an IR, a plugin -- is a RulePack that
    reaches CLIPS through fathom._load.load_packs, which checks it before building it.
    Nothing else imports clipspy, and inside fathom only _load builds or evaluates text
    (plus the engine's one constant ``(retract *)``)."""
    package = SRC / "stargraph"
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        relative = path.relative_to(package).as_posix()
        imports_clips = re.search(r"^\s*(import clips|from clips)", text, re.M)
        if not relative.startswith("fathom/"):
            assert not imports_clips, f"{relative} imports clipspy"
            continue
        for match in BUILDERS.finditer(text):
            line = text[: match.start()].count("\n") + 1
            source = text.splitlines()[line - 1].strip()
            allowed = relative == "fathom/_load.py" or source == 'env.eval("(retract *)")'
            assert allowed, f"{relative}:{line}: {source}"
