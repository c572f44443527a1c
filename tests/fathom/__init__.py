"""Tests of ``stargraph.fathom``."""
