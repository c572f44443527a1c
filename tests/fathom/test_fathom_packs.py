"""Rule packs: hashing, IR round trip, the declarative form, files, and malformed packs.

A malformed pack must fail with RuleCompileError naming pack, rule and line -- before
anything runs -- and the messages are pinned here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stargraph import fathom
from stargraph.errors import CompileError, RuleCompileError
from stargraph.fathom import RuleEngine, RulePack, validate_pack

SUCCESSORS = {"plan": ["search", "answer"], "search": ["plan"], "answer": []}


def compile_error(pack: RulePack, **kwargs: object) -> str:
    """The message of the RuleCompileError validate_pack raises (and RuleEngine too)."""
    with pytest.raises(RuleCompileError) as info:
        validate_pack(pack, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(RuleCompileError) as again:
        RuleEngine([pack], **kwargs).close()  # type: ignore[arg-type]
    assert str(again.value) == str(info.value), "engine and validate_pack must agree"
    assert isinstance(info.value, CompileError)
    return str(info.value)


# --------------------------------------------------------------------------- data


def test_source_hash_is_sha256_of_the_source_and_ir_round_trips() -> None:
    pack = RulePack.from_clp("p", "1", "(deftemplate t (slot x))\n")
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", pack.source_hash)
    ir = json.loads(json.dumps(pack.to_ir()))
    assert ir == {
        "id": "p",
        "version": "1",
        "source": "(deftemplate t (slot x))\n",
        "origin": "clp",
        "source_hash": pack.source_hash,
    }
    assert RulePack.from_ir(ir) == pack


def test_from_ir_refuses_source_edited_by_hand() -> None:
    ir = RulePack.from_clp("p", "1", "(deftemplate t (slot x))").to_ir()
    ir["source"] = "(deftemplate t (slot y))"
    with pytest.raises(RuleCompileError, match=r"source_hash sha256:\w+ does not match"):
        RulePack.from_ir(ir)


@given(st.text(max_size=200), st.text(max_size=200))
def test_hash_changes_exactly_when_the_source_changes(a: str, b: str) -> None:
    pa, pb = RulePack.from_clp("p", "1", a), RulePack.from_clp("p", "1", b)
    assert (pa.source_hash == pb.source_hash) == (a == b)


def test_pack_is_frozen() -> None:
    pack = RulePack.from_clp("p", "1", "")
    with pytest.raises(ValueError, match="frozen"):
        pack.id = "q"  # type: ignore[misc]


def test_load_clp_file_with_header_and_json_spec(tmp_path: Path) -> None:
    clp = tmp_path / "route.clp"
    clp.write_text(
        "; fathom-pack: id=routing version=2.1\n"
        '(defrule go (sg-step (node "plan")) => '
        '(assert (sg-decision (kind goto) (target "search") (rule go))))\n'
    )
    pack = RulePack.load(clp)
    assert (pack.id, pack.version, pack.origin) == ("routing", "2.1", "clp")
    spec = tmp_path / "route.json"
    spec.write_text(
        json.dumps(
            {
                "id": "r2",
                "version": "1",
                "rules": [{"name": "go", "when": [{"node": "plan"}], "then": {"goto": "search"}}],
            }
        )
    )
    from_json = RulePack.load(spec)
    assert from_json.origin == "spec"
    for p in (pack, from_json):
        with RuleEngine([p], successors=SUCCESSORS) as engine:
            d = engine.decide(step=1, node="plan", state_facts={})
        assert (d.kind, d.target, d.rule) == ("goto", "search", f"{p.id}/go")


def test_load_clp_without_version_names_the_fix(tmp_path: Path) -> None:
    clp = tmp_path / "x.clp"
    clp.write_text("")
    with pytest.raises(RuleCompileError, match=r"the pack has no version.*fathom-pack: id="):
        RulePack.load(clp)
    assert RulePack.load(clp, version="3").id == "x"


# --------------------------------------------------------------------------- spec form


def test_spec_operators_compile_to_working_rules() -> None:
    pack = RulePack.from_spec(
        {
            "id": "ops",
            "version": 1,
            "rules": [
                {
                    "name": "range",
                    "when": [{"state.attempts": {">=": 2, "<": 4}}],
                    "then": {"interrupt": "in range"},
                },
                {"name": "neq", "when": [{"last_event": {"!=": "x"}}], "then": {"halt": "ne"}},
                {
                    "name": "mark",
                    "when": [{"tool_result": {"not_in": ["ok", "fine"]}}, {"no_fact": "bad"}],
                    "then": {"assert": {"name": "bad", "value": 'yes "quoted"'}},
                },
                {
                    "name": "seen",
                    "salience": -5,
                    "when": [{"fact.bad": 'yes "quoted"'}, {"node": {"in": ["plan", "answer"]}}],
                    "then": {"goto": "search"},
                },
            ],
        }
    )
    fields = {"attempts": int}
    graph = {"plan": ["search"], "answer": ["search"], "search": []}
    with RuleEngine([pack], fact_fields=fields, successors=graph) as engine:
        d1 = engine.decide(step=1, node="plan", state_facts={"attempts": 3}, last_event="x")
        d2 = engine.decide(step=2, node="plan", state_facts={"attempts": 9}, tool_result="err")
        d3 = engine.decide(step=3, node="plan", state_facts={"attempts": 0}, last_event="x")
        d4 = engine.decide(step=4, node="search", state_facts={"attempts": 1}, last_event="x")
    assert (d1.kind, d1.rule) == ("interrupt", "ops/range")
    # tool_result nil is not in ["ok", "fine"]: mark asserts the fact once, seen then matches
    assert set(d1.fired) == {"ops/range", "ops/mark", "ops/seen"}
    assert (d2.kind, d2.rule, d2.fired) == ("halt", "ops/neq", ("ops/neq", "ops/seen"))
    assert (d3.kind, d3.target, d3.fired) == ("goto", "search", ("ops/seen",))
    assert d4.kind == "continue"


def test_spec_errors_name_every_bad_rule_at_once() -> None:
    with pytest.raises(RuleCompileError) as info:
        RulePack.from_spec(
            {
                "id": "bad",
                "version": "1",
                "rules": [
                    {"name": "ok", "when": [], "then": {"halt": "x"}},
                    {"name": "no_then", "when": []},
                    {"name": "bad_op", "when": [{"step": {"~": 1}}], "then": {"halt": "x"}},
                    {"name": "bad_subject", "when": [{"colour": "red"}], "then": {"halt": "x"}},
                    {"name": "ok", "when": [], "then": {"halt": "x"}},
                ],
            }
        )
    assert str(info.value) == (
        "rule pack 'bad' has 4 problems:\n"
        "  - pack 'bad', rule 'no_then' (rules[1]): 'then' must be an object with actions from "
        "['assert', 'finish', 'goto', 'halt', 'interrupt'], got None (fix: write \"then\": "
        '{"halt": "reason"})\n'
        "  - pack 'bad', rule 'bad_op' (rules[2]): unknown operators ['~'] (fix: use one of "
        "!= < <= == > >= in not_in)\n"
        "  - pack 'bad', rule 'bad_subject' (rules[3]): unknown condition subject 'colour' "
        "(fix: use step, node, last_event, tool_result, error_count, state.<field>, "
        "fact.<name> or no_fact)\n"
        "  - pack 'bad', rule 'ok' (rules[4]): the name is reserved or already used "
        "(fix: rename the rule)"
    )


def test_spec_goto_to_non_successor_is_caught_statically() -> None:
    pack = RulePack.from_spec(
        {
            "id": "route",
            "version": "1",
            "rules": [{"name": "jump", "when": [{"node": "search"}], "then": {"goto": "answer"}}],
        }
    )
    assert compile_error(pack, successors=SUCCESSORS) == (
        "rule pack 'route' is invalid: pack 'route' v1, rule 'jump', line 7: goto target "
        "'answer' is not a successor of node 'search' (successors: 'plan') (fix: goto one of "
        "the node's successors, or add the edge to the graph)"
    )
    validate_pack(pack)  # without a graph there is nothing to check against


# --------------------------------------------------------------------------- malformed .clp


def test_syntax_error_names_pack_rule_and_the_line_clips_stopped_at() -> None:
    pack = RulePack.from_clp(
        "broken",
        "1",
        "(defrule fine\n"
        '  (sg-step (node "plan"))\n'
        "  =>\n"
        "  (assert (sg-decision (kind continue) (rule fine))))\n"
        "\n"
        "(defrule typo\n"
        "  (sg-step (step ?s)\n"
        "           (nod 1))\n"
        "  =>\n"
        "  (assert (sg-decision (kind halt) (rule typo))))\n",
    )
    assert compile_error(pack) == (
        "rule pack 'broken' is invalid: pack 'broken' v1, rule 'typo', line 8: CLIPS: "
        "[TMPLTDEF1] Invalid slot 'nod' not defined in corresponding deftemplate 'sg-step'. "
        "(fix: fix the construct; the line is where CLIPS stopped reading)"
    )


def test_unbalanced_parenthesis_names_the_construct_and_line() -> None:
    pack = RulePack.from_clp(
        "broken",
        "1",
        "(defrule fine (sg-step) => (assert (sg-decision (kind continue) (rule fine))))\n"
        "(defrule open\n  (sg-step (step ?s)\n  =>\n",
    )
    message = compile_error(pack)
    assert message == (
        "rule pack 'broken' is invalid: pack 'broken' v1, text, line 3: '(' is never closed "
        "(in the construct '(defrule open' at line 2) (fix: balance the parentheses/quotes)"
    )


def test_unknown_template_is_refused_not_silently_ignored() -> None:
    pack = RulePack.from_clp(
        "typo",
        "1",
        "(defrule stop\n"
        "  (sg-stat (done TRUE))\n"
        "  =>\n"
        '  (assert (sg-decision (kind halt) (reason "x") (rule stop))))\n'
        "(defrule mark (sg-step) => (assert (seen-it)))\n",
    )
    message = compile_error(pack)
    assert "pack 'typo' v1, rule 'stop', line 2: template 'sg-stat' is not declared" in message
    assert "pack 'typo' v1, rule 'mark', line 5: template 'seen-it' is not declared" in message
    assert "(fix: declare (deftemplate sg-stat ...) or use a known template:" in message


def test_user_templates_are_known_within_the_pack() -> None:
    pack = RulePack.from_clp(
        "own",
        "1",
        "(deftemplate seen (slot n (type INTEGER)))\n"
        "(defrule mark (sg-step (step ?s)) => (assert (seen (n ?s))))\n"
        "(defrule stop (seen (n 2)) => (assert (sg-decision (kind halt) (rule stop))))\n",
    )
    validate_pack(pack)
    with RuleEngine([pack]) as engine:
        assert engine.decide(step=1, node="a", state_facts={}).kind == "continue"
        assert engine.decide(step=2, node="a", state_facts={}).rule == "own/stop"


def test_goto_to_non_successor_names_pack_rule_line_and_successors() -> None:
    pack = RulePack.from_clp(
        "route",
        "1",
        "(defrule to_answer\n"
        '  (sg-step (node "search"))\n'
        "  =>\n"
        '  (assert (sg-decision (kind goto) (target "answer") (rule to_answer))))\n'
        "(defrule nowhere\n"
        "  (sg-step)\n"
        "  =>\n"
        '  (assert (sg-decision (kind goto) (target "mars") (rule nowhere))))\n',
    )
    assert compile_error(pack, successors=SUCCESSORS) == (
        "rule pack 'route' has 2 problems:\n"
        "  - pack 'route' v1, rule 'to_answer', line 4: goto target 'answer' is not a "
        "successor of node 'search' (successors: 'plan') (fix: goto one of the node's "
        "successors, or add the edge to the graph)\n"
        "  - pack 'route' v1, rule 'nowhere', line 8: goto target 'mars' is not a node of the "
        "graph (nodes: 'answer', 'plan', 'search') (fix: goto one of the node's successors, "
        "or add the edge to the graph)"
    )


def test_negated_node_pattern_is_not_taken_as_the_rules_node() -> None:
    pack = RulePack.from_clp(
        "neg",
        "1",
        '(defrule back (sg-step) (not (sg-step (node "plan"))) =>'
        ' (assert (sg-decision (kind goto) (target "plan") (rule back))))',
    )
    validate_pack(pack, successors=SUCCESSORS)  # only known at run time


def test_decision_must_name_its_own_rule() -> None:
    pack = RulePack.from_clp(
        "liar",
        "1",
        "(defrule a (sg-step) => (assert (sg-decision (kind halt) (rule b))))",
    )
    assert compile_error(pack) == (
        "rule pack 'liar' is invalid: pack 'liar' v1, rule 'a', line 1: the decision does not "
        "name its rule, so it could not be audited (fix: write (rule a) in the sg-decision)"
    )


@pytest.mark.parametrize(
    ("call", "why"),
    [
        ("(exit)", "ends the process"),
        ('(system "rm -rf /")', "runs a shell command"),
        ("(reset)", "resets the environment the engine owns"),
        ("(halt)", "stops rule execution behind the engine's back"),
    ],
)
def test_dangerous_functions_are_refused(call: str, why: str) -> None:
    pack = RulePack.from_clp("evil", "1", f"(defrule r\n  (sg-step)\n  =>\n  {call})")
    head = call[1:].split(maxsplit=1)[0].rstrip(")")
    assert compile_error(pack) == (
        f"rule pack 'evil' is invalid: pack 'evil' v1, rule 'r', line 4: calls ({head}), "
        f"which a rule pack may not use: it {why} (fix: use the allowed CLIPS functions "
        "(stargraph.fathom.ALLOWED_FUNCTIONS), or pass a Python function to the engine with "
        "functions={...}; decide through (assert (sg-decision ...)))"
    )


def test_slot_named_like_a_forbidden_function_is_fine() -> None:
    pack = RulePack.from_clp(
        "ok",
        "1",
        "(deftemplate door (slot close))\n(defrule r (door (close 1)) (sg-step) => )",
    )
    validate_pack(pack)


def test_reserved_names_and_disallowed_constructs() -> None:
    pack = RulePack.from_clp(
        "res",
        "1",
        "(deftemplate sg-mine (slot x))\n(defmodule OTHER)\n(defglobal ?*sg-x* = 1)\n",
    )
    message = compile_error(pack)
    assert "pack 'res' v1, template 'sg-mine', line 1: names starting with sg-" in message
    assert "pack 'res' v1, module 'OTHER', line 2: defmodule is not allowed" in message
    assert "pack 'res' v1, global '?*sg-x*', line 3: names starting with sg-" in message


def test_rule_defined_twice_across_packs_is_refused() -> None:
    a = RulePack.from_clp("a", "1", "(defrule r (sg-step) => )")
    b = RulePack.from_clp("b", "1", "(defrule r (sg-step) => )")
    with pytest.raises(RuleCompileError, match=r"rule 'r' is already defined by pack 'a'"):
        RuleEngine([a, b])


def test_unknown_state_fact_slot_is_a_compile_error() -> None:
    pack = RulePack.from_spec(
        {
            "id": "facts",
            "version": "1",
            "rules": [{"name": "r", "when": [{"state.missing": 1}], "then": {"halt": "x"}}],
        }
    )
    message = compile_error(pack, fact_fields={"present": int})
    assert (
        "pack 'facts' v1, rule 'r', line 6: the rule reads state field 'missing', which is not "
        "a rule fact (fields marked fathom.Fact(): done, present)" in message
    )
    assert "mark it in the state model, e.g. missing: Annotated[str, fathom.Fact()]" in message
    assert "CLIPS" not in message
    validate_pack(pack, fact_fields={"missing": int})


def test_unsupported_fact_type_is_a_compile_error() -> None:
    with pytest.raises(RuleCompileError, match=r"fact 'tags': type list\[str\] cannot be"):
        validate_pack(RulePack.from_clp("p", "1", ""), fact_fields={"tags": list[str]})
    with pytest.raises(RuleCompileError, match=r"the fact 'done' .* must be a bool"):
        RuleEngine([], fact_fields={"done": int})


def test_default_termination_pack_rejects_bad_limits() -> None:
    with pytest.raises(RuleCompileError, match="max_steps: must be an int >= 1, got 0"):
        fathom.default_termination_pack(max_steps=0, error_budget=1)
