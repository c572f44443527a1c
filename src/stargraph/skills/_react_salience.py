"""Salience of a ReAct loop's tool observations, and the context budget that uses it.

The scores are a pure function of the state (the tool call records and the LLM step count),
so the state after every ``observe`` carries them implicitly: nothing new is stored, old
checkpoints load as they are, and a replay reproduces every score and every shortened
request exactly. ``think`` reads them only when the graph has a ``context_budget``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Final, Protocol

from stargraph.llm import ChatMessage

__all__ = ["salience", "within_budget"]


# What this module reads of the ReAct loop's records, as protocols: the loop's module imports
# this one, so naming its classes here would make the two import each other.
class _Call(Protocol):
    @property
    def llm_step(self) -> int: ...
    @property
    def call_id(self) -> str: ...
    @property
    def tool(self) -> str: ...
    @property
    def arguments(self) -> str: ...
    @property
    def status(self) -> str: ...


class _Step(Protocol):
    @property
    def llm_step(self) -> int: ...
    @property
    def kind(self) -> str: ...


class _State(Protocol):
    @property
    def tool_calls(self) -> Sequence[_Call]: ...
    @property
    def salience(self) -> tuple[float, ...]: ...


# A failure is what the model most needs to see again (it must not repeat the mistake); a
# success is worth half as much, and less once a later step did the same thing again.
_FAILED: Final = 1.0
_SUCCEEDED: Final = 0.5
_OUTDONE: Final = 0.25
_DECAY: Final = 0.8


def salience(records: Sequence[_Call], now: int) -> tuple[float, ...]:
    """One score per record, in order, as of LLM step ``now`` (see
    :attr:`stargraph.skills.react.ReactState.salience` for the rule)."""
    scores: list[float] = []
    # Walked from the newest step back, so "a later step did it" is a set lookup; calls of
    # the same step do not outdo each other (the model made them side by side).
    repeated: set[tuple[str, str]] = set()
    succeeded: set[str] = set()
    for step, group in itertools.groupby(reversed(records), key=lambda r: r.llm_step):
        calls = list(group)
        for record in calls:
            failed = record.status != "success"
            score = _FAILED if failed else _SUCCEEDED
            if (record.tool, record.arguments) in repeated or (failed and record.tool in succeeded):
                score *= _OUTDONE
            scores.append(round(score * _DECAY ** max(now - step, 0), 6))
        repeated.update((r.tool, r.arguments) for r in calls)
        succeeded.update(r.tool for r in calls if r.status == "success")
    return tuple(reversed(scores))


def _marker(message: ChatMessage) -> ChatMessage:
    """The stand-in for an elided tool result: still the answer to its ``tool_call_id`` (the
    chat API rejects a tool call left unanswered), saying what was left out."""
    call_id = message.tool_call_id or ""
    text = f"[elided to fit the context budget: result of {message.name} call {call_id}]"
    return ChatMessage.tool(call_id, text, name=message.name)


def within_budget(
    transcript: tuple[ChatMessage, ...],
    trajectory: Sequence[_Step],
    state: _State,
    budget: int,
) -> tuple[ChatMessage, ...]:
    """``transcript`` (the messages of ``trajectory``) with the least salient tool results
    of earlier steps replaced by markers until its text fits ``budget`` characters; the last
    step's observations always go whole. Unchanged when it fits."""
    total = sum(len(m.content or "") for m in transcript)
    if total <= budget or not trajectory:
        return transcript
    scores = {
        (r.llm_step, r.call_id): score
        for r, score in zip(state.tool_calls, state.salience, strict=True)
    }
    last = trajectory[-1].llm_step
    candidates = sorted(
        (scores.get((step.llm_step, message.tool_call_id or ""), 0.0), index)
        for index, (step, message) in enumerate(zip(trajectory, transcript, strict=True))
        if step.kind == "observation"
        and message.role == "tool"
        and message.tool_call_id
        and step.llm_step < last
    )
    messages = list(transcript)
    for _, index in candidates:
        if total <= budget:
            break
        marker = _marker(messages[index])
        saved = len(messages[index].content or "") - len(marker.content or "")
        if saved > 0:
            messages[index] = marker
            total -= saved
    return tuple(messages)
