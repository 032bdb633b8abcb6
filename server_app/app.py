"""ServerApp: read the run config, build the layer-selecting strategy, run it, record the results."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from logging import ERROR, INFO, WARNING, getLogger
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

import tasks
from flower_compat import FlowerVersionError, check_version
from methods import make_rule
from privacy.client import ClientAccountant
from server_app.results import Recorder, load_checkpoint
from settings import ConfigError, RunConfig, check_budgets, check_model_here
from settings.sites import read_registry, registry_of
from strategies import Aggregator, LayerSelectionStrategy, NodesMissing
from strategies.records import State, to_record
from tasks.names import head_of

log = getLogger("flwr").log  # Flower's logger: its handlers reach the console and `flwr run --stream`

app = ServerApp()


def run_directory(config: RunConfig) -> Path:
    """``results-dir/run-name``, or the run being resumed; relative paths resolve against the
    ServerApp's working directory (the project directory for ``run_simulation.py``, the directory
    the local SuperLink was started from for ``flwr run``), never the installed app bundle."""
    if config.resume_from:
        path = Path(config.resume_from)
    else:
        path = Path(config.results_dir) / (config.run_name or config.default_run_name())
    return path.expanduser().resolve()


@dataclass(frozen=True)
class RunPlan:
    """What the server settles before round 1: the model's layers, the initial adapters, the run
    directory, the model's provenance (`tasks.FederatedVLM.provenance`, e.g. the checksum of the
    stage-1 projector a run starts from) and, for a resumed run, the round to start from and the
    clients' stored models."""

    layer_names: list[str]
    initial: State
    run_dir: Path
    provenance: dict[str, str] = field(default_factory=dict)
    start_round: int = 1
    personal: dict[str, State] = field(default_factory=dict)  # by client id


def plan_run(config: RunConfig) -> RunPlan:
    """Every check the server can make before round 1 (ConfigError names the key): the model
    builds, the ``budgets`` entries fit its layers, the run directory is free or resumable.

    Budgets are indexed by partition id and cycled (`settings.budgets`), so any number of
    clients is fine; on the Deployment Engine sites may declare ``layer-budget`` themselves.
    The model is built without its base weights (``model_spec(client=False)``): an
    ``hf:<dir>`` needs only its config.json here, and the server holds no more than the adapters.
    """
    check_model_here(config.model)
    try:
        model = tasks.build_model(config.model_spec(client=False), answer_count(config))
        # the server's model is unquantised and weightless: check the clients' settings against it here
        from tasks.models import check_model_settings  # torch: only once a model is built

        check_model_settings(config.model_spec("cpu"), model, config.scoring.mode)
        if config.eval_answers != "generated" and not model.generative:
            raise ValueError(f"eval-answers = {config.eval_answers!r} is not supported by model "
                             f"{config.model!r}: an encoder + answer head scores its answer head; "
                             "use eval-answers = 'generated'")
    except (ValueError, OSError, KeyError, RuntimeError) as err:
        raise ConfigError(f"model = {config.model!r} cannot be built: {err}") from None
    try:  # every unit + the head trainable, as apply_adapter leaves it
        config.privacy.component.check_model(model)
    except ValueError as err:
        raise ConfigError(f"adapter = {config.adapter!r} of model = {config.model!r}: {err}") from None
    layer_names = list(model.layer_names)
    initial = tasks.get_layer_state(model, range(len(layer_names)))
    provenance = dict(model.provenance)
    del model
    check_budgets(config.budgets, len(layer_names))
    if config.federation.site_registry:
        try:
            read_registry(config.federation.site_registry)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    run_dir = run_directory(config)
    existing = next(p for p in (run_dir, *run_dir.parents) if p.exists())
    if not (existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)):
        key, value = ("resume-from", config.resume_from) if config.resume_from else ("results-dir",
                                                                                   config.results_dir)
        raise ConfigError(f"{key} = {value!r}: cannot write {run_dir} ({existing} is not a writable folder)")
    if config.resume_from:
        try:
            done, initial, personal = load_checkpoint(run_dir)
        except (ValueError, OSError, KeyError) as err:
            reason = str(err)
            raise ConfigError(reason if reason.startswith("resume-from") else
                              f"resume-from = {config.resume_from!r}: {reason}") from None
        return RunPlan(layer_names, initial, run_dir, provenance, done + 1, personal)
    if (run_dir / "rounds.jsonl").exists():
        raise ConfigError(f"run-name = {config.run_name!r}: {run_dir} already holds a run; "
                          "pick another run-name or set resume-from")
    return RunPlan(layer_names, initial, run_dir, provenance)


def answer_count(config: RunConfig) -> int:
    """The head's outputs the server must hold: the data set's answers when the head is shared
    (its initial state is the clients'), else 1 (the server holds no head)."""
    if not head_of(config.head).shared:
        return 1
    try:
        part = tasks.load_partition(config.dataset, 0, 1, "iid", seed=config.seed, max_train=1, max_test=1)
    except (ValueError, OSError) as err:
        raise ConfigError(f"head = 'shared' needs the data set's answers on the server, but dataset = "
                          f"{config.dataset!r} cannot be loaded here: {err}") from None
    return len(part.labels)


