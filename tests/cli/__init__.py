"""Tests of ``stargraph.cli``."""
