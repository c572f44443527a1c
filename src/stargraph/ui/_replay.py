"""The console's replay page: what an offline replay of a run re-executes, and the replay.

``GET /runs/RUN/replay`` shows, before anything runs, the nodes whose bodies a replay runs
again (``CompiledGraph.replay_plan``) and the form that starts it; its ``stub`` field says
which nodes to serve their recorded writes instead. ``POST`` with ``action=preview`` shows
the plan for the stub typed in; with ``action=replay`` it replays the run offline
(``CompiledGraph.replay(run_id, stub=...)``, nothing written to the store) and shows the same
page with the outcome: it matches its record, or where it diverged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from starlette.exceptions import HTTPException

from stargraph.checkpoint import RunRecord
from stargraph.errors import ReplayError, StargraphError
from stargraph.replay import ReplayPlan
from stargraph.runtime import CompiledGraph
from stargraph.runtime._recorded import Stub
from stargraph.ui._mask import Masker
from stargraph.ui._pages import escape, layout

__all__ = ["parse_stub", "render_replay"]


def parse_stub(text: str) -> Stub:
    """The form's stub field: ``must`` (also when empty), ``all`` or node names separated by
    commas (``site/node`` for a node of a subgraph's child run)."""
    text = text.strip()
    if text in ("", "must"):
        return "must"
    if text == "all":
        return "all"
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise HTTPException(
            400, f"the stub field holds {text!r}; write must, all or node names with commas"
        )
    return names


def _stub_text(stub: Stub) -> str:
    return stub if isinstance(stub, str) else ", ".join(sorted(stub))


def _plan_html(plan: ReplayPlan) -> str:
    served = ", ".join(f"<code>{escape(n)}</code>" for n in plan.served) or "none"
    if not plan.reruns:
        reruns = (
            '<p id="replay-reruns">No node body runs again: every recorded node\'s writes '
            "are served from the record, and the replay checks the record's routing, rules "
            "and reducers.</p>"
        )
    else:
        names = ", ".join(f"<code>{escape(n)}</code>" for n in plan.reruns)
        reruns = (
            f'<p id="replay-reruns" class="status-failed">These node bodies run again: '
            f"{names}. Their model, tool and <code>ctx.once</code> calls come from the "
            "record, but anything else they do (a file written, a service called without a "
            "tool) happens again. Write <code>all</code> or their names in the stub field to "
            "serve their recorded writes instead.</p>"
        )
    return f'{reruns}\n<p id="replay-served">Served from the record: {served}.</p>'


def render_replay(
    masker: Masker,
    app: CompiledGraph[Any],
    run: RunRecord,
    csrf: str,
    form: Mapping[str, str],
    *,
    run_it: bool,
) -> str:
    """The replay page of ``run`` for the stub in ``form``; with ``run_it``, after replaying
    the run offline with it."""
    stub = parse_stub(form.get("stub", ""))
    rid = quote(run.run_id, safe="")
    try:
        plan = app.replay_plan(run.run_id, stub=stub)
    except StargraphError as exc:
        raise HTTPException(400, masker.text(f"{exc}; go back and fix the stub field")) from exc
    outcome = ""
    if run_it:
        steps = 0
        try:
            for event in app.replay_stream(run.run_id, stub=stub):
                if not event.path and event.kind == "step_completed":
                    steps += 1
            outcome = (
                f'<p id="replay-outcome" class="status-done">The replay matches its record '
                f"({steps} steps, offline; nothing was written to the store).</p>"
            )
        except ReplayError as exc:
            shown = escape(masker.text(str(exc)))
            outcome = (
                f'<p id="replay-outcome" class="status-failed">The replay diverged from its '
                f"record: {shown}</p>"
            )
    body = f"""
<h1>Replay run {escape(run.run_id)} offline</h1>
<p><a href="/runs/{rid}">back to the run</a></p>
{outcome}
<form method="post" action="/runs/{rid}/replay" class="answer replay-form">
<input type="hidden" name="csrf" value="{escape(csrf)}">
<label>stub: <code>must</code> (serve only the <code>must_stub</code> nodes, such as LLM
nodes), <code>all</code> (serve every node's recorded writes) or node names separated by commas
(<code>site/node</code> inside a subgraph), as <code>stargraph replay --stub</code> takes
<input name="stub" id="replay-stub" value="{escape(_stub_text(stub))}"></label>
{_plan_html(plan)}
<div class="buttons">
<button type="submit" name="action" value="preview" id="replay-preview">show what runs
again</button>
<button type="submit" name="action" value="replay" id="replay">replay offline</button>
</div>
<p class="muted">A replay serves every model call, tool call and <code>ctx.once</code> from the
record and writes nothing to the store (<code>CompiledGraph.replay(run_id, stub=...)</code>);
a node body it runs again must write what it wrote.</p>
</form>
"""
    return layout(f"replay {run.run_id}", body)
