"""Tests of settings/."""