def aggregator_for(config: RunConfig, accountant: ClientAccountant | None = None) -> Aggregator:
    """The run's aggregator: its registry entry's server step bound with the method's own settings
    (`methods.base.Aggregation.bound_step`), made what the privacy mode needs (`privacy`:
    DP-FedAvg with the accountant's noise multiplier for ``dp = "client"``)."""
    step = config.method.bound_step(config.method_settings, config)
    return config.privacy.component.aggregator(step, config, accountant)


def plan_privacy(config: RunConfig, grid: Grid) -> ClientAccountant | None:
    """The privacy mode's server accountant (`privacy`; ``dp = "client"``: δ, the noise
    multiplier and the ε cap settled before round 1, ConfigError for a δ or cap that cannot hold),
    n the sites connected now, at least ``min-nodes``; None where the server accounts nothing."""
    sites = max(config.min_nodes, len(list(grid.get_node_ids())))
    try:
        accountant = config.privacy.component.accountant(config, sites)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if accountant is not None:
        log(INFO, "dp = %r: noise multiplier %.4g, clip %g, δ %.3g for %d sites; ε after %d rounds %.4g, "
            "cap %.4g", config.privacy.mode, accountant.noise, config.privacy.clip, accountant.delta, sites,
            config.num_server_rounds, accountant.epsilon(config.num_server_rounds), accountant.cap)
    return accountant


def build_strategy(config: RunConfig, num_layers: int, recorder: Recorder,
                   accountant: ClientAccountant | None = None) -> LayerSelectionStrategy:
    """The one round of every run (`strategies.layer_selection`) with its two axes from the run
    config: the selection rule of ``strategy`` and the aggregator of ``aggregation`` (their
    `methods` entries, each with its own settings), plus the run's training and scoring settings;
    ``accountant``: ``dp = "client"`` (`plan_privacy`)."""
    rule = make_rule(config.strategy, config.optimizer, config.selection_settings.server_keywords(config))
    if warning := config.privacy.component.warning(config):
        log(WARNING, "%s", warning)
    return LayerSelectionStrategy(
        rule, num_layers,
        aggregator=aggregator_for(config, accountant),
        accountant=accountant,
        train_config={"local-steps": config.training.local_steps, "batch-size": config.training.batch_size,
                      "head-lr": config.training.head_lr, "weight-decay": config.training.weight_decay},
        score_config={"score-mode": config.scoring.mode, "score-batch-size": config.scoring.batch_size},
        common_config={"run-dir": str(recorder.run_dir)},
        lr_schedule=lambda r: tasks.round_lr(config.training.lr, r, config.num_server_rounds,
                                             config.training.warmup_fraction),
        fraction_train=config.fraction_train,
        fraction_evaluate=config.fraction_evaluate,
        min_nodes=config.min_nodes,
        seed=config.seed,
        on_round_end=recorder.end_round,
        registry=registry_of(config.federation.site_registry),
        node_wait=config.federation.node_wait,
    )


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Validate everything before round 1 (the Flower version first), then run (or resume) the
    federation."""
    try:
        check_version(what="installed for the ServerApp")
        config = RunConfig.from_mapping(context.run_config)
        plan = plan_run(config)
        accountant = plan_privacy(config, grid)
    except (ConfigError, FlowerVersionError) as err:
        reason = str(err) if isinstance(err, FlowerVersionError) else f"Invalid run configuration: {err}"
        log(ERROR, "%s", reason)
        # Not SystemExit: Flower's ServerApp runner catches Exception only, and a SystemExit skips
        # its exit handler, so on the Deployment Engine the log would never reach `flwr run --stream`.
        raise ConfigError(reason) from None

    run_dir = plan.run_dir
    recorder = Recorder(run_dir, config.num_server_rounds, plan.layer_names,
                        progress_bar=config.progress_bar, first_round=plan.start_round)
    recorder.write_config({**config.to_dict(), "provenance": plan.provenance})
    log(INFO, "Results: %s (rounds %d..%d)", run_dir, plan.start_round, config.num_server_rounds)
    strategy = build_strategy(config, len(plan.layer_names), recorder, accountant)
    try:
        strategy.start(grid, to_record(plan.initial), num_rounds=config.num_server_rounds,
                       timeout=config.round_timeout, start_round=plan.start_round,
                       personal=plan.personal)
    except NodesMissing as err:  # one line, as a bad setting is: the sites missing are named
        log(ERROR, "The run stops: %s", err)
        raise NodesMissing(f"the run stops: {err}") from None
    recorder.finish(strategy.global_state, stopped=strategy.stopped)
    log(INFO, "Final global adapters: %s", run_dir / "adapters.safetensors")
