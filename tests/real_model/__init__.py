"""Tests of ``stargraph.real_model``."""
