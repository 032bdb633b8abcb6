"""The one exception of a bad setting (run config, node config or command-line option)."""


class ConfigError(ValueError):
    """A setting with a bad value; the message is one line naming the key and the value."""
