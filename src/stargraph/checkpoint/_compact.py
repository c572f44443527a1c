"""Recorded model requests stored as deltas, so a long conversation is stored once.

A chat model is asked the whole conversation every time, so storing each request whole makes
a run's record grow with the square of its length. Instead, a recorded request whose
``messages`` extend those of the previous request of the same conversation (same call kind,
key, node and task index, in the same run) is stored as what is new: the messages appended
and the other fields that changed, with ``JournalEntry.base`` naming the previous request by
its fingerprint (the content hash of the whole request, which the entry keeps as before).

Whoever reads the record back in order rebuilds every request from the one before it, kept
by fingerprint (:func:`expand_steps`), so loading a run costs one pass over what is stored;
no step walks back through earlier ones. A request that does not extend the previous one (a
conversation that was cut or edited, a resumed run's first call) is stored whole.

    >>> first = {"messages": [{"role": "user", "content": "hi"}], "model": "m"}
    >>> second = {"messages": [*first["messages"], {"role": "assistant", "content": "yo"}],
    ...           "model": "m", "temperature": 0.5}
    >>> delta = delta_request(first, second)
    >>> delta
    {'append': [{'role': 'assistant', 'content': 'yo'}], 'set': {'temperature': 0.5}}
    >>> expand_request(first, delta) == second
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from stargraph.checkpoint._records import JournalEntry, StepRecord

if TYPE_CHECKING:
    from stargraph.checkpoint._protocol import CheckpointStore

__all__ = [
    "Conversations",
    "compact_calls",
    "compact_steps",
    "delta_request",
    "expand_request",
    "expand_steps",
    "expand_stored",
]

Conversations = MutableMapping[tuple[str, str, str, int], tuple[str, dict[str, Any]]]
"""The last request of each conversation (kind, key, node, index): its fingerprint and body."""


def _messages(request: object) -> Sequence[Any] | None:
    if isinstance(request, dict):
        messages = request.get("messages")
        if isinstance(messages, list | tuple):
            return messages
    return None


def delta_request(previous: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``current`` adds to ``previous`` (``append``: new messages, ``set``: changed
    fields, ``unset``: dropped fields), or ``None`` when ``current``'s messages do not start
    with all of ``previous``'s."""
    old, new = _messages(previous), _messages(current)
    if old is None or new is None or len(new) < len(old):
        return None
    # One pass over the conversation: cheaper than the request's fingerprint, which every
    # recorded call computes anyway.
    if list(new[: len(old)]) != list(old):
        return None
    delta: dict[str, Any] = {}
    if len(new) > len(old):
        delta["append"] = list(new[len(old) :])
    changed = {
        k: v
        for k, v in current.items()
        if k != "messages" and (k not in previous or previous[k] != v)
    }
    if changed:
        delta["set"] = changed
    dropped = sorted(k for k in previous if k not in current)
    if dropped:
        delta["unset"] = dropped
    return delta


def expand_request(base: Mapping[str, Any], delta: Mapping[str, Any]) -> dict[str, Any]:
    """The whole request: ``base`` with ``delta`` (from :func:`delta_request`) applied."""
    unset = set(delta.get("unset", ()))
    whole = {k: v for k, v in base.items() if k not in unset}
    whole.update(delta.get("set", {}))
    appended = delta.get("append")
    if appended:
        whole["messages"] = [*base["messages"], *appended]
    return whole


def compact_calls(
    calls: Iterable[JournalEntry], conversations: Conversations
) -> tuple[JournalEntry, ...]:
    """``calls`` (in stored order) with each model request that extends the previous request
    of its conversation replaced by the delta; ``conversations`` is updated as it goes."""
    out = []
    for entry in calls:
        request = entry.request
        if entry.base or not entry.fingerprint or _messages(request) is None:
            out.append(entry)
            continue
        conversation = (entry.kind, entry.key, entry.node, entry.index)
        previous = conversations.get(conversation)
        conversations[conversation] = (entry.fingerprint, request)
        delta = None if previous is None else delta_request(previous[1], request)
        if previous is None or delta is None:
            out.append(entry)
        else:
            out.append(entry.model_copy(update={"request": delta, "base": previous[0]}))
    return tuple(out)


def compact_steps(steps: Iterable[StepRecord]) -> list[StepRecord]:
    """Steps of one run (in order, from step 0) with their model requests as deltas."""
    conversations: Conversations = {}
    out = []
    for step in steps:
        calls = compact_calls(step.calls, conversations)
        changed = any(a is not b for a, b in zip(calls, step.calls, strict=True))
        out.append(step.model_copy(update={"calls": calls}) if changed else step)
    return out


def expand_steps(steps: Iterable[StepRecord], known: dict[str, Any]) -> list[StepRecord]:
    """Steps (in order) with every delta request rebuilt whole. ``known`` maps fingerprints
    to whole requests seen so far (updated); a delta whose base is unknown stays a delta."""
    out = []
    for step in steps:
        calls = []
        changed = False
        for stored in step.calls:
            entry = stored
            if entry.base:
                base = known.get(entry.base)
                if base is not None and isinstance(entry.request, dict):
                    whole = expand_request(base, entry.request)
                    entry = entry.model_copy(update={"request": whole, "base": ""})
                    changed = True
            if not entry.base and entry.fingerprint and _messages(entry.request) is not None:
                known[entry.fingerprint] = entry.request
            calls.append(entry)
        out.append(step.model_copy(update={"calls": tuple(calls)}) if changed else step)
    return out


def expand_stored(
    store: CheckpointStore, run_id: str, steps: Sequence[StepRecord]
) -> list[StepRecord]:
    """``steps`` read from ``store`` (a contiguous range of ``run_id``) with whole requests;
    the steps before the range are read once when a request there is needed."""
    if not any(call.base for step in steps for call in step.calls):
        return list(steps)
    known: dict[str, Any] = {}
    if steps and steps[0].step > 0:
        expand_steps(store.get_steps(run_id, start=0, end=steps[0].step - 1), known)
    return expand_steps(steps, known)
