"""Server-rendered HTML of the console: the runs list, a run, its steps, a diff.

Every value that came from a run (ids, node names, state, model messages, errors) is masked
(:mod:`stargraph.ui._mask`) and HTML-escaped. Pages load one script and one style sheet from
the console itself (no CDN, no inline script: the Content-Security-Policy forbids both).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any, Final, get_args
from urllib.parse import quote, urlencode

from stargraph.checkpoint import JournalEntry, RunRecord, StepRecord
from stargraph.checkpoint._records import RunStatus
from stargraph.ir import GraphIR
from stargraph.tools._names import short_names
from stargraph.tools._spec import tool_id_from_llm_name
from stargraph.ui._diff import AlignedStep, RunPairDiff
from stargraph.ui._digest import RunDigest, Totals, usage_of
from stargraph.ui._mask import Masker
from stargraph.viz import format_ms
from stargraph.viz._runs import rule_decision

__all__ = [
    "DIFF_PAGE_SIZE",
    "LIVE_OUTPUT",
    "PAGE_SIZE",
    "STATUSES",
    "by_thread",
    "continue_form",
    "diff_lines",
    "diff_page",
    "escape",
    "fork_page",
    "layout",
    "nested_run",
    "nested_runs",
    "run_rows",
    "step_rows",
]

PAGE_SIZE: Final = 50
"""Steps per page of a run: a 1,000-step run renders 50 rows, not 1,000."""

DIFF_PAGE_SIZE: Final = 50
"""Lines per page of a diff (a fold of identical steps is one line)."""

STATUSES: Final = get_args(RunStatus)

LIVE_OUTPUT: Final = (
    '<section id="live-output" class="live-output" hidden><h2>Model output, streaming</h2>'
    '<div id="live-calls" class="chat"></div><p class="muted">The reply of each model call '
    "in flight, as its tokens arrive (runs this console continues, and runs that "
    "<code>stargraph serve</code> runs on this database). It moves into the step "
    "timeline when its step commits.</p></section>"
)
"""The run page's box for the model output in flight, filled by the ``tokens`` events."""


def layout(title: str, body: str, *, live: str = "") -> str:
    """A whole page around ``body``; ``live`` is the SSE URL the script follows, if any."""
    data_live = f' data-live="{escape(live)}"' if live else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<link rel="stylesheet" href="/static/ui.css">
