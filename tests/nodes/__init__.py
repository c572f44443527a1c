"""Tests of ``stargraph.nodes``."""
