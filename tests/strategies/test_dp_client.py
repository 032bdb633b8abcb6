"""dp = "client" (issue 39 item 2): DP-FedAvg's clipping and per-array noise
(`methods.privacy.dp_fedavg`), its ε (`methods.privacy.client`) against dp-accounting called here on its
own, the budget stop, and the one-line refusals before round 1."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from flwr.app import Context, MessageType, RecordDict
from scipy import stats

from client_app.app import app as client_app
from experiments.sweep import incomplete
from flower_compat.inprocess import InProcessGrid
from methods.masked_fedavg.server import masked_fedavg
from methods.privacy.client import ClientAccountant
from methods.privacy.dp_fedavg import clip_update, update_norm, with_client_dp
from server_app.app import app as server_app
from settings import ConfigError, RunConfig
from settings.privacy import PrivacySettings
from strategies.aggregation import ClientUpdate
from strategies.records import from_record
from tests.client_app.test_config_node import RUN
from tests.helpers.gaussian_dp import exact_gaussian_epsilon


def test_a_clipped_update_has_norm_at_most_the_clip_and_keeps_its_direction():
    rng = np.random.default_rng(0)
    base = {"0:a": rng.normal(size=(5, 3)), "1:b": rng.normal(size=7)}
    state = {k: v + 10 * rng.normal(size=v.shape) for k, v in base.items()}
    assert update_norm(state, base) > 30
    clipped = clip_update(state, base, 0.5)
    assert 0.5 * (1 - 1e-5) <= update_norm(clipped, base) <= 0.5
    before = np.concatenate([(state[k] - base[k]).ravel() for k in base])
    after = np.concatenate([(clipped[k] - base[k]).ravel() for k in base])
    assert np.dot(before, after) / (np.linalg.norm(before) * np.linalg.norm(after)) > 1 - 1e-5
    small = {k: v + 1e-3 for k, v in base.items()}  # norm ~ 5e-3: unchanged
    assert all(np.array_equal(clip_update(small, base, 0.5)[k], small[k]) for k in base)
    # float32 entries of size ~1 round by ~6e-8 each; the sent arrays still hold the bound
    base32 = {k: v.astype(np.float32) for k, v in base.items()}
    state32 = {k: v + rng.normal(size=v.shape).astype(np.float32) for k, v in base32.items()}
    assert 0.99e-4 <= update_norm(clip_update(state32, base32, 1e-4), base32) <= 1e-4


def test_the_server_noise_per_array_has_std_z_clip_over_its_senders():
    """Planted round: "0:a" sent by 4 clients, "1:b" by one, "2:c" by none. Updates are within the
    clip, so the noiseless result is their uniform mean (not weighted by the clients' very different
    example counts); the residual of each array must be N(0, (zC/n_k)²): its sum of squares over
    σ² lies within the chi-square(N) 1e-4 / 1 - 1e-4 quantiles, and the other σ is far outside."""
    size, clip, noise = 20_000, 2.0, 1.5
    zeros = np.zeros(size, np.float32)
    base = {"0:a": zeros, "1:b": zeros, "2:c": zeros + 1}
    rng = np.random.default_rng(1)
    deltas = [rng.uniform(-1e-3, 1e-3, size).astype(np.float32) for _ in range(4)]
    updates = [ClientUpdate(i, {"0:a": d, **({"1:b": d} if i == 0 else {})}, num_examples=10 ** i, base=base)
               for i, d in enumerate(deltas)]
    step = with_client_dp(masked_fedavg, clip=clip, noise=noise, rng=np.random.default_rng(2))
    result = step(base, updates).global_state
    expected = {"0:a": np.mean(deltas, axis=0), "1:b": deltas[0]}
    low, high = stats.chi2.ppf([1e-4, 1 - 1e-4], size)
    for key, senders in (("0:a", 4), ("1:b", 1)):
        residual = result[key].astype(np.float64) - expected[key]
        sigma = noise * clip / senders
        assert low <= np.sum(residual ** 2) / sigma ** 2 <= high, key
        other = noise * clip / (5 - senders)  # the σ of the other count: rejected by the same bounds
        assert not low <= np.sum(residual ** 2) / other ** 2 <= high, key
    assert np.array_equal(result["2:c"], base["2:c"])  # sent by no client: no noise, no change


def test_the_server_clips_an_update_its_client_did_not():
    base = {"0:a": np.zeros(100, np.float32)}
    big = ClientUpdate(0, {"0:a": np.full(100, 5.0, np.float32)}, num_examples=1, base=base)
    quiet = with_client_dp(masked_fedavg, clip=1.0, noise=1e-9, rng=np.random.default_rng(0))
    assert update_norm(quiet(base, [big]).global_state, base) == pytest.approx(1.0, rel=1e-5)


def oracle_epsilons(noise: float, rounds: int, delta: float) -> list[float]:
    """ε after each round: the exact Gaussian mechanism's (an independent oracle for PLD)."""
    return [exact_gaussian_epsilon(noise, k, delta) for k in range(1, rounds + 1)]


