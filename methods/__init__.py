"""The method registries: one entry per aggregation (``aggregation``) and per selection rule
(``strategy``), each declaring its settings, its server step and client hooks (lazy ``"module:attr"``
names) and what it needs of the model and the run config (`methods.base`).

Where it lives and why: both apps and `strategies` read the entries, and a deployed ClientApp must
stay light, so this package imports nothing of the project but the name lists of `tasks.names`
(`methods.options` holds the settings dataclasses); `settings` imports it to parse and check each
method's own keys, `strategies` and the apps import it to find their step. The arrows point one way
(apps -> strategies -> settings -> methods -> tasks.names); the lazy strings name `strategies` and
`client_app` without importing them.

Adding a method is one module (its server step, maybe a client hook) plus one line here
(CONTRIBUTING.md); nothing outside an entry compares a method's name (tests/methods/test_methods.py scans).
"""

from __future__ import annotations

from methods.base import Aggregation, MethodSettings, Selection, lookup, registry, resolve
from methods.options import F3ocusSettings, FedPiaSettings, GroupOracleSettings, SimaSettings
from tasks.names import BASELINE_SCORERS

# why dp = "client" (DP-FedAvg, strategies.aggregation.dp) refuses these methods (README, client-level DP)
FEDPIA_NO_DP = ("its server alignment permutes and weights each site's un-noised update by its distance to "
                "the others' mean, so one site moves every site's weight: no per-site bound by dp-clip")
SIMA_NO_DP = ("its sites send gradient features with every update and get one un-noised model each, "
              "releases that the DP-FedAvg noise does not cover")
LOCAL_NO_DP = ("it returns each site its own un-noised update and shares nothing, so there is no "
               "aggregate to noise")
GROUPS_NO_DP = ("its per-group means are released beside the global mean, and each would need its own "
                "noise and accounting (not implemented)")

AGGREGATIONS: dict[str, Aggregation] = registry([
    Aggregation("masked-fedavg", "strategies.aggregation.masked_fedavg:masked_fedavg", client_dp_refusal=""),
    Aggregation("fedpia", "strategies.aggregation.fedpia:fedpia", FedPiaSettings,
                client="client_app.pia:start", client_dp_refusal=FEDPIA_NO_DP),
    Aggregation("sima", "strategies.aggregation.sima:sima", SimaSettings, client="client_app.mosaic:start",
                needs_gated_model=True, adapters=("lora", "pq-lora"), client_dp_refusal=SIMA_NO_DP),
    Aggregation("local", "strategies.aggregation.local:local_only", client_dp_refusal=LOCAL_NO_DP),
    Aggregation("group-oracle", "strategies.aggregation.group_oracle:group_oracle", GroupOracleSettings,
                needs_groups=True, client_dp_refusal=GROUPS_NO_DP),
])
"""``aggregation``: how the updates of a round are combined (`strategies.aggregation`)."""


SELECTIONS: dict[str, Selection] = registry([
    Selection("f3ocus", "strategies.selection.f3ocus:rule", F3ocusSettings, optimises=True),
    Selection("lntk", "strategies.selection.lntk:rule"),
    Selection("random", "strategies.selection.random_k:rule"),
    Selection("last", "strategies.selection.last_k:rule"),
    Selection("all", "strategies.selection.all_layers:rule", needs_budget=False),
    Selection("none", "strategies.selection.none:rule", trains_adapter=False),
    *(Selection(name, "strategies.selection.scores:rule") for name in BASELINE_SCORERS),
])
"""``strategy``: which layers each client trains (`strategies.selection`)."""


def aggregation(name: str) -> Aggregation:
    """The entry of ``aggregation = name`` (ValueError naming it if unknown)."""
    return lookup(AGGREGATIONS, "aggregation", name)


def selection(name: str) -> Selection:
    """The entry of ``strategy = name`` (ValueError naming it if unknown)."""
    return lookup(SELECTIONS, "strategy", name)


def optimises(strategy: str) -> bool:
    """Does ``strategy`` run the ``optimizer`` search (`Selection.optimises`)? False for a name no
    entry has (e.g. a finished run's strategy that has since been removed)."""
    entry = SELECTIONS.get(strategy)
    return bool(entry and entry.optimises)


def owners() -> tuple[type[MethodSettings], ...]:
    """Every settings dataclass of the registered entries, once each (each owns its keys)."""
    found = [e.settings for e in (*AGGREGATIONS.values(), *SELECTIONS.values())]
    return tuple(dict.fromkeys(s for s in found if s.own_keys()))


__all__ = ["AGGREGATIONS", "SELECTIONS", "Aggregation", "MethodSettings", "Selection", "aggregation",
           "owners", "resolve", "selection"]
