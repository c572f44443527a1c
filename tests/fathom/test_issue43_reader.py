"""What CLIPS builds is what the checker checked: the reader lexes as CLIPS's scanner does,
CLIPS is given only the printed checked tree, and trusted refs cannot walk through objects
that name no module (issue 43)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stargraph.errors import CompileError, RuleCompileError, UntrustedRefError
from stargraph.examples.basics import chain_graph
from stargraph.fathom import RuleEngine, RulePack, validate_pack
from stargraph.fathom import _sexpr as sx
from stargraph.graph import Graph
from stargraph.ir import GraphIR
from stargraph.refs import resolve_ref, trusted_modules


def _hidden_rule(marker: Path) -> str:
    # CLIPS ends a comment at a carriage return too: the command is on the comment's line
    # for a reader that ends comments only at a newline.
    return f'(defrule r (sg-step) => ; note\r (system "touch {marker}")\n)'


def test_issue43_a_carriage_return_in_a_rule_comment_hides_no_command(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    pack = RulePack.from_clp("p", "1", _hidden_rule(marker))
    with pytest.raises(RuleCompileError) as info, RuleEngine([pack]) as engine:
        engine.decide(step=1, node="n", state_facts={})
    assert not marker.exists()
    assert "pack 'p' v1, rule 'r', line 2: calls (system)" in str(info.value)


def test_issue43_a_carriage_return_in_a_defglobal_comment_runs_nothing_in_validation(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "pwned"
    text = f'(defglobal ?*a* = 1 ; note\r ?*b* = (system "touch {marker}")\n)'
    with pytest.raises(RuleCompileError) as info:
        validate_pack(RulePack.from_clp("p", "1", text))
    assert not marker.exists()
    assert "the initialiser of ?*b* is not a literal" in str(info.value)


def test_issue43_a_carriage_return_in_an_ir_rule_pack_source_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    doc = json.loads(chain_graph(2).to_ir().to_json())
    doc["rule_packs"] = [{"id": "p", "version": "1", "source": _hidden_rule(marker)}]
    ir = GraphIR.from_json(json.dumps(doc))  # as if read from a file someone sent you
    with trusted_modules("stargraph"), pytest.raises(CompileError) as info:
        Graph(ir).compile().invoke({})
    assert not marker.exists()
    assert "calls (system)" in str(info.value)


@pytest.mark.parametrize(
    ("text", "line", "code"),
    [
        ('(defrule r (sg-step) => (bind ?x "a\ud800"))', 1, "U+D800"),
        ("(defrule r (sg-step)\n =>\x00 (bind ?x 1))", 2, "U+0000"),
        ("(defrule r (sg-step) => (bind ?x\x0b1))", 1, "U+000B"),
        ('(defrule r (sg-step) =>\r\n (bind ?x "ab\x08"))', 2, "U+0008"),
        ("; \x03\n(defrule r (sg-step) => (bind ?x 1))", 1, "U+0003"),
    ],
    ids=["lone surrogate", "NUL", "vertical tab", "backspace", "ctrl-c in a comment"],
)
def test_issue43_characters_clips_reads_differently_are_refused_by_name(
    text: str, line: int, code: str
) -> None:
    with pytest.raises(RuleCompileError) as info:
        validate_pack(RulePack.from_clp("p", "1", text))
    problem = info.value.problems[0]
    assert problem.pointer == f"pack 'p' v1, text, line {line}"
    assert problem.message.startswith(f"character {code} is not allowed in a rule pack: ")
    assert problem.hint.startswith("remove it")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(f ?1)", ["(", "f", "?", "1", ")"]),  # ? continues into a name only before a letter
        ("(f $?-)", ["(", "f", "$?", "-", ")"]),
        ("(f ?x<-y)", ["(", "f", "?x", "<-y", ")"]),  # < ends a symbol and starts one
        ("(f a<<b)", ["(", "f", "a", "<", "<b", ")"]),
        ("(f ;c\rg)", ["(", "f", "g", ")"]),
        ("(f\xa0g)", ["(", "f\xa0g", ")"]),  # no space to CLIPS, which reads UTF-8 bytes
    ],
)
def test_issue43_tokens_split_where_clips_splits_them(text: str, expected: list[str]) -> None:
    assert [token for token, *_ in sx.tokens(text)] == expected


def test_issue43_clips_is_given_the_printed_tree_and_errors_keep_the_authors_lines() -> None:
    construct = sx.read_constructs('(defrule r ; c\r\n  (sg-step)\r =>\n (bind ?x "a\\\\b\\""))')[0]
    assert construct.text == '(defrule r (sg-step) => (bind ?x "a\\\\b\\""))'
    layout = [(n.text if isinstance(n, sx.Atom) else n.head, n.line) for n in construct.tree.items]
    assert layout == [("defrule", 1), ("r", 1), ("sg-step", 2), ("=>", 3), ("bind", 4)]
    bad = RulePack.from_clp("p", "1", "(defrule r\r (sg-step)\r =>\r (bind ?x (+ 1 (create$))))")
    with pytest.raises(RuleCompileError) as info:
        validate_pack(bad)
    assert info.value.problems[0].pointer == "pack 'p' v1, rule 'r', line 4"


# --------------------------------------------------------------------------- printer

SYMBOLS = st.sampled_from(
    ["a", "foo-bar", "=>", "<-", "<x", "?x", "$?y", "?*g*", "?", "$?", "1", "-2", "3.5", "e5",
     "+", "[inst]", "é", "naïve", "a\xa0b", "&", "|", "~", "$x", "*", ">=", "<="]
)  # fmt: skip
# Strings hold any character the reader accepts: no surrogates, no control characters
# besides CLIPS's spaces.
CONTROLS = "".join(map(chr, [*range(0, 9), 11, *range(14, 32), 127]))
STRINGS = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters=CONTROLS), max_size=12
)
ATOMS = st.one_of(
    SYMBOLS.map(lambda s: sx.Atom(s, 1)),
    STRINGS.map(lambda s: sx.Atom(s, 1, string=True)),
)
TREES = st.recursive(
    st.lists(ATOMS, max_size=4).map(lambda items: sx.SExpr(tuple(items), 1)),
    lambda inner: st.lists(st.one_of(ATOMS, inner), max_size=5).map(
        lambda items: sx.SExpr(tuple(items), 1)
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(TREES)
def test_issue43_reading_the_printed_tree_gives_the_tree_back(tree: sx.SExpr) -> None:
    (construct,) = sx.read_constructs(sx.render(tree))
    assert construct.tree == tree
    assert construct.text == sx.render(tree)


PIECES = st.sampled_from(
    ["(", ")", " ", "\t", "\n", "\r", "\r\n", "\f", ";", '"', "\\", "a", "?", "$", "<", "&",
     "|", "~", "1", "é", "\xa0", "\u2028", "=>", "x y"]
)  # fmt: skip


@settings(max_examples=600, deadline=None, derandomize=True)
@given(st.lists(PIECES, max_size=30).map("".join))
def test_issue43_printing_what_was_read_reads_the_same(text: str) -> None:
    try:
        constructs = sx.read_constructs(text)
    except sx.SourceError:
        return
    for construct in constructs:
        assert construct.text == sx.render(construct.tree)
        assert sx.read_constructs(construct.text)[0].tree == construct.tree


# --------------------------------------------------------------------------- trusted refs


@pytest.mark.parametrize(
    ("ref", "what"),
    [
        ("stargraph.refs:resolve_ref.__builtins__.get", "'__builtins__' is a 'dict' object"),
        ("stargraph.refs:resolve_ref.__code__", "'__code__' is a 'code' object"),
        ("stargraph.refs:_TRUSTED.get", "'_TRUSTED' is a 'ContextVar' object"),
    ],
)
def test_issue43_trusted_refs_do_not_walk_through_objects_naming_no_module(
    ref: str, what: str
) -> None:
    with trusted_modules("stargraph"), pytest.raises(UntrustedRefError) as info:
        resolve_ref(ref)
    assert f"{what} reached through 'stargraph.refs' that names no module" in str(info.value)
    with trusted_modules("stargraph"):  # what such refs walk through stays reachable
        assert resolve_ref("stargraph.refs:resolve_ref") is resolve_ref
