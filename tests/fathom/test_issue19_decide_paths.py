"""Values the engine decodes and encodes on every decision take their exact-type paths
first: each gives what the general path gives."""

from __future__ import annotations

import clips

from stargraph.fathom import RuleEngine, default_termination_pack
from stargraph.fathom._clipsval import decode_value
from stargraph.fathom._values import decode_string, encode_string


def test_issue19_decode_value_of_each_type() -> None:
    assert decode_value(3) == 3
    assert decode_value(2.5) == 2.5
    assert decode_value(True) is True
    assert decode_value("text") == "text"
    assert decode_value(clips.Symbol("nil")) == {"symbol": "nil"}
    assert decode_value((1, "a", clips.Symbol("TRUE"))) == [1, "a", {"symbol": "TRUE"}]


def test_issue19_encode_string_kept_and_reversible() -> None:
    for text in ["plain", "nul\x00inside", "\uf8ffescape", "lone \ud800 surrogate"]:
        first = encode_string(text)
        assert encode_string(text) == first  # served from the kept texts
        assert "\x00" not in first
        assert decode_string(first) == text


def test_issue19_no_fire_snapshot_matches_the_facts_read_back() -> None:
    args = {"node": "observe", "last_event": "tool_success", "tool_result": "success"}
    with RuleEngine(
        [default_termination_pack(max_steps=100, error_budget=3)], fact_fields={"llm_steps": int}
    ) as engine:
        engine.decide(step=1, state_facts={"done": False, "llm_steps": 1}, error_count=0, **args)
        engine.snapshot()
        engine.decide(step=2, state_facts={"done": False, "llm_steps": 2}, error_count=1, **args)
        worked_out = engine.snapshot()
        assert worked_out["facts"][0][1]["step"] == 2
        # Restored, the engine has no worked-out snapshot: it reads the facts back from CLIPS.
        engine.restore(worked_out)
        assert engine.snapshot() == worked_out


def test_issue19_kept_texts_keep_symbols_apart() -> None:
    assert type(encode_string("kept-symbol")) is str
    symbol = encode_string(clips.Symbol("kept-symbol"))
    assert type(symbol) is clips.Symbol
