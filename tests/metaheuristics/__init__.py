"""Tests of metaheuristics/."""