def run_federation(tmp_path, spy: list | None = None, **settings: object) -> list[dict]:
    """Three in-process sites, the real ServerApp and ClientApp; ``spy`` gets (sent, returned)
    arrays of every train message."""
    run = {**RUN, "results-dir": str(tmp_path), "run-name": "run", "strategy": "last", **settings}

    def app(msg, context):
        reply = client_app(msg, context)
        if spy is not None and msg.metadata.message_type == MessageType.TRAIN:
            spy.append((from_record(msg.content["arrays"]), from_record(reply.content["arrays"])))
        return reply

    grid = InProcessGrid(app, [{"partition-id": i, "num-partitions": 3} for i in range(3)], run)
    server_app(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run))
    return [json.loads(line) for line in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]


def test_a_run_records_the_accountants_epsilon_per_round_and_stops_before_its_cap(tmp_path, caplog):
    """z = 2, δ = 1e-3, 3 rounds planned; the cap lies between ε after 2 and after 3 rounds, so two
    rounds run, each recording dp-accounting's ε, then one line says the budget is spent, and the
    checkpoint and final adapters of round 2 are kept, the run counted as finished. Every site's
    reply is clipped to dp-clip (a clip this small binds every update: each reply's norm is the clip)."""
    noise, delta, clip = 2.0, 1e-3, 1e-3
    expected = oracle_epsilons(noise, 3, delta)
    cap = (expected[1] + expected[2]) / 2
    spy: list = []
    with caplog.at_level(logging.WARNING, logger="flwr"):
        rounds = run_federation(tmp_path, spy, **{"num-server-rounds": 3, "dp": "client", "dp-noise": noise,
                                                  "dp-delta": delta, "dp-clip": clip, "dp-max-epsilon": cap})
    assert "epsilon" not in rounds[0]  # round 0, the initial evaluation, trains nothing and spends no ε
    rounds = rounds[1:]
    assert [r["epsilon"] for r in rounds] == pytest.approx(expected[:2], rel=0.01)
    assert all(r["epsilon-rdp"] > r["epsilon"] for r in rounds)  # RDP, recorded beside, is looser
    assert [r["aggregated"] for r in rounds] == [True, True]
    stops = [r.getMessage() for r in caplog.records if "Privacy budget spent" in r.getMessage()]
    assert len(stops) == 1 and "round 3" in stops[0]
    assert json.loads((tmp_path / "run" / "checkpoint" / "state.json").read_text())["round"] == 2
    assert (tmp_path / "run" / "adapters.safetensors").exists()
    assert json.loads((tmp_path / "run" / "stopped.json").read_text())["after-round"] == 2
    assert incomplete(tmp_path / "run", 3) is None  # finished as planned by its budget: not resumed
    assert len(spy) == 6 and all(clip * (1 - 1e-3) <= update_norm(up, sent) <= clip for sent, up in spy)


def test_the_noise_from_dp_epsilon_spends_it_over_the_planned_rounds():
    privacy = PrivacySettings(mode="client", epsilon=3.0)
    accountant = ClientAccountant.plan(privacy, num_sites=50, num_rounds=10)
    assert accountant.delta == pytest.approx(1 / 500)
    assert 0.99 * 3.0 <= oracle_epsilons(accountant.noise, 10, 1 / 500)[-1] <= 3.0
    assert accountant.cap == 3.0 and accountant.allows(10) and not accountant.allows(11)


@pytest.mark.parametrize(("privacy", "message"), [
    (PrivacySettings(mode="client", delta=0.5),
     r"^dp-delta = 0.5 is not below 1/n = 0.333 \(n = 3 sites\)"),
    (PrivacySettings(mode="client", noise=0.5, max_epsilon=1.0),
     r"^dp-max-epsilon = 1.0 is below the ε = \d+\.?\d* that one round with dp-noise = 0.5 spends"),
    (PrivacySettings(mode="client", noise=0.5, epsilon=1.0),
     r"^dp-epsilon = 1.0 is below the ε = \d+\.?\d* that one round"),
])
def test_a_budget_that_cannot_hold_is_refused_in_one_line(privacy, message):
    with pytest.raises(ValueError, match=message):
        ClientAccountant.plan(privacy, num_sites=3, num_rounds=3)


def test_the_server_refuses_a_bad_delta_before_round_1(tmp_path):
    with pytest.raises(ConfigError, match=r"^Invalid run configuration: dp-delta = 0.4 is not below 1/n"):
        run_federation(tmp_path, **{"dp": "client", "dp-delta": 0.4})
    assert not (tmp_path / "run" / "rounds.jsonl").exists()


@pytest.mark.parametrize(("aggregation", "extra", "why"), [
    ("fedpia", {}, "permutes and weights each site's un-noised update"),
    ("sima", {}, "gradient features"),
    ("local", {}, "no aggregate to noise"),
    ("group-oracle", {"client-groups": "0,1"}, "per-group means"),
])
def test_an_aggregation_dp_client_cannot_wrap_is_refused_in_one_line(aggregation, extra, why):
    with pytest.raises(ConfigError, match=rf"^dp = 'client' does not work with aggregation = "
                                          rf"'{aggregation}': .*{why}[^\n]*$"):
        RunConfig.from_mapping({**RUN, "dp": "client", "aggregation": aggregation, **extra})
    RunConfig.from_mapping({**RUN, "aggregation": aggregation, **extra})  # fine without dp