<script src="/static/ui.js" defer></script>
</head>
<body{data_live}>
<header><a class="brand" href="/">stargraph</a> <span class="muted">run console</span></header>
<main>
{body}
</main>
</body>
</html>
"""


def _json(masker: Masker, value: Any) -> str:
    text = json.dumps(masker.data(value), indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return escape(text)


def _status(status: str) -> str:
    return f'<span class="status status-{escape(status)}">{escape(status)}</span>'


def _label(node: str, index: int) -> str:
    return node if index == 0 else f"{node}[{index}]"


# --------------------------------------------------------------------------- runs list


def _when(iso: str) -> str:
    """``2026-01-02 03:04:05`` (UTC) for a stored ISO time, the full value in a tooltip."""
    if not iso:
        return "-"
    short = escape(iso[:19].replace("T", " "))
    return f'<time datetime="{escape(iso)}" title="{escape(iso)}">{short}</time>'


def nested_runs(
    runs: Sequence[tuple[RunRecord, RunDigest]],
) -> list[tuple[RunRecord, RunDigest, int]]:
    """``runs`` with each child (skill) run right after its parent, and its depth: the
    number of its ancestors in ``runs`` (a child run's id is its parent's, ``::``, the
    node's site). A child whose parent is not listed (filtered out) stands on its own."""
    ids = {run.run_id for run, _ in runs}

    def parent(run_id: str) -> str:
        up = run_id.rpartition("::")[0]
        while up and up not in ids:
            up = up.rpartition("::")[0]
        return up

    children: dict[str, list[tuple[RunRecord, RunDigest]]] = {}
    roots = []
    for item in runs:
        up = parent(item[0].run_id)
        if up:
            children.setdefault(up, []).append(item)
        else:
            roots.append(item)
    out: list[tuple[RunRecord, RunDigest, int]] = []
    stack = [(item, 0) for item in reversed(roots)]
    while stack:
        (run, digest), depth = stack.pop()
        out.append((run, digest, depth))
        stack.extend((kid, depth + 1) for kid in reversed(children.get(run.run_id, [])))
    return out


def by_thread(
    runs: Sequence[tuple[RunRecord, RunDigest]],
) -> list[tuple[str | None, list[tuple[RunRecord, RunDigest]]]]:
    """``runs`` (newest first) grouped by thread: each thread's runs together where its
    newest run stands, a run of no thread on its own (``None``). A child (skill) run goes
    with its top-level run."""
    by_id = {run.run_id: run for run, _ in runs}
    groups: dict[Any, tuple[str | None, list[tuple[RunRecord, RunDigest]]]] = {}
    for item in runs:
        run = item[0]
        top = by_id.get(run.run_id.partition("::")[0], run)
        thread = top.thread_id or run.thread_id
        key: Any = ("thread", thread) if thread else ("run", top.run_id)
        groups.setdefault(key, (thread, []))[1].append(item)
    return list(groups.values())


def run_rows(runs: list[tuple[RunRecord, RunDigest]]) -> str:
    """The ``<tr>`` rows of the runs list: grouped by thread (a heading row names each),
    child skill runs nested under their parent."""
    rows = []
    for thread, members in by_thread(runs):
        if thread is not None:
            turns = len({r.run_id.partition("::")[0] for r, _ in members})
            rows.append(
                f'<tr class="thread" data-thread="{escape(thread)}"><th colspan="8">thread '
                f"<code>{escape(thread)}</code> "
                f'<span class="muted">{turns} run{"s" if turns != 1 else ""}</span></th></tr>'
            )
        rows.append(_run_rows(members, thread))
    return "".join(rows)


def _run_rows(runs: list[tuple[RunRecord, RunDigest]], thread: str | None) -> str:
    rows = []
    in_thread = f' data-thread="{escape(thread)}"' if thread is not None else ""
    for run, digest, depth in nested_runs(runs):
        tokens = f"{digest.total_tokens:,}" if digest.model_calls else "-"
        cost = f"${digest.cost:.4f}" if digest.cost is not None else "-"
        nest = (
            f' class="child depth-{min(depth, 3)}" data-parent="'
            f'{escape(run.run_id.rpartition("::")[0])}"'
            if depth
            else ""
        )
        mark = '<span class="nest" aria-hidden="true">&#8627; </span>' if depth else ""
        rows.append(
            f'<tr data-run="{escape(run.run_id)}"{in_thread}{nest}>'
            f'<td>{mark}<a href="/runs/{quote(run.run_id, safe="")}">{escape(run.run_id)}</a></td>'
            f"<td>{escape(run.graph_name)}</td><td>{_status(run.status)}</td>"
            f'<td class="num">{run.last_step}</td><td class="num">{tokens}</td>'
            f'<td class="num">{cost}</td>'
            f"<td>{_when(run.created_at)}</td><td>{_when(run.updated_at)}</td>"
            "</tr>"
        )
    return "".join(rows)


def runs_page(
    runs: list[tuple[RunRecord, RunDigest]],
    graphs: list[str],
    *,
    status: str,
    graph: str,
    since: str,
    q: str = "",
) -> str:
    """The runs list with its filter form (``q``: part of a run's or thread's id)."""
    status_options = "".join(
        f'<option value="{s}"{" selected" if s == status else ""}>{s or "any"}</option>'
        for s in ("", *STATUSES)
    )
    graph_options = "".join(
        f'<option value="{escape(g)}"{" selected" if g == graph else ""}>{escape(g) or "any"}'
        "</option>"
        for g in ("", *graphs)
    )
    query = urlencode({"q": q, "status": status, "graph": graph, "since": since})
    body = f"""
<h1>Runs</h1>
<form class="filters" method="get" action="/">
<label>id <input name="q" id="run-search" type="search" value="{escape(q)}"
placeholder="part of a run or thread id"></label>
<label>status <select name="status">{status_options}</select></label>
<label>graph <select name="graph">{graph_options}</select></label>
<label>since <input name="since" type="datetime-local" value="{escape(since)}"></label>
<button type="submit">filter</button>
</form>
<table class="runs" data-rows="/fragments/runs?{escape(query)}">
<thead><tr><th class="c-run">run</th><th>graph</th><th>status</th><th>steps</th>
<th>tokens</th><th>cost</th><th class="c-time">created (UTC)</th>
<th class="c-time">updated (UTC)</th></tr></thead>
<tbody id="run-rows">{run_rows(runs)}</tbody>
</table>
<p class="muted">{len(runs)} runs. Tokens are summed over the recorded model calls; cost is
shown when the endpoint reported one. <a href="/diff">Diff two runs</a>.</p>
"""
    return layout("stargraph runs", body, live=f"/events/runs?{query}")


# --------------------------------------------------------------------------- a run


def _chat_message(masker: Masker, message: Any) -> str:
    if not isinstance(message, dict):
        return f'<div class="msg"><pre>{_json(masker, message)}</pre></div>'
    role = str(message.get("role") or "?")
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        content = "\n".join(
            str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content
        )
    body = escape(masker.text(str(content))) if content not in (None, "") else ""
    calls = "".join(
        f'<div class="tool-call"><code>{escape(str(c.get("name") or ""))}</code>'
        f"<pre>{escape(masker.text(str(c.get('arguments') or '')))}</pre></div>"
        for c in message.get("tool_calls") or ()
        if isinstance(c, dict)
    )
    name = message.get("name") or message.get("tool_call_id")
    who = escape(role) + (f" <code>{escape(str(name))}</code>" if name else "")
    return (
        f'<div class="msg role-{escape(role)}"><div class="who">{who}</div>'
        f'<div class="text">{body}</div>{calls}</div>'
    )


ToolSources = Mapping[str, Mapping[str, str]]
"""Per node: the name a model is offered a tool under -> the tool's allowlist entry."""


def tool_sources(ir: GraphIR) -> dict[str, dict[str, str]]:
    """Which tool each offered name stands for, per model-calling node of ``ir``.

    Worked out from the node's allowlist (``config["tools"]``, part of the graph hash), as the
    node itself names them: never from what the model was shown.
    """
    sources: dict[str, dict[str, str]] = {}
    for node in ir.nodes:
        allowed = getattr(node, "config", {}).get("tools")
        if isinstance(allowed, list) and all(isinstance(t, str) for t in allowed):
            sources[str(node.id)] = short_names(allowed)
    return sources


def _offered(masker: Masker, tools: Any, names: Mapping[str, str]) -> str:
    """The tools a model call offered, each with its description; a description an MCP
    server wrote is marked untrusted: the model reads it as instructions."""
    if not isinstance(tools, list) or not tools:
        return ""
    items, untrusted = [], 0
    for entry in tools:
        function = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(function, dict):
            continue
        name = str(function.get("name") or "")
        source = names.get(name) or tool_id_from_llm_name(name) or ""
        mark = ""
        if source.startswith("mcp."):
            untrusted += 1
            server = source.split(".")[1] if source.count(".") >= 2 else "?"
            mark = (
                f' <span class="untrusted">untrusted: written by MCP server '
                f"<code>{escape(server)}</code></span>"
            )
        shown = f" <code>{escape(source)}</code>" if source and source != name else ""
        description = escape(masker.text(str(function.get("description") or "")))
        items.append(
            f'<div class="offered-tool{" mcp" if mark else ""}"><code>{escape(name)}</code>'
            f"{shown}{mark}<pre>{description}</pre></div>"
        )
    from_mcp = f", {untrusted} described by MCP servers (untrusted text)" if untrusted else ""
    return (
        f'<details class="offered"><summary>{len(items)} tools offered{from_mcp}</summary>'
        f"{''.join(items)}</details>"
    )


def _call(masker: Masker, call: JournalEntry, sources: ToolSources) -> str:
    where = escape(_label(call.node, call.index))
    if call.kind == "llm":
        request = call.request if isinstance(call.request, dict) else {}
        messages = request.get("messages") or []
        reply = call.value.get("message") if isinstance(call.value, dict) else call.value
        prompt, completion = usage_of(call.value)
        model = ""
        if isinstance(call.value, dict):
            model = str(call.value.get("model") or request.get("model") or "")
        chat = "".join(_chat_message(masker, m) for m in messages)
        offered = _offered(masker, request.get("tools"), sources.get(call.node, {}))
        return (
            f'<details class="call llm"><summary>model call from {where}'
            f"{f' <code>{escape(model)}</code>' if model else ''}: {len(messages)} messages,"
            f" {prompt:,} + {completion:,} tokens</summary>{offered}"
            f'<div class="chat">{chat}</div><div class="chat reply">'
            f"{_chat_message(masker, reply)}</div></details>"
        )
    if call.kind == "tool":
        args = call.request.get("args", call.request) if isinstance(call.request, dict) else None
        return (
            f'<details class="call tool"><summary>tool <code>{escape(call.key)}</code> from '
            f'{where}</summary><div class="kv"><b>arguments</b><pre>{_json(masker, args)}</pre>'
            f"<b>result</b><pre>{_json(masker, call.value)}</pre></div></details>"
        )
    if call.kind == "interrupt":
        return (
            f'<div class="call interrupt">interrupt answered in {where}: '
            f"<code>{_json(masker, call.value)}</code></div>"
        )
    key = f" {escape(call.key)}" if call.key else ""
    return (
        f'<div class="call other">{escape(call.kind)}{key} in {where}: '
        f"<code>{_json(masker, call.value)}</code></div>"
    )


def _child(child_id: str | None) -> str:
    """An expandable child (skill) run: its steps load when opened."""
    if child_id is None:
        return ""
    cid = quote(child_id, safe="")
    return (
        f'<details class="child" data-url="/runs/{cid}/nested"><summary>skill run '
        f'<code>{escape(child_id)}</code></summary><div class="nested">loading...</div>'
        "</details>"
    )


def nested_run(run: RunRecord, rows: str, shown: int) -> str:
    """A child run inside its parent's page: status, its steps, a link to its own page."""
    cid = quote(run.run_id, safe="")
    total = run.last_step + 1
    more = f" (the first {shown} of {total} steps: the rest on its page)" if shown < total else ""
    return (
        f'<div class="nested-run"><p>{_status(run.status)} {total} steps{more} - '
        f'<a href="/runs/{cid}">open this run</a></p>'
        '<table class="timeline nested"><thead><tr><th>step</th><th>committed (UTC)</th>'
        "<th>nodes</th><th>writes, rule decisions, calls, state</th><th>next tasks</th></tr>"
        f"</thead><tbody>{rows}</tbody></table></div>"
    )


def step_rows(
    masker: Masker,
    run_id: str,
    records: list[StepRecord],
    previous_ms: int | None,
    *,
    can_fork: bool = False,
    children: Mapping[tuple[Any, ...], str] | None = None,
    sources: ToolSources | None = None,
) -> str:
    """The ``<tr>`` rows of the step timeline for ``records`` (in order); ``can_fork`` adds
    each step's link to fork or replay the run from there. ``children`` maps
    ``(step, node, index)`` (a task that ran) and ``("next", step, node, index)`` (a task
    a step scheduled) to the id of its child (skill) run, shown as an expandable nested run.
    ``sources`` (:func:`tool_sources` of the run's graph) names the tool behind each offered
    name, so descriptions MCP servers wrote are marked.
    """
    rows = []
    rid = quote(run_id, safe="")
    children = children or {}
    last = previous_ms
    for r in records:
        took = f"{r.created_ms - last:,} ms" if last and r.created_ms and r.step else "-"
        last = r.created_ms or last
        nodes = ", ".join(_label(w.node, w.index) for w in r.writes)
        writes = "".join(
            f'<div class="write"><code>{escape(_label(w.node, w.index))}</code>'
            f"<pre>{_json(masker, w.writes)}</pre>"
            f"{_child(children.get((r.step, w.node, w.index)))}</div>"
            for w in r.writes
        )
        tasks = "".join(
            f'<div class="task"><code>{escape(_label(t.node, t.index))}</code>'
            + (
                f'<details class="payload"><summary>Send payload</summary>'
                f"<pre>{_json(masker, t.payload)}</pre></details>"
                if t.payload is not None
                else ""
            )
            + _child(children.get(("next", r.step, t.node, t.index)))
            + "</div>"
            for t in r.next
        )
        if r.step == 0 and r.snapshot is not None:
            writes = (
                f'<div class="write"><code>input</code><pre>{_json(masker, r.snapshot)}</pre></div>'
            )
        decision = rule_decision(r)
        decision_html = ""
        if decision is not None:
            targets = ", ".join(decision.targets)
            decision_html = (
                f'<div class="decision"><b>{escape(decision.kind)}</b> by rule '
                f"<code>{escape(decision.rule)}</code>"
                + (f" to {escape(targets)}" if targets else "")
                + (f": {escape(masker.text(decision.reason))}" if decision.reason else "")
                + "</div>"
            )
        calls = "".join(_call(masker, c, sources or {}) for c in r.calls)
        state_url = f"/runs/{rid}/state?step={r.step}"
        fork = (
            f'<a class="fork" href="/runs/{rid}/fork?step={r.step}">fork / replay from here</a>'
            if can_fork
            else ""
        )
        rows.append(
            f'<tr class="step" id="step-{r.step}" data-step="{r.step}">'
            f'<td class="num">{r.step}</td>'
            f'<td class="time">{escape(format_ms(r.created_ms))}<br>'
            f'<span class="muted">{took}</span></td>'
            f"<td>{escape(nodes) or '<span class=muted>input</span>'}"
            f"{fork and '<br>' + fork}</td>"
            f'<td class="wide">{writes or "-"}{decision_html}{calls}'
            f'<details class="state" data-url="{escape(state_url)}"><summary>state after step '
            f"{r.step}</summary><pre>loading...</pre></details></td>"
            f"<td>{tasks or '-'}</td></tr>"
        )
    return "".join(rows)


def pager(run_id: str, page: int, pages: int) -> str:
    """Links to the other pages of a run's steps."""
    if pages <= 1:
        return ""
    base = f"/runs/{quote(run_id, safe='')}?page="
    links = []
    for n in sorted({0, max(page - 1, 0), page, min(page + 1, pages - 1), pages - 1}):
        label = f"{n * PAGE_SIZE}-{min((n + 1) * PAGE_SIZE, 10**9) - 1}"
        links.append(f"<b>{label}</b>" if n == page else f'<a href="{base}{n}">{label}</a>')
    return f'<nav class="pager">steps: {" | ".join(links)} ({pages} pages)</nav>'


def interrupt_form(masker: Masker, run: RunRecord, csrf: str, can_resume: bool) -> str:
    """The waiting payload and, unless read-only, the approve / reject / edit form."""
    raw = run.interrupt
    # A node's interrupt is stored as {kind, node, step, payload, ...}: show what it asked.
    payload = (
        raw.get("payload", raw) if isinstance(raw, dict) and raw.get("kind") == "node" else raw
    )
    where = ""
    if isinstance(raw, dict) and raw.get("node"):
        where = (
            f"<p>node <code>{escape(str(raw['node']))}</code> at step {raw.get('step')} asks:</p>"
        )
    shown = f"{where}<pre>{_json(masker, payload)}</pre>"
    if not can_resume:
        return (
            f'<section class="interrupt"><h2>Waiting on</h2>{shown}<p class="muted">Answering '
            "needs the graph that made the run and a console started without --read-only.</p>"
            "</section>"
        )
    proposed = payload.get("value", payload) if isinstance(payload, dict) else payload
    action = f"/runs/{quote(run.run_id, safe='')}/answer"
    return f"""<section class="interrupt"><h2>Waiting on</h2>{shown}
<form method="post" action="{escape(action)}" class="answer">
<input type="hidden" name="csrf" value="{escape(csrf)}">
<label>reason / note <input name="reason" value=""></label>
<label>edited value (JSON) <textarea name="value" rows="4">{_json(masker, proposed)}</textarea>
</label>
<div class="buttons">
<button type="submit" name="action" value="approve" id="approve">approve</button>
<button type="submit" name="action" value="reject" id="reject">reject</button>
<button type="submit" name="action" value="edit" id="edit">approve edited value</button>
</div>
<p class="muted">The run resumes with <code>{{"approved": true}}</code>,
<code>{{"approved": false, "reason": ...}}</code> or
<code>{{"approved": true, "value": ...}}</code> as the answer of <code>ctx.interrupt()</code>.</p>
</form></section>"""


def fork_page(
    run: RunRecord,
    step: int,
    state_json: str,
    reducers: dict[str, str],
    csrf: str,
    *,
    nodes: Sequence[str] = (),
    as_node: str = "",
    writes: str = "",
    nxt: Sequence[str] = (),
) -> str:
    """The form that forks ``run`` after ``step`` with an edited state, or replays it live
    from there as a counterfactual (``state_json`` is the masked state after ``step``).

    ``nodes``: the graph's nodes, offered to route the update as one of them wrote it
    (``as_node``, the one chosen); ``nxt``: the tasks the fork would run next as the form
    stands; ``writes``: the writes box as last submitted."""
    rid = quote(run.run_id, safe="")
    options = "".join(
        f'<option value="{escape(n)}"{" selected" if n == as_node else ""}>{escape(n)}</option>'
        for n in nodes
    )
    routed = (
        f"as if <code>{escape(as_node)}</code> wrote your changes"
        if as_node
        else "routing kept: the tasks this run scheduled after the step, whatever you change"
    )
    nxt_text = ", ".join(f"<code>{escape(n)}</code>" for n in nxt) or "nothing (the run ends)"
    merged = ", ".join(
        f"<code>{escape(name)}</code> ({escape(reducer)})" for name, reducer in reducers.items()
    )
    merged_note = (
        f"<p>These fields merge writes through a reducer: {merged}. Their whole value cannot "
        "be set from the state box; put what to add in the writes box instead.</p>"
        if reducers
        else ""
    )
    body = f"""
<h1>Fork run {escape(run.run_id)} after step {step}</h1>
<p><a href="/runs/{rid}#step-{step}">back to the run</a></p>
<form method="post" action="/runs/{rid}/fork" class="answer fork-form">
<input type="hidden" name="csrf" value="{escape(csrf)}">
<input type="hidden" name="step" value="{step}">
<label>state after step {step} (JSON; fields you change are written)
<textarea name="state" id="fork-state" rows="16">{escape(state_json)}</textarea></label>
{merged_note}
<label>writes through the reducers (JSON object, optional, as <code>stargraph fork
--update</code>) <textarea name="writes" id="fork-writes" rows="3">{escape(writes)}</textarea>
</label>
<label>route as node (as <code>stargraph fork --as-node</code>): the node's edges, routers
and rules choose the next tasks from the edited state
<select name="as_node" id="fork-as-node"><option value="">(keep the scheduled tasks)</option>
{options}</select></label>
<p id="fork-next">Next tasks ({routed}): {nxt_text}.</p>
<div class="buttons">
<button type="submit" name="action" value="preview" id="fork-preview">show the next
tasks</button>
<button type="submit" name="action" value="fork" id="fork">fork (run it later)</button>
<button type="submit" name="action" value="counterfactual" id="counterfactual">replay
live from step {step + 1} (counterfactual)</button>
</div>
<p class="muted">Both make a new run holding steps 0..{step} of this one and your changes as
step {step + 1} (<code>CompiledGraph.fork</code>). <b>fork</b> stops there: continue it from
its page. <b>replay live</b> continues it at once, as
<code>CompiledGraph.replay(run_id, from_step={step + 1}, mutate=...)</code> and
<code>stargraph replay RUN --from-step {step + 1} --set ...</code> do, and the new run links to
its diff with this one. Masked values (<code>[redacted:...]</code>) left as they are are not
written.</p>
</form>
"""
    return layout(f"fork {run.run_id}", body)


def continue_form(run: RunRecord, csrf: str) -> str:
    """The button that continues a fork nobody runs yet."""
    action = f"/runs/{quote(run.run_id, safe='')}/continue"
    return f"""<section class="interrupt"><h2>Not started</h2>
<p>This fork holds its parent's steps and your changes; nothing runs it yet.</p>
<form method="post" action="{escape(action)}" class="answer">
<input type="hidden" name="csrf" value="{escape(csrf)}">
<div class="buttons"><button type="submit" id="continue">continue this run</button></div>
</form></section>"""


def summary_table(
    masker: Masker, run: RunRecord, digest: RunDigest, family: Totals | None = None
) -> str:
    """The run's status, hashes, totals and error; ``family``: the totals of the run with
    its child skill runs, shown when it has any."""
    items = [
        ("status", f'<span id="run-status">{_status(run.status)}</span>'),
        ("graph", f"{escape(run.graph_name)} <code>{escape(run.graph_hash[:19])}</code>"),
        ("last step", f'<span id="last-step">{run.last_step}</span>'),
        ("created", escape(run.created_at or "-")),
        ("updated", escape(run.updated_at or "-")),
        (
            "model calls",
            f"{digest.model_calls} ({digest.prompt_tokens:,} prompt + "
            f"{digest.completion_tokens:,} completion tokens)",
        ),
        ("tool calls", str(digest.tool_calls)),
    ]
    if family is not None and family.runs > 1:
        kids = family.runs - 1
        items.append(
            (
                "with skill runs",
                f'<span id="family-totals">{family.model_calls} model calls '
                f"({family.prompt_tokens:,} prompt + {family.completion_tokens:,} completion "
                f"tokens), {family.tool_calls} tool calls, over this run and its {kids} child "
                f"run{'s' if kids > 1 else ''}</span>"
                + (f", ${family.cost:.4f}" if family.cost is not None else ""),
            )
        )
    if digest.cost is not None:
        items.append(("cost", f"${digest.cost:.4f}"))
    if run.stopped_by:
        items.append(("stopped by", f"<code>{escape(run.stopped_by)}</code>"))
    if run.stop_reason:
        items.append(("reason", f'<span id="stop-reason">{escape(run.stop_reason)}</span>'))
    if run.parent_run_id:
        parent = quote(run.parent_run_id, safe="")
        items.append(
            (
                "forked from",
                f'<a href="/runs/{parent}">{escape(run.parent_run_id)}</a> after step '
                f'{run.parent_step} (<a id="diff-parent" '
                f'href="/diff?{escape(urlencode({"a": run.parent_run_id, "b": run.run_id}))}">'
                "diff with it</a>)",
            )
        )
    if "::" in run.run_id:
        parent, _, site = run.run_id.rpartition("::")
        items.append(
            (
                "skill run of",
                f'<a href="/runs/{quote(parent, safe="")}">{escape(parent)}</a> '
                f"(<code>{escape(site)}</code>: site@step.task)",
            )
        )
    if run.owner is not None:
        items.append(("owner", escape(run.owner.describe())))
    if run.error:
        items.append(("error", f"<pre>{escape(masker.text(run.error))}</pre>"))
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in items)
    return f'<table class="summary">{rows}</table>'


