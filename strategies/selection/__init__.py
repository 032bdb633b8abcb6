"""Which layers each client trains: the run's selection rule, a registered method entry (F3OCUS in
`methods.f3ocus`, the reference rules in `methods.reference`; `methods.make_rule` binds one) with the
run's optimiser (`strategies.selection.rule.SelectionRule`)."""

from __future__ import annotations

from strategies.selection.rule import SelectionRule

__all__ = ["SelectionRule"]
