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

A tool's result is stored once too, with the recorded tool call. An appended ``tool``
message that answers a call recorded in an *earlier* step, with exactly the content the
ReAct loop makes of that call's result (:func:`~stargraph.tools._recorded.tool_message_content`),
is stored as ``{"role": "tool", "tool_call_id": ..., "content_of": <the call's
fingerprint>}``; reading rebuilds the content from that call. Any other message (a content
worded otherwise, a call not recorded in an earlier step of this process) stays as it was.

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

import functools
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from stargraph.checkpoint._records import JournalEntry, StepRecord

if TYPE_CHECKING:
    from stargraph.checkpoint._protocol import CheckpointStore

__all__ = [
    "Conversations",
    "Deltas",
    "ToolResults",
    "compact_call",
    "compact_calls",
    "compact_steps",
    "delta_request",
    "expand_request",
    "expand_steps",
    "expand_stored",
]

Conversations = MutableMapping[tuple[str, str, str, int], tuple[str, dict[str, Any]]]
"""The last request of each conversation (kind, key, node, index): its fingerprint and body."""

Deltas = dict[tuple[str, str], dict[str, Any] | None]
"""A run's deltas by the fingerprints of the request they are from and the request they
are of: a request is compacted twice, for its journal row and for its step's record."""
_KEPT_DELTAS: Final = 64

ToolResults = MutableMapping[str, JournalEntry]
"""Recorded tool calls of earlier steps by the call id the model gave (the latest of each)."""

_TOOL: Final = "tool"
"""Journal kind of tool calls (``stargraph.tools._recorded.KIND``)."""
_KEPT_RESULTS: Final = 256
"""Tool calls a writer keeps to refer to: the messages a request appends answer recent ones."""
_RESULT_OF: Final = "tool:"
# A tuple, not ``list | tuple``: Python 3.11 builds that union anew at every call.
_SEQUENCE: Final = (list, tuple)
"""Prefix of the keys under which :func:`expand_steps` keeps tool calls by fingerprint."""


@functools.cache
def _wording() -> Callable[[Any, Any], str | None]:
    """``stargraph.tools._recorded.tool_message_content``, imported once: it sits above this
    module, so it is imported at first use, and an import statement run at every call costs
    more than the lookup it saves."""
    from stargraph.tools._recorded import tool_message_content

    return tool_message_content


def _content_of(entry: JournalEntry) -> str | None:
    return _wording()(entry.request, entry.value)


def _call_id(entry: JournalEntry) -> str | None:
    """The model's id of a recorded tool call (``None`` for any other record)."""
    if entry.kind != _TOOL or not entry.fingerprint or not isinstance(entry.request, dict):
        return None
    call_id = entry.request.get("call_id")
    return call_id if isinstance(call_id, str) and call_id else None


def _refer(delta: dict[str, Any], results: ToolResults) -> dict[str, Any]:
    """``delta`` with each appended tool message whose content is that of a kept tool call
    replaced by a reference to the call."""
    appended = delta.get("append")
    if not appended:
        return delta
    out = []
    changed = False
    for message in appended:
        entry = None
        if isinstance(message, dict) and message.get("role") == "tool":
            entry = results.get(message.get("tool_call_id"))  # type: ignore[arg-type]
        content = message.get("content") if entry is not None else None
        if entry is not None and isinstance(content, str) and _content_of(entry) == content:
            referring = {k: v for k, v in message.items() if k != "content"}
            referring["content_of"] = entry.fingerprint
            out.append(referring)
            changed = True
        else:
            out.append(message)
    return {**delta, "append": out} if changed else delta


