"""Tests of strategies/."""
