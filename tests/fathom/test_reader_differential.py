"""Our reader against CLIPS's own: the same generated pack text, full of carriage returns,
form feeds, odd Unicode, comments holding quotes and strings holding semicolons, is read by
``fathom._sexpr`` and loaded by CLIPS, and wherever ours accepts the text the two must agree
on every construct and on every token of every rule's actions (issue 43).

The packs hold only rules whose patterns no fact matches and nothing that CLIPS evaluates
while loading (no globals, facts, template defaults or salience), so CLIPS cannot run the
commands in them; a marker file those commands would create must never appear. The same
packs then go through the public loader, which must refuse every one with a typed error
(they all call ``system`` somewhere, in a comment or not) and run nothing.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import clips
from clips._clips import ffi, lib

from stargraph.errors import CompileError, RuleRuntimeError
from stargraph.examples.basics import chain_graph
from stargraph.fathom import RuleEngine, RulePack, _load, validate_pack
from stargraph.fathom import _sexpr as sx
from stargraph.graph import Graph
from stargraph.ir import GraphIR
from stargraph.refs import trusted_modules

PACKS: Final = 2000
SEED: Final = 43

# Each list is (common, rare): rare pieces mostly make CLIPS refuse the pack, so they come
# seldom enough that many packs load cleanly and can be compared.
# Between tokens: CLIPS's five spaces, and characters a reader might take for one.
SPACES: Final = ([" ", " ", "\t", "\n", "\r", "\r\n", "\f"], ["\xa0", "\u2028", "\x85"])
# Inside comments: whatever could open or hide code, and what ends a comment.
COMMENT: Final = (
    ["a", "b c", '"', "\\", '\\"', ";", "(", ")", "\f", "\t", "é", "\u2028", "\xa0", "\x85",
     "\U0001f600", "=>", "(system \"touch MARKER\")", "?x", "<", "&|~"],
    ["\r", "\n", "\r\n"],
)  # fmt: skip
# Inside strings: all of the above, and line breaks.
STRING: Final = (COMMENT[0] + COMMENT[1], COMMENT[1])
# Characters CLIPS reads differently from any reader we could write: put one in some packs.
REFUSED: Final = ["\x00", "\x03", "\x08", "\x0b", "\x1c", "\x7f", "\ud800", "\udfff"]
# Arguments: symbols that end or start at CLIPS's delimiters, variables, numbers.
ATOMS: Final = (
    ["a", "foo-bar", "a<b", "<x", "<-", "1", "42", "-7", "-", "+", "?x", "$?y", "é", "naïve",
     "[inst]", "*", ">=", "1é", "?x<y"],
    ["?1", "$?", "?", "x;y", "?*nope*", "$?-", "x&y", "p|q", "~c"],
)  # fmt: skip
FUNCTIONS: Final = ["create$"]  # takes any number of values of any type


class Packs:
    """Generates pack text from a seed: rules with noise wherever CLIPS allows space."""

    def __init__(self, seed: int, marker: Path, *, lhs: str = "(t ?x $?y)", visible: bool = True):
        self.rng = random.Random(seed)
        self.marker = str(marker)
        self.lhs = lhs
        self.visible = visible  # every pack ends its first rule with a command

    def pick(self, pieces: tuple[list[str], list[str]]) -> str:
        return self.rng.choice(pieces[1] if self.rng.random() < 0.04 else pieces[0])

    def text(self, pieces: tuple[list[str], list[str]], size: int) -> str:
        return "".join(self.pick(pieces) for _ in range(self.rng.randint(0, size)))

    def space(self) -> str:
        roll = self.rng.random()
        if roll < 0.25:
            end = self.rng.choice(["\n", "\r", "\r\n", "\n"])
            return self.pick(SPACES) + ";" + self.text(COMMENT, 6) + end
        return self.text(SPACES, 1) or " "

    def string(self) -> str:
        body = self.text(STRING, 5).replace("\\", "\\\\").replace('"', '\\"')
        if self.rng.random() < 0.2:  # an escape CLIPS drops: \n is n, \q is q
            body += "\\" + self.rng.choice("nq;(")
        return f'"{body}"'

    def call(self, depth: int) -> str:
        head = self.rng.choice(FUNCTIONS)
        args = []
        for _ in range(self.rng.randint(0, 4)):
            roll = self.rng.random()
            if roll < 0.35:
                args.append(self.string())
            elif roll < 0.5 and depth < 3:
                args.append(self.call(depth + 1))
            else:
                args.append(self.pick(ATOMS))
        return "(" + head + "".join(self.space() + a for a in args) + ")"

    def rule(self, name: str) -> str:
        actions = [self.call(0) for _ in range(self.rng.randint(1, 3))]
        if self.rng.random() < 0.5:
            actions.insert(0, f'(system "touch {self.marker}")')
        s = self.space
        body = "".join(s() + a for a in actions)
        lhs = self.lhs.replace(" ", "\0").replace("\0", s(), 1).replace("\0", " ")
        return f"(defrule{s()}{name}{s()}{lhs}{s()}=>{body}{s()})"

    def __iter__(self) -> Iterator[str]:
        for _ in range(PACKS):
            rules = [self.rule(f"r{k}") for k in range(self.rng.randint(1, 3))]
            if self.visible:  # a command in every pack, even where the rest is noise
                rules[0] = rules[0][:-1] + f' (system "touch {self.marker}"))'
            text = self.space().join(rules).replace("MARKER", self.marker)
            if self.rng.random() < 0.1:
                at = self.rng.randrange(len(text))
                text = text[:at] + self.rng.choice(REFUSED) + text[at:]
            yield text


def _normal(nodes: list[sx.Node]) -> list[object]:
    """Actions as nested lists; CLIPS prints integers in its own form (``+5`` as ``5``)."""
    out: list[object] = []
    for node in nodes:
        if isinstance(node, sx.SExpr):
            out.append(_normal(list(node.items)))
        elif not node.string and node.text.lstrip("+-").isdigit() and node.text.isascii():
            out.append(int(node.text))
        else:
            out.append((node.text, node.string))
    return out


def _clips_rules(env: clips.Environment, path: Path, text: str) -> dict[str, list[object]]:
    """The rules CLIPS itself builds from ``text``, with their actions as CLIPS prints them."""
    env.clear()
    path.write_bytes(text.encode())
    lib.Load(env._env, str(path).encode())
    other = [
        *(t.name for t in env.templates() if not t.implied),
        *(g.name for g in env.globals()),
        *(f.name for f in env.defined_facts()),
        *(f.name for f in env.functions()),
    ]
    assert other == [], f"CLIPS built constructs the packs do not hold: {other} from {text!r}"
    rules = {}
    for rule in env.rules():
        # Rule.__str__ joins Python's str.split(), which takes \xa0 and \u2028 for spaces.
        (printed,) = sx.read_constructs(ffi.string(lib.DefrulePPForm(rule._ptr())).decode())
        rules[rule.name] = _normal(sx.split_rule(printed.tree)[1])
    return rules


def test_our_reader_and_clips_agree_on_every_generated_pack(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    env, capture = _load.new_environment()
    capture.activate()  # CLIPS's error messages for the packs it refuses stay out of the log
    read = agreed = refused = 0
    for text in Packs(SEED, marker):
        try:
            ours = {c.name: c for c in sx.read_constructs(text)}
        except sx.SourceError:
            refused += 1  # nothing of it would reach CLIPS
            continue
        read += 1
        theirs = _clips_rules(env, tmp_path / "pack.clp", text)
        if capture.take_errors():
            # CLIPS refused part of it and resumed at the next "(defrule" it saw, even one
            # nested in the list it gave up on; our loader builds each construct alone, so
            # CLIPS never resumes anywhere. Only a clean load says how CLIPS read the text.
            continue
        agreed += 1
        assert set(theirs) == set(ours), f"CLIPS read other rules: {text!r}"
        for name, actions in theirs.items():
            assert ours[name].kind == "defrule", text
            assert _normal(sx.split_rule(ours[name].tree)[1]) == actions, repr(text)
        assert not marker.exists()
    # The generator must exercise both sides: many packs read, many of them loaded cleanly.
    assert read >= PACKS // 3, read
    assert agreed >= read // 3, (agreed, read)
    assert refused >= PACKS // 20, refused


def test_the_public_loader_runs_no_generated_pack_and_refuses_with_typed_errors(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "pwned"
    packs = Packs(SEED, marker, lhs="(sg-step (node ?x))", visible=False)
    refused = 0
    for i, text in enumerate(packs):
        pack = RulePack.from_clp("p", "1", text)
        try:
            if i % 2 == 0:
                validate_pack(pack)
            elif i % 20 != 1:
                with RuleEngine([pack]) as engine:
                    engine.decide(step=1, node="n", state_facts={})
            else:  # compiling and running a graph costs more: a sample
                doc = json.loads(chain_graph(2).to_ir().to_json())
                doc["rule_packs"] = [{"id": "p", "version": "1", "source": text}]
                with trusted_modules("stargraph"):
                    Graph(GraphIR.from_json(json.dumps(doc))).compile().invoke({})
        except (CompileError, RuleRuntimeError):
            refused += 1
        assert not marker.exists(), repr(text)
    assert PACKS // 4 <= refused < PACKS, refused  # both paths are exercised
