"""Tests of tasks/."""
