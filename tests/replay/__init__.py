"""Tests of ``stargraph.replay``."""
