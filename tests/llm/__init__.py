"""Tests of ``stargraph.llm``."""
