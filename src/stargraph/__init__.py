"""stargraph: compile LLM-agent workflows into content-hashed graphs, run them deterministically."""

from __future__ import annotations

__all__: list[str] = []
