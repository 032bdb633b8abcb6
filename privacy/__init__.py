"""Differential privacy, all of it in this package: its settings (`privacy.settings`), one component
per ``dp`` mode paired with any selection rule and aggregation that can honour it, DP-FedAvg
(`privacy.dp_fedavg`) and the mechanisms and accountants (`privacy.mechanisms`). It sits above the
methods (it declares its keys as they do, `methods.base.setting`) and below the run config.

A mode's object does what the mode asks of a run, so the apps call it and never test the mode's
name. On the server it checks the run config (`Privacy.check`) and the built model
(`check_model`), plans the run's accountant (`accountant`), wraps the aggregator (`aggregator`)
and says what ε leaves out (`warning`). On a client it opens the site's budget (`budget`: what it
has spent, whether a round or a score release still fits, the DP-SGD plan), clips the update it
sends (`clip`) and drops from every reply what ε does not cover (`release`).

- ``none`` (`Privacy`): nothing is protected, every reply goes as it is.
- ``sample`` (`privacy.sample`): DP-SGD on every site, one training example the unit.
- ``client`` (`privacy.client`): DP-FedAvg on the server, one site the unit.

The settings (``dp-*``) are `privacy.settings.PrivacySettings`; the mechanisms' maths and the
accountants, with no Flower, are `privacy.mechanisms`. Everything here is light (numpy only at import),
as `settings` imports it in every process; a mode's heavy parts load in its functions.
"""

from __future__ import annotations

from privacy.base import MODES, Budget, Privacy, mode, register
from privacy.client import ClientPrivacy
from privacy.sample import SamplePrivacy

register(Privacy(), SamplePrivacy(), ClientPrivacy())

__all__ = ["MODES", "Budget", "ClientPrivacy", "Privacy", "SamplePrivacy", "mode", "register"]
