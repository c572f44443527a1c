"""The run page's timeline and step inspector: what happened in each step, at a glance.

The timeline is one line per step with a chip per event: the nodes that ran, the model and
tool calls they made, the rule that routed or stopped the run, an interrupt asked or answered,
and the child (skill) runs the step started, which open into their own timeline, nested.
Choosing a step shows it in the inspector beside the graph (as LangGraph Studio does): the
state after the step and what the step changed in it, field by field.

A step's state change is worked out from the states after the step and after the one before
(the executor's fold, through :func:`stargraph.viz.state_at`), not from its writes: a reducer
turns a write of ``["x"]`` into one more item of a list, and the inspector says just that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any, Final
from urllib.parse import quote

from stargraph.checkpoint import RunRecord, StepRecord
from stargraph.ui._mask import Masker
from stargraph.viz import format_ms
from stargraph.viz._runs import rule_decision

__all__ = ["Change", "inspector", "nested_timeline", "state_changes", "timeline_items"]

_MISSING: Final = object()
_SHOWN_CHARS: Final = 160
"""A value longer than this is cut in the diff table (the whole state is below it)."""


@dataclass(frozen=True, slots=True)
class Change:
    """One changed field of a state: ``kind`` is ``added``, ``removed``, ``changed`` or
    ``appended`` (a list that kept its items and gained ``after``, the new ones)."""

    path: str
    kind: str
    before: Any = None
    after: Any = None


def state_changes(before: Any, after: Any, path: str = "") -> list[Change]:
    """What changed from ``before`` to ``after`` (JSON data), one :class:`Change` per path:
    mappings are compared key by key (dotted paths), a list that only grew is ``appended``
    with its new items, anything else is compared whole."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[Change] = []
        for key in sorted(set(before) | set(after), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in before:
                out.append(Change(sub, "added", after=after[key]))
            elif key not in after:
                out.append(Change(sub, "removed", before=before[key]))
            else:
                out += state_changes(before[key], after[key], sub)
        return out
    if before == after:
        return []
    if (
        isinstance(before, list)
        and isinstance(after, list)
        and len(after) > len(before)
        and after[: len(before)] == before
    ):
        return [Change(path or "<state>", "appended", before, after[len(before) :])]
    return [Change(path or "<state>", "changed", before, after)]


def _short(masker: Masker, value: Any) -> str:
    text = json.dumps(masker.data(value), ensure_ascii=False, sort_keys=True, default=str)
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 1] + "\u2026"
    return escape(text)


def _label(node: str, index: int) -> str:
    return node if index == 0 else f"{node}[{index}]"


def _chip(kind: str, text: str, title: str = "") -> str:
    tip = f' title="{escape(title)}"' if title else ""
    return f'<span class="ev ev-{kind}"{tip}>{text}</span>'


def _events(masker: Masker, record: StepRecord) -> list[str]:
    """The chips of one step, in the order things happened in it."""
    chips = []
    if record.step == 0:
        chips.append(_chip("input", "input"))
    for w in record.writes:
        fields = ", ".join(sorted(str(k) for k in w.writes))
        chips.append(
            _chip("node", escape(_label(w.node, w.index)), f"wrote {fields}" if fields else "")
        )
    for call in record.calls:
        where = _label(call.node, call.index)
        if call.kind == "llm":
            model = ""
            if isinstance(call.value, dict):
                model = str(call.value.get("model") or "")
            chips.append(_chip("llm", "model call", f"from {where} {model}".strip()))
        elif call.kind == "tool":
            chips.append(_chip("tool", f"tool <code>{escape(call.key)}</code>", f"from {where}"))
        elif call.kind == "interrupt":
            chips.append(_chip("interrupt", "interrupt answered", f"in {where}"))
    decision = rule_decision(record)
    if decision is not None:
        targets = ", ".join(decision.targets)
        text = f"rule <code>{escape(decision.rule)}</code>: {escape(decision.kind)}"
        if targets:
            text += f" \u2192 {escape(targets)}"
        chips.append(_chip("rule", text, masker.text(decision.reason or "")))
    return chips


def _child_line(child_id: str, site: str) -> str:
    """A child (skill) run, labelled with the node that ran it; its timeline opens nested."""
    cid = quote(child_id, safe="")
    return (
        f'<details class="tl-child" data-url="/runs/{cid}/timeline?nested=1">'
        f'<summary><span class="ev ev-skill">skill run</span> of <code>{escape(site)}</code> '
        f'<span class="muted">{escape(child_id)}</span></summary>'
        '<div class="tl-nested">loading...</div></details>'
    )


