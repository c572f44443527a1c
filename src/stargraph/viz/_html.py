"""A static, self-contained HTML report of one stored run.

No server, no script, no external URL: styles are inline, the graph picture is inline SVG
when Graphviz is installed (else the Mermaid text in a ``<pre>``), and every value that came
from a user - ids, node names, state, errors, interrupt payloads - is HTML-escaped.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any, Final

from stargraph.checkpoint import CheckpointStore
from stargraph.errors import StargraphError
from stargraph.ir import GraphIR
from stargraph.viz._render import graphviz_available, render
from stargraph.viz._runs import state_at, step_views
from stargraph.viz._text import to_mermaid

__all__ = ["html_report"]

_CSS: Final = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2rem;
color:#1d1d1f;background:#fff;max-width:80rem}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ddd;padding:.3rem .5rem;
vertical-align:top;text-align:left}th{background:#f5f5f7}
pre{background:#f5f5f7;padding:.5rem;overflow:auto;margin:0;font-size:.85rem}
code{font-size:.85rem}.status-done{color:#1a7f37}.status-failed{color:#cf222e}
.status-interrupted{color:#9a6700}.status-running{color:#0969da}.muted{color:#6e7781}
.status-halted{color:#bc4c00}
.picture svg{max-width:100%;height:auto}
"""


def _json(value: Any) -> str:
    return escape(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str))


def _picture(ir: GraphIR) -> str:
    if graphviz_available():
        try:
            svg = render(ir, "svg").decode()
        except StargraphError:
            svg = ""
        start = svg.find("<svg")
        if start >= 0:
            # dot escapes every label it writes; the XML prolog and DOCTYPE are dropped so
            # the SVG can sit inline in HTML.
            return f'<div class="picture">{svg[start:]}</div>'
    return (
        '<p class="muted">Graphviz is not installed, so the picture is given as Mermaid text '
        "(paste it into any Mermaid viewer).</p>"
        f'<pre class="mermaid-source">{escape(to_mermaid(ir))}</pre>'
    )


def html_report(ir: GraphIR, store: CheckpointStore, run_id: str) -> str:
    """The HTML text of a report on run ``run_id`` of graph ``ir``, read from ``store``.

    Sections: run summary (status, stopped_by, error, hashes), the graph picture, the step
    timeline (step, time, nodes, writes, next), the state at the last step, the rule
    decisions saved with the steps (step, kind, rule, targets, reason) and the rule facts,
    and the interrupt payload of a waiting run. Raises the store's ``RunNotFoundError`` for
    an unknown run.
    """
    record = store.get_run(run_id)
    steps = step_views(store, run_id)
    try:
        state_html = f"<pre>{_json(state_at(ir, store, run_id))}</pre>"
    except StargraphError as exc:
        state_html = f'<p class="muted">state unavailable: {escape(str(exc))}</p>'
    summary = [
        ("run id", escape(record.run_id)),
        ("graph", f"{escape(record.graph_name)} <code>{escape(record.graph_hash)}</code>"),
        (
            "status",
            f'<span class="status-{escape(record.status)}">{escape(record.status)}</span>',
        ),
        ("last step", str(record.last_step)),
        ("created", escape(record.created_at or "-")),
        ("updated", escape(record.updated_at or "-")),
        ("stopped by", escape(record.stopped_by or "-")),
        ("reason", escape(record.stop_reason or "-")),
        ("error", f"<pre>{escape(record.error)}</pre>" if record.error else "-"),
    ]
    if record.parent_run_id:
        summary.append(
            ("forked from", f"{escape(record.parent_run_id)} at step {record.parent_step}")
        )
    if record.graph_hash != ir.graph_hash:
        summary.append(
            (
                "warning",
                f"the run was recorded by graph <code>{escape(record.graph_hash)}</code>; "
                f"the picture shows <code>{escape(ir.graph_hash)}</code>",
            )
        )
    rows = []
    for view in steps:
        writes = "".join(
            f"<div><code>{escape(node)}</code><pre>{_json(w)}</pre></div>"
            for node, w in view.writes
        )
        rows.append(
            "<tr>"
            f"<td>{view.step}</td><td>{escape(view.time)}</td>"
            f"<td>{escape(', '.join(view.nodes)) or '<span class=muted>input</span>'}</td>"
            f"<td>{writes or '-'}</td><td>{escape(', '.join(view.next)) or '-'}</td>"
            "</tr>"
        )
    notes = []
    if record.stopped_by and record.status in ("done", "halted"):
        # "done by rule" for a success rule, "halted by rule" for a halt.
        verb = "halted" if record.status == "halted" else "finished"
        why = f": {escape(record.stop_reason)}" if record.stop_reason else ""
        notes.append(f"<li>run {verb} by rule <code>{escape(record.stopped_by)}</code>{why}</li>")
    if isinstance(record.interrupt, dict) and record.interrupt.get("kind") == "rule":
        notes.append(
            f"<li>run interrupted by rule <code>{escape(str(record.interrupt.get('rule')))}"
            "</code></li>"
        )
    decision_rows = [
        "<tr>"
        f"<td>{view.step}</td><td>{escape(d.kind)}</td><td><code>{escape(d.rule)}</code></td>"
        f"<td>{escape(', '.join(d.targets)) or '-'}</td>"
        f"<td>{escape(d.reason) if d.reason is not None else '-'}</td>"
        "</tr>"
        for view in steps
        if (d := view.decision) is not None
    ]
    facts = [
        f"<li>step {view.step}, {escape(engine)}: <code>{escape(template)}</code>"
        f"<pre>{_json(slots)}</pre></li>"
        for view in steps
        for engine, template, slots in view.facts
    ]
    decisions_html = f"<ul>{''.join(notes)}</ul>" if notes else ""
    if decision_rows:
        decisions_html += (
            '<table class="decisions">'
            "<tr><th>step</th><th>kind</th><th>rule</th><th>targets</th><th>reason</th></tr>"
            f"{''.join(decision_rows)}</table>"
        )
    elif not notes:
        decisions_html += '<p class="muted">No rule decisions were recorded for this run.</p>'
    if facts:
        decisions_html += f"<h3>Rule facts</h3><ul>{''.join(facts)}</ul>"
    interrupt_html = (
        f"<pre>{_json(record.interrupt)}</pre>"
        if record.interrupt is not None
        else '<p class="muted">The run is not waiting on anything.</p>'
    )
    summary_html = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in summary)
    title = escape(f"stargraph run {record.run_id}")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>{title}</h1>
<h2>Summary</h2>
<table class="summary">{summary_html}</table>
<h2>Graph</h2>
{_picture(ir)}
<h2>Steps</h2>
<table class="timeline">
<tr><th>step</th><th>time (UTC)</th><th>nodes</th><th>writes</th><th>next</th></tr>
{"".join(rows)}
</table>
<h2>State at step {record.last_step}</h2>
{state_html}
<h2>Rule decisions</h2>
{decisions_html}
<h2>Interrupt</h2>
{interrupt_html}
</body>
</html>
"""
