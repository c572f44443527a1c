"""Test support that ships: a scripted OpenAI-compatible server and conformance suites.

* :class:`ScriptedChatModel` - the in-process fake model (``stargraph.llm``'s, here beside its
  over-HTTP sibling): replies from a list, or from a function of each request.
* :class:`ScriptedOpenAIServer` - an HTTP server on 127.0.0.1 answering
  ``/v1/chat/completions`` (plain and SSE streaming) from a script of :class:`Reply` s, with
  deterministic ids, injected errors, delays and aborted answers, and every request recorded;
  ``behaves_like="llama.cpp"`` reproduces what llama-cpp-python's server refuses and does.
* :func:`check_chat_model` - the conformance suite for ``ChatModel`` implementations.
* ``stargraph.testing.pytest_plugin`` - the ``scripted_openai`` fixture (kept in its own
  module so importing :mod:`stargraph.testing` does not import pytest).
"""

from __future__ import annotations

from stargraph.llm import ScriptedChatModel
from stargraph.testing._replies import RecordedRequest, Reply, ScriptedToolCall
from stargraph.testing._server import FIXED_CREATED, ScriptedOpenAIServer
from stargraph.testing.conformance import CONFORMANCE_SCRIPT, ChatModelHarness, check_chat_model
from stargraph.testing.replay import assert_cassettes_pass, assert_replays_every_step

__all__ = [
    "CONFORMANCE_SCRIPT",
    "ChatModelHarness",
    "FIXED_CREATED",
    "RecordedRequest",
    "Reply",
    "ScriptedChatModel",
    "ScriptedOpenAIServer",
    "ScriptedToolCall",
    "assert_cassettes_pass",
    "assert_replays_every_step",
    "check_chat_model",
]
