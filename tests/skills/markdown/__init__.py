"""Tests of ``stargraph.skills.markdown``."""
