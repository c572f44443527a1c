"""Tests of ``stargraph.skills.machine``."""
