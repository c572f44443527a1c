"""Tests of ``stargraph.checkpoint``."""