# --------------------------------------------------------------------------- two runs


def _diff_side(masker: Masker, record: StepRecord | None) -> str:
    if record is None:
        return '<span class="muted">-</span>'
    if record.step == 0 and record.snapshot is not None:
        shown = _json(masker, record.snapshot)
        return f'<div class="write"><code>input</code><pre>{shown}</pre></div>'
    writes = "".join(
        f'<div class="write"><code>{escape(_label(w.node, w.index))}</code>'
        f"<pre>{_json(masker, w.writes)}</pre></div>"
        for w in record.writes
    )
    nxt = ", ".join(_label(t.node, t.index) for t in record.next) or "nothing"
    return (writes or '<span class="muted">no writes</span>') + (
        f'<div class="muted">next: {escape(nxt)}</div>'
    )


def _diff_row(masker: Masker, row: AlignedStep) -> str:
    if row.inserted:
        kind, note = "inserted", "the fork's update: no counterpart"
    elif row.a is None:
        kind, note = "only-b", "only in B"
    elif row.b is None:
        kind, note = "only-a", "only in A"
    elif row.changes:
        kind, note = "differs", ""
    else:
        kind, note = "same", ""
    step_a = "" if row.a is None else str(row.a.step)
    step_b = "" if row.b is None else str(row.b.step)
    out = (
        f'<tr class="pair {kind}" data-a="{step_a}" data-b="{step_b}">'
        f'<td class="num">{step_a}</td><td>{_diff_side(masker, row.a)}</td>'
        f'<td class="num">{step_b}</td><td>{_diff_side(masker, row.b)}</td></tr>'
    )
    if row.changes or note:
        items = "".join(f"<li>{escape(c)}</li>" for c in row.changes) or f"<li>{note}</li>"
        out += f'<tr class="changes {kind}"><td colspan="4"><ul>{items}</ul></td></tr>'
    return out


