"""``validate_pack(..., open_state=True)``: a pack checked without the state model it will
run with, its state slots left untyped and named (what ``stargraph rules check`` without
``--graph`` uses)."""

from __future__ import annotations

import pytest

from stargraph import fathom
from stargraph.errors import RuleCompileError
from stargraph.fathom import RulePack


def test_issue44_validate_pack_with_open_state_checks_a_pack_without_its_state_model() -> None:
    pack = RulePack(
        id="open",
        version="1",
        source=(
            '(defrule big (sg-step (node "a")) (sg-state (count ?c&:(> ?c 3)))\n'
            '  => (assert (sg-decision (kind halt) (reason "big") (rule big))))'
        ),
    )
    with pytest.raises(RuleCompileError):
        fathom.validate_pack(pack)  # a state slot no model declares
    assert fathom.validate_pack(pack, open_state=True) == {"count"}
    assert fathom.validate_pack(pack, fact_fields={"count": int}, open_state=True) == set()
