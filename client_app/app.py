"""ClientApp: say who it is; train the assigned layers; evaluate on local data and score the
layers, one message.

A setting this node cannot use, or a train mask it refuses, is answered with an error reply
naming it (`client_app.replies`), never with a traceback.
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

import tasks
from client_app.node import node_settings
from client_app.personal import append_ledger, load_ledger, load_local_adapters, save_personal
from client_app.replies import check_mask, error_replies, released_only
from client_app.runtime import ClientSetup, client_setup, load_global, reported_budget, resolve_budget
from client_app.worker import site_mod
from methods.hooks import ClientHook, TrainStep
from privacy import Budget
from settings import ConfigError, RunConfig
from strategies.records import IDENTITY, REGISTERED_SITE, RUNTIME, from_record, runtime_record, to_record
from tasks.names import DP_SAT_OUT, NO_SCORE

# error_replies outermost: a setting the site cannot use is an error reply, wherever it ran;
# released_only: every reply's metrics pass the privacy mode's allow-list before they leave the site;
# site_mod: a deployed site's messages run in its warm worker (client_app.worker)
app = ClientApp(mods=[error_replies, released_only, site_mod])


@app.query()
def identify(msg: Message, context: Context) -> Message:
    """This client's stable identity (`client_app.node.NodeSettings.client_id`), asked once before
    the server first samples it: sampling, personal models and records are keyed by it, since
    Flower's node ids are random under Ray and new after a SuperNode restarts. Where the server
    names the site this node's key is registered as (``site-registry``), a node configured as
    another site refuses in one line. A bad node config, or a run that asks for less privacy than
    the site pins, is refused here already."""
    node = node_settings(context.node_config, RunConfig.from_mapping(context.run_config))
    registered = msg.content["config"].get(REGISTERED_SITE) if "config" in msg.content else None
    if registered is not None and registered != node.client_id:
        where = f"as site {registered!r}" if registered else "as no site"
        raise ConfigError(f"this node's key is registered {where}, but its node config says site = "
                          f"{node.client_id!r}: it answers for no other site")
    return Message(RecordDict({IDENTITY: ConfigRecord({"client": node.client_id})}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train only the assigned layers (+ own head); send back only those layers' adapters (none
    at all with a rule that trains no adapter: an empty mask, only the head trains). The run's
    aggregation adds its client work through its hook (`methods.hooks`), e.g. FedPIA's
    client-level PIA trains local + aligned global adapters and uploads their integration."""
    setup = client_setup(context)
    config = msg.content["config"]
    server_round = int(config["server-round"])
    num_layers = len(setup.model.layer_names)
    rule = setup.config.selection
    layer_budget = reported_budget(setup, context) if rule.needs_budget else num_layers
    layers = check_mask(config["mask"], num_layers, layer_budget, heads_only=not rule.trains_adapter)
    received = from_record(msg.content["arrays"])
    privacy, run_dir = setup.config.privacy.component, str(config["run-dir"])
    stored = load_global(setup, context, received, run_dir, before=server_round)
    steps = int(config["local-steps"])
    allowance = _allowance(setup, context, run_dir)
    if allowance.sit_out(steps) is not None:  # one more round would pass dp-epsilon: no training
        return _sat_out(setup, context, run_dir, steps, msg)
    own = partial(load_local_adapters, context, run_dir, before=server_round)
    hook = client_hook(setup, TrainStep(setup, received, stored, layers, server_round, own))
    mask = np.zeros(len(setup.model.layer_names), dtype=bool)
    mask[layers] = True
    with hook.training():
        metrics = tasks.train(
            setup.model, setup.partition.train, mask,
            steps=steps, batch_size=int(config["batch-size"]),
            lr=float(config["lr"]), head_lr=float(config["head-lr"]),
            weight_decay=float(config["weight-decay"]),
            seed=setup.config.seed * 1_000_003 + server_round * 1_009
            + setup.partition_id,
            device=setup.device,
            on_batch=hook.on_batch,
            privacy=allowance.plan,
            physical_batch=setup.config.training.physical_batch,
        )
    reply = {**metrics, "num-examples": len(setup.partition.train),
             "partition-id": setup.partition_id}
    personal = tasks.get_personal_state(setup.model)
    if (rows := allowance.record(steps)) is not None:  # on the ledger before it leaves the site
        history = append_ledger(context, rows, run_dir, setup.node.ledger, allowance.within)
        if history is None:  # another message spent the budget meanwhile: nothing of this round leaves
            return _sat_out(setup, context, run_dir, steps, msg)
        allowance.report(history, reply)
    upload, local = hook.finish(tasks.get_layer_state(setup.model, layers), personal, reply)
    upload = privacy.clip(upload, received, setup.config)
    save_personal(context, personal, server_round, run_dir, local=local)
    arrays = to_record(upload)
    return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord(reply)}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """The message that closes round ``server-round`` (`strategies.layer_selection`): load the
    model received (global adapters and this client's newest head, as of that round) once;
    evaluate it with its own head on its own test split if ``evaluate``; score its layers with
    ``score`` for round ``server-round`` + 1 unless that is "none" (the scoring batch is seeded by
    that round, as when scores had a message of their own). Every reply carries the budget,
    example count and Flower version (record "scores"; all-zero eigenvalues when not scored). Under
    ``dp = "sample"`` the scores are a private release (`privacy.sample`), withheld when it
    would pass the site's budget."""
    setup = client_setup(context)
    config = msg.content["config"]
    run_dir = str(config["run-dir"])
    allowance = _allowance(setup, context, run_dir)  # a δ the site cannot honour: refused here
    server_round, scorer = int(config["server-round"]), str(config["score"])
    scoring = scorer != NO_SCORE  # the server asks this node for the next round's scores
    reply = RecordDict({RUNTIME: runtime_record()})
    if config["evaluate"] or scoring:
        load_global(setup, context, from_record(msg.content["arrays"]), str(config["run-dir"]),
                    before=server_round + 1)
    if config["evaluate"]:
        reply["metrics"] = MetricRecord(_evaluation(setup, server_round))
    # the budget is measured before scoring: its pieces are sized by it, and afterwards free memory
    # would tell of a private release's batch
    layer_budget = resolve_budget(setup, context)
    refused = allowance.scores_refused() if scoring else None
    start = time.perf_counter()
    scores: dict = {}
    if refused is not None:  # one more release would pass dp-epsilon: no scores, the server records it
        scores = refused
    elif not scoring:
        scores["eigenvalues"] = [0.0] * len(setup.model.layer_names)
    else:
        batch = allowance.scoring_batch(setup.partition.train, int(config["score-batch-size"]),
                                        setup.config.seed * 1_000_003 + (server_round + 1) * 1_009
                                        + setup.partition_id)
        eigenvalues = np.zeros(len(setup.model.layer_names))
        if batch:
            from tasks.lntk_pieces import TrainingStep  # torch: where a model scores

            step = TrainingStep(setup.config.training.pass_size, layer_budget)  # within a step's memory
            eigenvalues = tasks.score_layers(setup.model, batch, scorer=scorer,
                                             mode=str(config["score-mode"]), step=step,
                                             clip=allowance.score_clip)
        eigenvalues, rows = allowance.release_scores(eigenvalues)
        recorded = rows is None or append_ledger(context, rows, run_dir, setup.node.ledger,
                                                 allowance.within) is not None
        if recorded:  # on the ledger before it leaves the site
            scores["eigenvalues"] = [float(v) for v in eigenvalues]
        else:  # another message spent the budget meanwhile: the scores stay here
            scores = _allowance(setup, context, run_dir).scores_refused() or {DP_SAT_OUT: 1}
    scores.update({"budget": layer_budget,
                   "num-examples": len(setup.partition.train), "partition-id": setup.partition_id,
                   "seconds": time.perf_counter() - start})
    reply["scores"] = MetricRecord(scores)
    return Message(reply, reply_to=msg)


