"""Tests of ``stargraph.skills``."""
