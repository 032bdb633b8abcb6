"""ServerApp: read the run config, build the layer-selecting strategy, run it, record the results."""

from __future__ import annotations

import time
from logging import ERROR, INFO
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

import tasks
from server_app.config import ConfigError, RunConfig, parse_budgets
from server_app.results import Recorder, load_checkpoint
from strategies import FIXED_RULES, LayerSelectionStrategy, make_rule
from strategies.records import to_record
from tasks.scores import BASELINE_SCORERS

app = ServerApp()
STRATEGIES = (*FIXED_RULES, *BASELINE_SCORERS)


def run_directory(config: RunConfig) -> Path:
    """``results-dir/run-name``, or the run being resumed; relative paths resolve against the
    ServerApp's working directory (the project directory for ``run_simulation.py``, the directory
    the local SuperLink was started from for ``flwr run``), never the installed app bundle."""
    if config.resume_from:
        path = Path(config.resume_from)
    else:
        name = config.run_name or f"{config.strategy}-{config.optimizer}-{time.strftime('%Y%m%d-%H%M%S')}"
        path = Path(config.results_dir) / name
    return path.expanduser().resolve()


def check_budgets(config: RunConfig, num_layers: int, num_nodes: int) -> None:
    """Budgets must fit the model (1..L) and not outnumber the connected clients.

    On the Deployment Engine, where sites declare ``layer-budget`` themselves, set ``budgets = ""``.
    """
    budgets = parse_budgets(config.budgets)
    too_big = [b for b in budgets if b != "auto" and b > num_layers]
    if too_big:
        raise ConfigError(f"budgets = {config.budgets!r}: {too_big[0]} exceeds the model's "
                          f"{num_layers} selectable layers")
    if len(budgets) > num_nodes:
        raise ConfigError(f"budgets = {config.budgets!r} lists {len(budgets)} budgets for "
                          f"{num_nodes} clients")


def build_strategy(config: RunConfig, num_layers: int, recorder: Recorder) -> LayerSelectionStrategy:
    """The strategy of ``config.strategy`` with the run's training and scoring settings."""
    rule = make_rule(config.strategy, config.optimizer,
                     {"pop_size": config.optimizer_pop_size, "n_gen": config.optimizer_generations,
                      "pick": config.optimizer_pick},
                     scorers=BASELINE_SCORERS)
    return LayerSelectionStrategy(
        rule, num_layers,
        train_config={"local-steps": config.local_steps, "batch-size": config.batch_size,
                      "head-lr": config.head_lr, "weight-decay": config.weight_decay},
        score_config={"score-mode": config.score_mode, "score-batch-size": config.score_batch_size},
        common_config={"run-dir": str(recorder.run_dir)},
        lr_schedule=lambda r: tasks.round_lr(config.lr, r, config.num_server_rounds,
                                             config.warmup_fraction),
        fraction_train=config.fraction_train,
        fraction_evaluate=config.fraction_evaluate,
        min_nodes=config.min_nodes,
        seed=config.seed,
        on_round_end=recorder.end_round,
    )


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Validate everything before round 1, then run (or resume) the federation."""
    try:
        config = RunConfig.from_mapping(context.run_config, strategies=STRATEGIES)
        model = tasks.build_model(config.model, 1, adapter=config.adapter,
                                  lora_rank=config.lora_rank, seed=config.seed)
        layer_names = list(model.layer_names)
        num_layers = len(layer_names)
        initial = tasks.get_layer_state(model, range(num_layers))
        del model
        check_budgets(config, num_layers, max(len(list(grid.get_node_ids())), config.min_nodes))
        run_dir = run_directory(config)
        start_round, personal = 1, {}
        if config.resume_from:
            done, initial, personal = load_checkpoint(run_dir)
            start_round = done + 1
        elif (run_dir / "rounds.jsonl").exists():
            raise ConfigError(f"run-name = {config.run_name!r}: {run_dir} already holds a run; "
                              "pick another run-name or set resume-from")
    except (ConfigError, ValueError, FileNotFoundError) as err:
        log(ERROR, "Invalid run configuration: %s", err)
        # Not SystemExit: Flower's ServerApp runner catches Exception only, and a SystemExit skips
        # its exit handler, so on the Deployment Engine the log would never reach `flwr run --stream`.
        raise ConfigError(f"Invalid run configuration: {err}") from None

    recorder = Recorder(run_dir, config.num_server_rounds, layer_names,
                        progress_bar=config.progress_bar, first_round=start_round)
    recorder.write_config(config.to_dict())
    log(INFO, "Results: %s (rounds %d..%d)", run_dir, start_round, config.num_server_rounds)
    strategy = build_strategy(config, num_layers, recorder)
    strategy.start(grid, to_record(initial), num_rounds=config.num_server_rounds,
                   timeout=config.round_timeout, start_round=start_round, personal=personal)
    recorder.finish(strategy.global_state)
    log(INFO, "Final global adapters: %s", run_dir / "adapters.safetensors")
