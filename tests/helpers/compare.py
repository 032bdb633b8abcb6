"""Equality of recorded runs, with floats to a relative tolerance."""

from __future__ import annotations

import pytest


def assert_close(got, expected, path: str = "") -> None:
    """Equal structure and non-float values; floats equal to 1e-6 relative."""
    if isinstance(expected, float):
        assert got == pytest.approx(expected, rel=1e-6, abs=1e-12), path
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and got.keys() == expected.keys(), path
        for key in expected:
            assert_close(got[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), path
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert_close(a, b, f"{path}[{i}]")
    else:
        assert got == expected, path
