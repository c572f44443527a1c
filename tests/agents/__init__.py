"""Tests of ``stargraph.agents``."""
