"""Fixtures for the chat-model tests: the scripted server and models pointed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stargraph.llm import OpenAIChatModel
from stargraph.testing import ScriptedOpenAIServer
from stargraph.testing.pytest_plugin import scripted_openai  # noqa: F401

ModelFactory = Callable[..., OpenAIChatModel]


@pytest.fixture
def sleeps() -> list[float]:
    """Backoff sleeps requested by the models built with ``make_model`` (none really slept)."""
    return []


@pytest.fixture
def make_model(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    sleeps: list[float],
) -> Iterator[ModelFactory]:
    """Build ``OpenAIChatModel`` s against the scripted server; all closed after the test."""
    built: list[OpenAIChatModel] = []

    async def asleep(seconds: float) -> None:
        sleeps.append(seconds)

    def factory(**options: Any) -> OpenAIChatModel:
        options.setdefault("model", "gpt-test")
        options.setdefault("base_url", scripted_openai.base_url)
        options.setdefault("api_key", "sk-test")
        options.setdefault("timeout", 5.0)
        model = OpenAIChatModel(sleep=sleeps.append, asleep=asleep, **options)
        built.append(model)
        return model

    yield factory
    for model in built:
        model.close()
