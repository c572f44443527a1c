"""A real llama.cpp server (llama-cpp-python, SmolLM2-135M-Instruct) for the session.

``llama`` starts it once, with an API key, and stops it by pid at the end; ``start_llama``
starts another one a test may stop itself (to show that replay works with no server). A
server that cannot be built or started fails the tests (see ``llamaserver``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stargraph.llm import OpenAIChatModel
from tests.real_model import llamaserver

API_KEY = llamaserver.API_KEY


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[llamaserver.LlamaServer]:
    server = llamaserver.start(tmp_path_factory.mktemp("llama"), api_key=API_KEY)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def start_llama(tmp_path: Path) -> Iterator[Callable[[], llamaserver.LlamaServer]]:
    """Start extra servers (no API key); each is stopped after the test if still running."""
    started: list[llamaserver.LlamaServer] = []

    def start() -> llamaserver.LlamaServer:
        server = llamaserver.start(tmp_path)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def chat(llama: llamaserver.LlamaServer) -> Iterator[OpenAIChatModel]:
    """The real client for the session server, with its profile asked of the server."""
    model = OpenAIChatModel(
        llamaserver.ALIAS,
        base_url=llama.base_url,
        api_key=API_KEY,
        profile="detect",
        timeout=600.0,  # catches a hung server; replies are bounded by max_tokens
    )
    yield model
    model.close()