def _sat_out(setup: ClientSetup, context: Context, run_dir: str, steps: int, msg: Message) -> Message:
    """The reply of a round sat out to stay within the site's budget: no arrays, the ε spent and the
    ε the round would have reached (the server records it)."""
    metrics = _allowance(setup, context, run_dir).sit_out(steps) or {DP_SAT_OUT: 1}
    metrics.update({"num-examples": len(setup.partition.train), "partition-id": setup.partition_id})
    return Message(RecordDict({"arrays": to_record({}), "metrics": MetricRecord(metrics)}), reply_to=msg)


def _allowance(setup: ClientSetup, context: Context, run_dir: str) -> Budget:
    """This site's privacy budget (`privacy.Budget`) with its ledger, the one the site keeps
    where its node config says (`client_app.node.ledger_file`: every run on its data adds to it)
    and capped by the ε it pins; ConfigError for a δ the site cannot honour or passes its pin."""
    try:
        component, pin = setup.config.privacy.component, setup.node.pin
        history = (load_ledger(context, run_dir, setup.node.ledger) if component.keeps_ledger
                   else np.zeros((0, 3)))
        budget = component.budget(setup.config, len(setup.partition.train), history, cap=pin.epsilon,
                                  cap_delta=None if pin.epsilon is None else pin.delta or 0.0)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if budget.plan is not None:
        pin.check_delta(budget.plan.delta)
    return budget


def _evaluation(setup: ClientSetup, server_round: int) -> dict:
    """The loaded model's metrics on this client's test split (and the others', `others_metrics`),
    on a fixed subset of it before the last round where ``eval-subset`` asks.
    ``eval-answers = "closed-set"`` scores a generator's closed-set answers every round and, with
    ``eval-exact-match``, adds its generated answers' exact match after the last round."""
    config = setup.config
    last = server_round == config.num_server_rounds
    answers = config.eval_answers
    if answers == "closed-set" and last and config.eval_exact_match:
        answers = "both"
    questions = config.evaluation.questions(setup.partition.test, last)
    metrics = tasks.evaluate(setup.model, questions,
                             batch_size=max(64, config.training.pass_size), device=setup.device,
                             answers=answers)
    metrics["num-examples"] = int(metrics.pop("num_examples"))
    metrics["partition-id"] = setup.partition_id
    from client_app.others_accuracy import others_metrics

    metrics.update(others_metrics(setup, server_round))
    if setup.partition.task == "vqa":
        metrics["majority-accuracy"] = tasks.majority_accuracy(questions)
    return metrics


def client_hook(setup: ClientSetup, step: TrainStep) -> ClientHook:
    """The hook of this run's aggregation (its registry entry's factory), or the plain base."""
    factory = setup.config.method.client_factory()
    hook = factory(step, setup.config.method_settings) if factory else None
    return hook if hook is not None else ClientHook()