def _same_run(rows: list[AlignedStep]) -> str:
    # Rows that are the same have both sides.
    steps_a = [r.a.step for r in rows if r.a is not None]
    steps_b = [r.b.step for r in rows if r.b is not None]
    span_a = f"{steps_a[0]}-{steps_a[-1]}"
    span_b = f"{steps_b[0]}-{steps_b[-1]}"
    return (
        f'<tr class="pair same-run"><td class="num">{span_a}</td>'
        f'<td colspan="2" class="muted">{len(rows)} steps the same</td>'
        f'<td class="num">{span_b}</td></tr>'
    )


def diff_lines(rows: tuple[AlignedStep, ...]) -> list[tuple[AlignedStep, ...]]:
    """The lines of the side-by-side view: three or more identical steps in a row fold into
    one line; every other aligned step is a line of its own."""
    out: list[tuple[AlignedStep, ...]] = []
    same: list[AlignedStep] = []

    def flush() -> None:
        if len(same) >= 3:
            out.append(tuple(same))
        else:
            out.extend((r,) for r in same)
        same.clear()

    for row in rows:
        if row.same:
            same.append(row)
            continue
        flush()
        out.append((row,))
    flush()
    return out


def _diff_line(masker: Masker, line: tuple[AlignedStep, ...]) -> str:
    return _same_run(list(line)) if len(line) > 1 else _diff_row(masker, line[0])


