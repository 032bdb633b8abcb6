"""Tests of server_app/."""
