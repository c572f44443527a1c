"""Tests of ``stargraph.compile``."""
