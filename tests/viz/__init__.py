"""Tests of ``stargraph.viz``."""
