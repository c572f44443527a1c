"""A request compacted twice (its journal row, its step's record) has its delta worked out
once; another base request gets its own."""

from __future__ import annotations

from stargraph.checkpoint._compact import _delta, delta_request


def test_issue19_delta_reused_for_the_same_two_requests() -> None:
    first = {"messages": [{"role": "user", "content": "hi"}], "model": "m"}
    second = {"messages": [*first["messages"], {"role": "assistant", "content": "yo"}]}
    delta = _delta(first, second)
    assert delta == delta_request(first, second)
    assert _delta(first, second) is delta
    other = {"messages": [{"role": "user", "content": "hi"}], "model": "n"}
    assert _delta(other, second) == delta_request(other, second)
    assert _delta(other, second) is not delta
