"""Run settings that both apps read: the typed run config, layer budgets and the checks of both.

Neither `server_app` nor `client_app` is imported here, and each of them may import this package,
so the client does not depend on the server's code. `settings.config` checks values
without touching the machine; `settings.local` checks what depends on it (folders, devices).
"""

from settings.budgets import (
    Budget,
    budget_of,
    budgets_for,
    check_budgets,
    check_fits,
    describe_budgets,
    parse_budget,
    parse_budgets,
)
from settings.config import PROJECT_ROOT, RunConfig, default_config
from settings.errors import ConfigError
from settings.local import check_data_here, check_device_here, check_here, check_model_here

__all__ = [
    "PROJECT_ROOT",
    "Budget",
    "ConfigError",
    "RunConfig",
    "budget_of",
    "budgets_for",
    "check_budgets",
    "check_data_here",
    "check_device_here",
    "check_fits",
    "check_here",
    "check_model_here",
    "default_config",
    "describe_budgets",
    "parse_budget",
    "parse_budgets",
]
