"""SIMA (FedMosaic paper §4.1, Eq. 3-5 and Eq. 9): the client's decayed last-layer
gradient, the server's similarity weights (planted task groups), the gated local + global branch
pair, the client state kept across rounds, and the one-line settings errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from flwr.app import ConfigRecord, Message, RecordDict

import tasks
from client_app.app import app as client_app
from flower_compat.inprocess import InProcessGrid
from methods import AGGREGATIONS
from methods.sima.server import client_weights, sima, similarity_matrix
from methods.sima.tracker import SimaTracker, column_normalised, last_layer_gradient
from settings import ConfigError, RunConfig, default_config
from strategies.aggregation import ClientUpdate
from strategies.records import from_record, to_record
from tasks.mosaic import GATE, GLOBAL, LOCAL
from tests.client_app.test_config_node import RUN


@pytest.fixture(scope="module")
def frozen():
    return tasks.build_model(tasks.ModelSpec("tiny-vilt", adapter="layer", seed=0), 13)


@pytest.fixture(scope="module")
def synthetic():
    return tasks.load_partition("synthetic", 0, 1, "iid", seed=0)


def test_the_closed_form_gradient_is_autograd_of_a_zero_head_over_the_whole_vocabulary(frozen, synthetic):
    batch = synthetic.train[:6]
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(0)
        features = frozen.features(frozen.embed(frozen.collate(batch))).double()
    head = torch.zeros(13, features.shape[1], dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([s.target for s in batch])
    F.cross_entropy(features @ head.T, labels).backward()
    np.testing.assert_allclose(last_layer_gradient(frozen, batch), head.grad.reshape(-1).numpy(), atol=1e-10)


def test_the_decayed_gradient_is_the_eq4_ema_of_the_round_mean_of_every_fth_batch(frozen, synthetic):
    batches = [synthetic.train[i * 4:(i + 1) * 4] for i in range(7)]
    previous = np.full(13 * 32, 0.1)
    tracker = SimaTracker(frozen, ema=0.3, freq=3, previous=previous)
    for step, batch in enumerate(batches):
        tracker(step, batch)
    round_mean = np.mean([last_layer_gradient(frozen, batches[step]) for step in (0, 3, 6)], axis=0)
    assert tracker.samples_taken == 3
    np.testing.assert_allclose(tracker.vector, 0.7 * previous + 0.3 * round_mean, atol=1e-12)
    first = SimaTracker(frozen, ema=0.3, freq=3)
    for step, batch in enumerate(batches):
        first(step, batch)
    np.testing.assert_allclose(first.vector, round_mean, atol=1e-12)


def test_the_sent_vector_s_cosine_is_the_official_mean_of_per_column_cosines():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 5, 7))
    a[:, 0] *= 1e3  # one feature of large magnitude: it would dominate a flat cosine
    per_column = np.mean([a[:, j] @ b[:, j] / np.linalg.norm(a[:, j]) / np.linalg.norm(b[:, j])
                          for j in range(7)])
    sim = similarity_matrix(np.stack([column_normalised(m.reshape(-1), 5) for m in (a, b)]))
    assert sim[0, 1] == pytest.approx(per_column, abs=1e-12)


def _group_vectors(frozen, synthetic) -> tuple[np.ndarray, list[int]]:
    """Six clients: three ask only colour questions, three only shape questions (disjoint data)."""
    by_type = {t: [s for s in synthetic.train if s.qtype == t] for t in ("color", "shape")}
    vectors, groups = [], []
    for group, qtype in enumerate(("color", "shape")):
        for client in range(3):
            own = by_type[qtype][client * 32:(client + 1) * 32]
            tracker = SimaTracker(frozen, ema=0.5, freq=1)
            for step in range(4):
                tracker(step, own[step * 8:(step + 1) * 8])
            vectors.append(tracker.shared())
            groups.append(group)
    return np.stack(vectors), groups


def test_planted_groups_within_group_cosines_exceed_every_between_group_cosine(frozen, synthetic):
    vectors, groups = _group_vectors(frozen, synthetic)
    sim = similarity_matrix(vectors)
    same = np.equal.outer(groups, groups)
    off_diagonal = ~np.eye(len(groups), dtype=bool)
    assert sim[same & off_diagonal].min() > sim[~same].max()


def test_planted_groups_get_block_weights_end_to_end_from_client_gradients_to_models(frozen, synthetic):
    """Client i sends state e_i (one-hot): its customised model from `sima` is its weight row."""
    vectors, groups = _group_vectors(frozen, synthetic)
    n = len(groups)
    updates = [ClientUpdate(node_id=i, state={"0:w": np.eye(n)[i]}, num_examples=32,
                            metrics={"sima-grad": [float(v) for v in vectors[i]]}) for i in range(n)]
    result = sima({"0:w": np.zeros(n)}, updates, tau=0.5)  # the official temperature
    weights = np.stack([result.personal[i]["0:w"] for i in range(n)])
    same = np.equal.outer(groups, groups) & ~np.eye(n, dtype=bool)
    assert np.all(np.diag(weights) == 0)
    # uniform over the 5 others would give the 2 same-group clients 0.4 of the weight
    assert (weights * same).sum(axis=1).min() > 0.6


def test_small_tau_gives_each_client_the_average_of_its_own_group_without_itself():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(2, 50))
    groups = [0, 0, 0, 1, 1, 1, 1]
    states = [{"0:w": rng.normal(size=(3, 4)).astype(np.float32)} for _ in groups]
    updates = [ClientUpdate(node_id=10 + i, state=states[i], num_examples=5 + i,
                            metrics={"sima-grad": [float(v) for v in centres[g]]})
               for i, g in enumerate(groups)]
    result = sima({"0:w": np.zeros((3, 4), np.float32)}, updates, tau=0.01)
    for i, g in enumerate(groups):
        others = [states[j]["0:w"] for j, h in enumerate(groups) if h == g and j != i]
        np.testing.assert_allclose(result.personal[10 + i]["0:w"], np.mean(others, axis=0), atol=1e-3)
        with_self = np.mean(others + [states[i]["0:w"]], axis=0)
        assert np.abs(result.personal[10 + i]["0:w"] - with_self).max() > 1e-2  # own model excluded
    mean = np.average([s["0:w"] for s in states], axis=0, weights=[u.num_examples for u in updates])
    np.testing.assert_allclose(result.global_state["0:w"], mean, atol=1e-6)  # shared: masked FedAvg
    assert AGGREGATIONS["sima"].server_step() is sima


def test_weights_are_a_softmax_over_the_other_clients_and_a_missing_vector_gets_the_mean():
    sim = similarity_matrix(np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]]))
    w = client_weights(sim, tau=0.5)
    np.testing.assert_allclose(w.sum(1), 1.0)
    assert np.all(np.diag(w) == 0)
    np.testing.assert_allclose(w[0, 1] / w[0, 2], np.exp((sim[0, 1] - sim[0, 2]) / 0.5))
    states = [{"0:w": np.full(2, float(i), np.float32)} for i in range(3)]
    updates = [ClientUpdate(i, states[i], 1, {"sima-grad": [1.0, float(i)]} if i else {}) for i in range(3)]
    result = sima({"0:w": np.zeros(2, np.float32)}, updates)
    np.testing.assert_allclose(result.personal[0]["0:w"], result.global_state["0:w"])
    assert result.personal[1]["0:w"][0] == pytest.approx(2.0, abs=0.5)  # mostly client 2's model


def test_gated_module_is_eq9_global_frozen_local_and_gate_trained(synthetic):
    model = tasks.build_model(tasks.ModelSpec("tiny-vilt", adapter="lora", gated=True), 13)
    module = model.get_submodule("backbone.encoder.layer.0.attention.attention.query")
    assert float(torch.sigmoid(getattr(module, GATE)).detach()) == 0.5  # β̃ starts at 0.5
    received = {k: np.random.default_rng(1).normal(size=v.shape).astype(np.float32)
                for k, v in tasks.get_layer_state(model, range(4)).items()}
    before_local = tasks.get_layer_state(model, range(4))
    tasks.set_layer_state(model, received)  # goes into the frozen global branch
    for key, value in before_local.items():
        np.testing.assert_array_equal(tasks.get_layer_state(model, range(4))[key], value)
    x = torch.randn(2, 5, 32)
    beta = torch.sigmoid(getattr(module, GATE))
    local, glob = getattr(module, LOCAL), getattr(module, GLOBAL)
    expected = module.base(x) + (1 - beta) * local(x, None, None) + beta * glob(x, None, None)
    assert torch.allclose(module(x), expected)
    global_before = {n: p.detach().clone() for n, p in model.named_parameters() if f".{GLOBAL}." in n}
    tasks.train(model, synthetic.train[:16], np.ones(4, bool), steps=2, batch_size=8, lr=1e-2)
    for name, value in global_before.items():
        assert torch.equal(dict(model.named_parameters())[name], value), name
    assert float(getattr(module, GATE).detach()) != 0.0
    sent = tasks.get_layer_state(model, range(4))
    assert any(not np.array_equal(sent[k], before_local[k]) for k in sent)
    assert set(tasks.get_personal_state(model)) >= {n for n in dict(model.named_parameters()) if GATE in n}


def test_the_client_keeps_its_vector_and_local_branch_across_rounds(tmp_path):
    run = {**RUN, "aggregation": "sima", "adapter": "lora", "sima-freq": 1}
    grid = InProcessGrid(client_app, [{"partition-id": 0, "num-partitions": 3}], run)
    model = tasks.build_model(tasks.ModelSpec("tiny-vilt", adapter="lora", gated=True), 1)
    record = to_record(tasks.get_layer_state(model, range(4)))

    def train(server_round: int, steps: int = 2, run_dir: str = str(tmp_path)) -> dict:
        content = RecordDict({"arrays": record, "config": ConfigRecord({
            "server-round": server_round, "run-dir": run_dir, "mask": [0, 1], "local-steps": steps,
            "batch-size": 4, "lr": 1e-2, "head-lr": 1e-2, "weight-decay": 0.0})})
        message = Message(content=content, message_type="train", dst_node_id=100)
        reply = client_app(message, grid.contexts[100])
        assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
        return {"vector": np.array(reply.content["metrics"]["sima-grad"]),
                "sent": from_record(reply.content["arrays"])}

    # round 2 sees two more batches than round 1, so its round mean differs from round 1's
    first, second, repeated = train(1), train(2, steps=4), train(2, steps=4)
    fresh = train(2, steps=4, run_dir=str(tmp_path / "fresh"))  # no stored vector: the round mean alone
    # (the sent vector is column-normalised, so the EMA moves it only slightly; every call is deterministic)
    assert not np.array_equal(second["vector"], fresh["vector"])  # round 2 continued the EMA ...
    np.testing.assert_array_equal(second["vector"], repeated["vector"])  # ... from round 1's stored one
    for key, value in second["sent"].items():  # and from round 1's local branch, not the received one
        np.testing.assert_array_equal(repeated["sent"][key], value)
    assert any(not np.array_equal(second["sent"][k], first["sent"][k]) for k in first["sent"])


BAD = {
    "sima with layer": ({"aggregation": "sima", "adapter": "layer"},
                        "adapter = 'layer' does not work with aggregation = 'sima'; "
                        "use lora or pq-lora"),
    "tau": ({"sima-tau": 0.0}, "sima-tau = 0.0 is out of range"),
    "ema": ({"sima-ema": 1.5}, "sima-ema = 1.5 is out of range"),
    "freq": ({"sima-freq": 0}, "sima-freq = 0 is out of range"),
    "blocks": ({"num-blocks": 0}, "num-blocks = 0 is out of range"),
    "sizes": ({"model-sizes": "base,huge"},
              "model-sizes = 'base,huge' must list sizes among base, large (model = 'minilm-effnet'), "
              "comma-separated"),
    "mixed lora": ({"model-sizes": "base,large"},
                   "model-sizes = 'base,large' mixes sizes, which only adapter = 'pq-lora' can share "
                   "(got 'lora')"),
    "adapter": ({"adapter": "pq"}, "adapter = 'pq' is unknown; choose one of lora, layer, pq-lora"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_fedmosaic_settings_stop_with_one_line(case):
    values, message = BAD[case]
    with pytest.raises(ConfigError) as err:
        RunConfig.from_mapping({**default_config(), **values})
    assert str(err.value) == message and "\n" not in str(err.value)


def test_node_model_size_errors_are_one_line():
    from client_app.node import node_settings

    config = RunConfig.from_mapping({**RUN, "adapter": "pq-lora"})
    assert node_settings({"model-size": "large"}, config).model_size == "large"
    assert node_settings({"partition-id": 1, "num-partitions": 2},
                         RunConfig.from_mapping({**RUN, "adapter": "pq-lora", "model-sizes": "base,large"})
                         ).model_size == "large"
    with pytest.raises(ConfigError, match=r"^node config model-size = 'huge' must list sizes among base"):
        node_settings({"model-size": "huge"}, config)
    with pytest.raises(ConfigError, match=r"^node config model-size = 'large' needs adapter = 'pq-lora'"):
        node_settings({"model-size": "large"}, RunConfig.from_mapping(RUN))
