"""Layer budgets k_i (paper §4.1: client i fine-tunes at most k_i of the L selectable layers).

The run-config ``budgets`` list gives partition id i the entry ``i mod len(list)``: a shorter
list is cycled, a longer one is used up to the number of clients. A site's node config
``layer-budget`` wins over the list. Entries are positive ints up to L, or ``auto`` (estimated from
free device memory on the client, supplement Algorithm 46).
"""

from __future__ import annotations

from settings.errors import ConfigError

Budget = int | str  # a number of layers, or "auto"


def parse_budgets(text: str, key: str = "budgets") -> list[Budget]:
    """``"6,6,4,4,2"`` -> ``[6, 6, 4, 4, 2]``; entries may be ``auto``; ``""`` -> ``[]``."""
    if not text.strip():
        return []
    return [parse_budget(item.strip(), key, text) for item in text.split(",")]


def parse_budget(value: object, key: str = "layer-budget", whole: object = None) -> Budget:
    """One budget: a positive int (or its digits) or ``auto``; `whole` is the text it came from."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if value == "auto":
        return "auto"
    if isinstance(value, str) and value.isdigit() and int(value) >= 1:
        return int(value)
    where = f"{key} = {whole!r}: {value!r}" if whole is not None else f"{key} = {value!r}"
    raise ConfigError(f"{where} is not a positive int or 'auto'")


def budget_of(budgets: list[Budget], partition_id: int) -> Budget | None:
    """Partition `partition_id`'s entry of a parsed list, cycled; None for an empty list."""
    return budgets[partition_id % len(budgets)] if budgets else None


def budgets_for(text: str, num_clients: int) -> list[Budget]:
    """The budgets of partitions ``0..num_clients-1`` (empty when the list is empty)."""
    budgets = parse_budgets(text)
    return [budget_of(budgets, i) for i in range(num_clients)] if budgets else []


def check_fits(budget: Budget, num_layers: int, where: str) -> None:
    """A numeric budget may not exceed the model's L selectable layers; `where` names it."""
    if budget != "auto" and int(budget) > num_layers:
        raise ConfigError(f"{where} exceeds the model's {num_layers} selectable layers")


def check_budgets(text: str, num_layers: int) -> None:
    """Every entry of the run-config list fits the model."""
    for budget in parse_budgets(text):
        check_fits(budget, num_layers, f"budgets = {text!r}: {budget}")


def describe_budgets(text: str, num_clients: int) -> str:
    """One line saying which budgets `num_clients` clients get from `text`, e.g. for the log."""
    used = budgets_for(text, num_clients)
    if not used:
        return (f"budgets = {text!r}: no list; every client may train all layers unless its node "
                "config sets layer-budget")
    count = len(parse_budgets(text))
    how = ("cycled" if count < num_clients else f"the first {num_clients}" if count > num_clients
           else "as listed")
    return (f"layer budgets of {num_clients} clients (partition 0..{num_clients - 1}): "
            f"{','.join(map(str, used))} (budgets = {text!r}, {how})")
