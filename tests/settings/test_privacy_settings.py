"""The ``dp-*`` keys: owned by `privacy.settings.PrivacySettings`, checked in one line each."""

import pytest

from settings import ConfigError, RunConfig, default_config


def test_the_default_run_has_no_privacy_and_a_mode_parses():
    assert RunConfig.from_mapping(default_config()).privacy.component.name == "none"
    config = RunConfig.from_mapping({**default_config(), "dp": "client", "dp-noise": 0.5})
    assert (config.privacy.mode, config.privacy.noise) == ("client", 0.5)
    assert config.privacy.component.name == "client"


@pytest.mark.parametrize(("key", "value", "message"), [
    ("dp", "secure", r"^dp = 'secure' is unknown; choose one of none, sample, client$"),
    ("dp-epsilon", -1.0, r"^dp-epsilon = -1.0 is out of range$"),
    ("dp-epsilon", 0.0, r"^dp-epsilon = 0.0 is out of range$"),
    ("dp-clip", 0.0, r"^dp-clip = 0.0 is out of range$"),
    ("dp-delta", 1.5, r"^dp-delta = 1.5 is out of range$"),
    ("dp-noise", -0.1, r"^dp-noise = -0.1 is out of range$"),
    ("dp-rounds", -1, r"^dp-rounds = -1 is out of range$"),
])
def test_a_bad_privacy_setting_fails_in_one_line(key, value, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_mapping({**default_config(), key: value})