def timeline_items(
    masker: Masker,
    run: RunRecord,
    records: Sequence[StepRecord],
    children: Mapping[tuple[Any, ...], str] | None = None,
    *,
    selectable: bool = True,
) -> str:
    """The ``<li>`` lines of the timeline for ``records`` (in order). ``children`` are the
    child runs of the steps' tasks, keyed as :func:`stargraph.ui._app.child_runs` makes
    them; a run waiting on an interrupt says so on its last step."""
    children = children or {}
    out = []
    for r in records:
        chips = _events(masker, r)
        nested = [
            _child_line(children[(r.step, w.node, w.index)], _label(w.node, w.index))
            for w in r.writes
            if (r.step, w.node, w.index) in children
        ]
        if r.step == run.last_step:
            nested += [
                _child_line(children[("next", r.step, t.node, t.index)], _label(t.node, t.index))
                for t in r.next
                if ("next", r.step, t.node, t.index) in children
            ]
            if run.status == "interrupted":
                raw = run.interrupt
                node = raw.get("node") if isinstance(raw, dict) else None
                where = f" in <code>{escape(str(node))}</code>" if node else ""
                chips.append(_chip("interrupt", f"waiting on an interrupt{where}"))
        nodes = ",".join(dict.fromkeys(w.node for w in r.writes))
        when = format_ms(r.created_ms)  # ISO; the line shows the time of day
        step = (
            f'<button type="button" class="tl-select" data-step="{r.step}">step {r.step}</button>'
            if selectable
            else f'<span class="tl-num">step {r.step}</span>'
        )
        out.append(
            f'<li class="tl-step" data-step="{r.step}" data-nodes="{escape(nodes)}">'
            f'{step} <span class="muted tl-time" title="{escape(when)}">{escape(when[11:23])}'
            "</span> "
            f'<span class="tl-events">{"".join(chips)}</span>{"".join(nested)}</li>'
        )
    return "".join(out)


def nested_timeline(run: RunRecord, items: str, shown: int) -> str:
    """A child run's timeline inside its parent's: status, its steps, a link to its page."""
    cid = quote(run.run_id, safe="")
    total = run.last_step + 1
    more = f" (the first {shown} of {total} steps)" if shown < total else ""
    return (
        f'<p class="tl-child-head"><span class="status status-{escape(run.status)}">'
        f"{escape(run.status)}</span> graph <code>{escape(run.graph_name)}</code>, {total} "
        f'steps{more} - <a href="/runs/{cid}">open this run</a></p>'
        f'<ol class="tl nested">{items}</ol>'
    )


def inspector(
    masker: Masker,
    run: RunRecord,
    record: StepRecord,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    *,
    unavailable: str = "",
) -> str:
    """The inspector's content for step ``record`` of ``run``: what it changed in the state
    (from ``before``, the state after the step before it, to ``after``) and the whole state
    after it. ``unavailable`` says why the states could not be worked out."""
    nodes = ", ".join(_label(w.node, w.index) for w in record.writes) or "input"
    head = (
        f'<h2 id="inspect-title">Step {record.step} <span class="muted">{escape(nodes)}, '
        f"{escape(format_ms(record.created_ms))}</span></h2>"
    )
    if after is None:
        return f'<div class="inspect" data-step="{record.step}">{head}<p class="muted">' + (
            f"{escape(masker.text(unavailable))}</p></div>"
        )
    changes = state_changes(before or {}, after)
    rows = []
    for c in changes:
        if c.kind == "appended":
            had = len(c.before)
            was, now = f"{had} item{'' if had == 1 else 's'}", "+ " + _short(masker, c.after)
        else:
            was = "-" if c.kind == "added" else _short(masker, c.before)
            now = "-" if c.kind == "removed" else _short(masker, c.after)
        rows.append(
            f'<tr class="{c.kind}" data-path="{escape(c.path)}"><td><code>{escape(c.path)}'
            f'</code></td><td class="k">{c.kind}</td><td>{was}</td><td>{now}</td></tr>'
        )
    since = "the input" if record.step == 0 else f"after step {record.step - 1}"
    table = (
        '<table class="state-diff" id="state-diff"><thead><tr><th>field</th><th></th>'
        f"<th>{escape(since)}</th><th>after step {record.step}</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        if rows
        else '<p class="muted" id="state-diff">The state did not change in this step.</p>'
    )
    state = json.dumps(masker.data(after), indent=2, sort_keys=True, ensure_ascii=False)
    return (
        f'<div class="inspect" data-step="{record.step}">{head}<h3>What this step changed</h3>'
        f'{table}<h3>State after step {record.step}</h3><pre id="inspect-state">'
        f"{escape(state)}</pre></div>"
    )
