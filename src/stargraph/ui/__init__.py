"""``stargraph ui``: a local run console in the browser, over any checkpoint store.

Server-rendered pages (Starlette, served by uvicorn) with one small script of our own: the
runs list (filter by status, graph and time; live status and token totals), a run (the
graph with the path it took highlighted and per-node durations, a paginated step timeline
with writes, rule decisions, tool calls, model conversations rendered as chat, ``Send``
payloads and the state after each step), live updates over server-sent events, and answers
to interrupts (approve, reject, edit) that resume the run.

Safe by default: loopback only unless a token is set; the token is checked on every
request; actions are same-origin POSTs carrying a CSRF token; ``read_only`` hides them;
secrets are masked before anything is rendered.

Needs the ``ui`` extra (``pip install 'stargraph[ui]'``).
"""

from __future__ import annotations

from stargraph.ui._app import GraphResolver, RunGraph, UiSettings, create_app, is_loopback

__all__ = ["GraphResolver", "RunGraph", "UiSettings", "create_app", "is_loopback"]
