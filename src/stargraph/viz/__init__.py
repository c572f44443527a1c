"""Pictures of graphs and runs, without any web service.

* :func:`to_mermaid` / :func:`to_dot` - text diagrams of a graph IR: START/END, nodes,
  static edges, joins, labelled conditional edges, rule-routed ``goto`` edges, subgraph
  nodes as clusters holding their child graphs, and a legend of rule packs.
* :func:`render` - PNG/SVG bytes through Graphviz's ``dot`` when it is installed
  (:class:`GraphvizNotFoundError` says how to install it otherwise).
* :func:`html_report` - a static, self-contained HTML page about one stored run.

>>> from stargraph.examples.basics import chain_graph
>>> print(to_mermaid(chain_graph(2).to_ir()).splitlines()[0])
flowchart TD
"""

from __future__ import annotations

from stargraph.viz._html import html_report
from stargraph.viz._render import GraphvizNotFoundError, ImageFormat, graphviz_available, render
from stargraph.viz._runs import StepView, format_ms, state_at, step_views
from stargraph.viz._text import to_dot, to_mermaid

__all__ = [
    "GraphvizNotFoundError",
    "ImageFormat",
    "StepView",
    "format_ms",
    "graphviz_available",
    "html_report",
    "render",
    "state_at",
    "step_views",
    "to_dot",
    "to_mermaid",
]
