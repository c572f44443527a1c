"""The ``scripted_openai`` pytest fixture.

Enable it with ``pytest_plugins = ["stargraph.testing.pytest_plugin"]`` in a root conftest, or
import the fixture into any conftest::

    from stargraph.testing.pytest_plugin import scripted_openai  # noqa: F401

    def test_hello(scripted_openai):
        scripted_openai.enqueue(Reply.text("hello"))
        model = OpenAIChatModel("m", base_url=scripted_openai.base_url)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stargraph.testing._server import ScriptedOpenAIServer

__all__ = ["scripted_openai"]


@pytest.fixture
def scripted_openai() -> Iterator[ScriptedOpenAIServer]:
    """A started :class:`ScriptedOpenAIServer` with an empty script; closed after the test."""
    with ScriptedOpenAIServer() as server:
        yield server
