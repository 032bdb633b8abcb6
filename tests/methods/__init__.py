"""Tests of methods/."""
