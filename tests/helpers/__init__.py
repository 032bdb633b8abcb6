"""Shared test helpers: federations, in-process grids, tiny checkpoints, scripts run as processes."""
