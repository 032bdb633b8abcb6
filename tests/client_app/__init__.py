"""Tests of client_app/."""
