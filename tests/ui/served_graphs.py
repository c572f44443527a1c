"""A graph that ``stargraph serve`` runs in a process of its own for the console's tests:
``scribe`` asks the model of its services for a letter, and the model is the scripted
server of the test process, at the address in ``SG_TEST_MODEL_URL``."""

from __future__ import annotations

import os

from stargraph.graph import END, START, Graph
from stargraph.llm import OpenAIChatModel
from tests.ui.ui_graphs import Letter, write

scribe = (
    Graph("scribe", state=Letter)
    .with_node("write", write)
    .with_edge(START, "write")
    .with_edge("write", END)
)

app = scribe.compile(
    services={
        "model": OpenAIChatModel(
            "scripted-model",
            base_url=os.environ.get("SG_TEST_MODEL_URL", "http://127.0.0.1:9/v1"),
            api_key="x",
            max_retries=0,
            backoff=0,
        )
    }
)
