"""Tests of flower_compat/."""