def _diff_pager(a: str, b: str, page: int, lines: int, first_change: int | None) -> str:
    """Links to the other pages of a diff of ``lines`` lines, and to the page of its first
    difference."""
    pages = -(-lines // DIFF_PAGE_SIZE)
    if pages <= 1:
        return ""

    def href(n: int) -> str:
        return escape("/diff?" + urlencode({"a": a, "b": b, "page": n}))

    links = []
    for n in sorted({0, max(page - 1, 0), page, min(page + 1, pages - 1), pages - 1}):
        label = f"{n * DIFF_PAGE_SIZE + 1}-{min((n + 1) * DIFF_PAGE_SIZE, lines)}"
        links.append(f"<b>{label}</b>" if n == page else f'<a href="{href(n)}">{label}</a>')
    first = ""
    if first_change is not None and first_change // DIFF_PAGE_SIZE != page:
        n = first_change // DIFF_PAGE_SIZE
        first = f' - <a class="first-change" href="{href(n)}">first difference</a>'
    return (
        f'<nav class="pager">lines: {" | ".join(links)} ({lines} lines, {pages} pages){first}</nav>'
    )


def _run_head(side: str, run: RunRecord) -> str:
    rid = quote(run.run_id, safe="")
    return (
        f'<th class="c-run">{side}: <a href="/runs/{rid}">{escape(run.run_id)}</a> '
        f"{_status(run.status)}</th>"
    )


def diff_form(a: str, b: str) -> str:
    """The two run ids to compare."""
    return f"""<form class="filters" method="get" action="/diff">
<label>run A <input name="a" value="{escape(a)}"></label>
<label>run B <input name="b" value="{escape(b)}"></label>
<button type="submit">diff</button>
</form>"""


def diff_page(
    masker: Masker, diff: RunPairDiff | None, a: str, b: str, page: int | None = None
) -> str:
    """Two runs side by side (or just the form when no pair is chosen): one page of
    :data:`DIFF_PAGE_SIZE` lines, the page of the first difference unless ``page`` says."""
    if diff is None:
        body = f"<h1>Diff two runs</h1>{diff_form(a, b)}"
        return layout("stargraph diff", body)
    lines = diff_lines(diff.rows)
    pages = max(1, -(-len(lines) // DIFF_PAGE_SIZE))
    first_change = next(
        (i for i, line in enumerate(lines) if len(line) == 1 and not line[0].same), None
    )
    if page is None:
        page = 0 if first_change is None else first_change // DIFF_PAGE_SIZE
    page = min(max(page, 0), pages - 1)
    shown = lines[page * DIFF_PAGE_SIZE : (page + 1) * DIFF_PAGE_SIZE]
    pager = _diff_pager(a, b, page, len(lines), first_change)
    rows = "".join(_diff_line(masker, line) for line in shown)
    differing = sum(1 for r in diff.rows if not r.same)
    verdict = (
        "The runs are the same."
        if diff.identical
        else f"{differing} of {len(diff.rows)} aligned steps differ."
    )
    shift = f'<p class="shift">{escape(diff.shift)}.</p>' if diff.shift else ""
    outcome = "".join(f"<li>{escape(line)}</li>" for line in diff.outcome)
    outcome_html = f'<h2>Outcome</h2><ul class="outcome">{outcome}</ul>' if outcome else ""
    body = f"""
<h1>Diff of two runs</h1>
{diff_form(a, b)}
<p id="verdict">{escape(verdict)}</p>
{shift}
{outcome_html}
<h2>Steps</h2>
{pager}
<table class="diff">
<thead><tr><th class="c-step">step</th>{_run_head("A", diff.run_a)}
<th class="c-step">step</th>{_run_head("B", diff.run_b)}</tr></thead>
<tbody id="diff-rows" data-page="{page}">{rows}</tbody>
</table>
{pager}
"""
    return layout(f"stargraph diff {diff.run_a.run_id} {diff.run_b.run_id}", body)