def _resolve(delta: Mapping[str, Any], known: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``delta`` with every ``content_of`` reference replaced by the content it refers to,
    or ``None`` when a referred call is not known."""
    appended = delta.get("append")
    if not appended or not any(isinstance(m, dict) and "content_of" in m for m in appended):
        return delta
    out = []
    for message in appended:
        if isinstance(message, dict) and "content_of" in message:
            entry = known.get(_RESULT_OF + str(message["content_of"]))
            content = None if entry is None else _content_of(entry)
            if content is None:
                return None
            whole = {k: v for k, v in message.items() if k != "content_of"}
            whole["content"] = content
            out.append(whole)
        else:
            out.append(message)
    return {**delta, "append": out}


def _messages(request: object) -> Sequence[Any] | None:
    if isinstance(request, dict):
        messages = request.get("messages")
        if isinstance(messages, _SEQUENCE):
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
    prefix = new[: len(old)]
    if type(prefix) is not type(old):  # a list and a tuple: compared as lists
        prefix, old = list(prefix), list(old)
    if prefix != old:
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


def _delta(
    previous: tuple[str, Mapping[str, Any]], entry: JournalEntry, deltas: Deltas | None
) -> dict[str, Any] | None:
    """:func:`delta_request` from the ``previous`` request (fingerprint, body) to
    ``entry``'s, worked out once per run for the same two (treat the delta as read-only,
    like the records that hold it)."""
    key = (previous[0], entry.fingerprint)
    if deltas is not None and key in deltas:
        return deltas[key]
    delta = delta_request(previous[1], entry.request)
    if deltas is not None:
        if len(deltas) >= _KEPT_DELTAS:
            deltas.clear()
        deltas[key] = delta
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
    calls: Iterable[JournalEntry],
    conversations: Conversations,
    results: ToolResults | None = None,
    deltas: Deltas | None = None,
) -> tuple[JournalEntry, ...]:
    """``calls`` (in stored order) with each model request that extends the previous request
    of its conversation replaced by the delta; ``conversations`` is updated as it goes.

    ``calls`` are one step's, and ``results`` the tool calls of earlier steps: a delta's tool
    messages refer to them (see the module docstring), and the step's own tool calls are
    added to ``results`` at the end. Without ``results`` (the journal of a step in flight,
    whose rows are read back in another order) no message refers to a tool call. ``deltas``:
    the run's deltas worked out so far (see :data:`Deltas`).
    """
    calls = tuple(calls)
    out = [compact_call(entry, conversations, results, deltas) for entry in calls]
    if results is not None:
        for entry in calls:
            call_id = _call_id(entry)
            if call_id is not None:
                results.pop(call_id, None)  # re-inserted last: the oldest go first
                results[call_id] = entry
                if len(results) > _KEPT_RESULTS:
                    del results[next(iter(results))]
    return tuple(out)


def compact_call(
    entry: JournalEntry,
    conversations: Conversations,
    results: ToolResults | None = None,
    deltas: Deltas | None = None,
) -> JournalEntry:
    """One call of :func:`compact_calls` (which see): ``entry``, or its request as the delta
    from the previous request of its conversation (``conversations`` is updated). It does
    not add a tool call to ``results``: the journal row of a call in flight, which refers to
    no tool call, is compacted by itself."""
    request = entry.request
    if entry.base or not entry.fingerprint or _messages(request) is None:
        return entry
    conversation = (entry.kind, entry.key, entry.node, entry.index)
    previous = conversations.get(conversation)
    conversations[conversation] = (entry.fingerprint, request)
    if previous is None:
        return entry
    delta = _delta(previous, entry, deltas)
    if delta is None:
        return entry
    if results:
        delta = _refer(delta, results)
    return entry.model_copy(update={"request": delta, "base": previous[0]})


def compact_steps(steps: Iterable[StepRecord]) -> list[StepRecord]:
    """Steps of one run (in order, from step 0) with their model requests as deltas."""
    conversations: Conversations = {}
    results: ToolResults = {}
    out = []
    for step in steps:
        calls = compact_calls(step.calls, conversations, results)
        changed = any(a is not b for a, b in zip(calls, step.calls, strict=True))
        out.append(step.model_copy(update={"calls": calls}) if changed else step)
    return out


def expand_steps(steps: Iterable[StepRecord], known: dict[str, Any]) -> list[StepRecord]:
    """Steps (in order) with every delta request rebuilt whole. ``known`` maps fingerprints
    to whole requests seen so far, and (prefixed) to the tool calls of the steps seen so
    far (updated); a delta whose base or referred tool call is unknown stays a delta."""
    out = []
    for step in steps:
        calls = []
        changed = False
        for stored in step.calls:
            entry = stored
            if entry.base:
                base = known.get(entry.base)
                delta = _resolve(entry.request, known) if isinstance(entry.request, dict) else None
                if base is not None and delta is not None:
                    whole = expand_request(base, delta)
                    entry = entry.model_copy(update={"request": whole, "base": ""})
                    changed = True
            if not entry.base and entry.fingerprint and _messages(entry.request) is not None:
                known[entry.fingerprint] = entry.request
            calls.append(entry)
        # After the step, as compact_calls adds them: a request refers to earlier steps' calls.
        for entry in step.calls:
            if _call_id(entry) is not None:
                known[_RESULT_OF + entry.fingerprint] = entry
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
