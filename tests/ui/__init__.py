"""Tests of ``stargraph.ui``."""
