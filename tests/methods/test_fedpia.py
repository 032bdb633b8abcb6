"""FedPIA: oracles for server-level PIA (planted permutations, masks, integration forms),
client-level PIA (function unchanged, planted permutation recovered from activations, the
combined forward) and the run wiring (settings, two in-process runs on tiny-vilt, resume)."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import torch
from flwr.app import Context, Message, RecordDict
from safetensors.numpy import load_file
from scipy.spatial.distance import cdist

import tasks
from client_app.app import app as client_app
from client_app.personal import LOCAL, load_local_adapters, load_personal, save_personal
from flower_compat.inprocess import InProcessGrid
from methods.fedpia import client as client_app_pia  # the hook module
from methods.fedpia import combine as client_pia
from methods.fedpia.alignment import lora_pairs, match_neurons, neuron_supports, permute_pair
from methods.fedpia.server import fedpia, integrate_adapter, integration_passes
from server_app.app import aggregator_for, build_strategy
from server_app.app import app as server_app
from server_app.results import Recorder
from settings import ConfigError, RunConfig, default_config
from strategies.aggregation import ClientUpdate
from strategies.aggregation.masked import masked_fedavg
from strategies.records import from_record
from tests.client_app.test_config_node import RUN
from tests.helpers.runs import trained_rounds
from tests.project.test_resume_inprocess import assert_same

R, D_IN, D_OUT, K = 8, 32, 24, 5


def relative_error(a: np.ndarray, b: np.ndarray, a_ref: np.ndarray, b_ref: np.ndarray) -> float:
    return float(np.linalg.norm(b @ a - b_ref @ a_ref) / np.linalg.norm(b_ref @ a_ref))


def planted(eps: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list, list]:
    """Global (A, B) and K clients A_k = P_k A + ε, B_k = B P_kᵀ + ε."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(R, D_IN)), rng.normal(size=(D_OUT, R))
    perms = [rng.permutation(R) for _ in range(K)]
    noise = np.random.default_rng(seed + 1)
    a_k = [a[p] + eps * noise.normal(size=a.shape) for p in perms]
    b_k = [b[:, p] + eps * noise.normal(size=b.shape) for p in perms]
    return a, b, a_k, b_k


# ---------------------------------------------------------------- server-level PIA
def test_planted_permutations_give_back_the_adapter_where_fedavg_fails():
    a, b, a_k, b_k = planted(0.0)
    pia_a, pia_b = integrate_adapter(a_k, b_k, [1] * K)
    assert relative_error(pia_a, pia_b, a, b) < 1e-6
    assert relative_error(np.mean(a_k, 0), np.mean(b_k, 0), a, b) > 0.5


def test_with_noise_the_error_scales_with_epsilon():
    errors = []
    for eps in (1e-4, 1e-3, 1e-2):
        a, b, a_k, b_k = planted(eps)
        errors.append(relative_error(*integrate_adapter(a_k, b_k, [1] * K), a, b))
    assert errors[-1] < 0.05
    for small, large in zip(errors, errors[1:], strict=False):
        assert 5 < large / small < 20, errors


def test_the_papers_unnormalised_integration_shrinks_the_adapter_and_normalised_does_not():
    a, b, a_k, b_k = planted(0.0)
    paper_a, paper_b = integrate_adapter(a_k, b_k, [1] * K, gamma=0.1, integration="paper")
    norm_a, norm_b = integrate_adapter(a_k, b_k, [1] * K, gamma=0.1)
    assert np.linalg.norm(paper_b @ paper_a) < 0.9 * np.linalg.norm(b @ a)
    assert relative_error(norm_a, norm_b, a, b) < 1e-6
    # gamma = 0 and equal distances: the paper's form is the mean of the aligned adapters too
    same_a, same_b = integrate_adapter(a_k, b_k, [1] * K, gamma=0.0, integration="paper")
    assert relative_error(same_a, same_b, a, b) < 1e-6


def test_normalised_weights_favour_clients_near_the_fedavg_initialisation():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(R, D_IN)), rng.normal(size=(D_OUT, R))
    a_k, b_k = [a, a, a + 1.0], [b, b, b]  # the third client is far away
    near = integrate_adapter(a_k, b_k, [1] * 3, gamma=5.0)[0]
    mean = integrate_adapter(a_k, b_k, [1] * 3, gamma=0.0)[0]
    np.testing.assert_allclose(mean, a + 1 / 3, atol=1e-12)
    assert np.abs(near - a).max() < 1e-3  # exp(-5 d) with d = sqrt(R * D_IN) ≈ 16 puts ~0 on it


def lora_state(seed: int, layers=range(4), scale: float = 1.0) -> dict[str, np.ndarray]:
    """A shared state with one LoRA module per layer, plus a non-LoRA array in layer 3."""
    rng = np.random.default_rng(seed)
    state = {}
    for layer in layers:
        for name, shape in (("lora_A", (R, D_IN)), ("lora_B", (D_OUT, R))):
            value = scale * rng.normal(size=shape)
            state[f"{layer}:m{layer}.{name}.default.weight"] = value.astype(np.float32)
    if 3 in layers:
        state["3:m3.norm.weight"] = rng.normal(size=D_OUT).astype(np.float32)
    return state


def permuted(state: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """Every LoRA pair of `state` with its neurons in a random order; other arrays unchanged."""
    rng, out = np.random.default_rng(seed), dict(state)
    for a_key, b_key in lora_pairs(state):
        out[a_key], out[b_key] = permute_pair(state[a_key], state[b_key], rng.permutation(R))
    return out


def test_only_the_layers_a_client_trained_are_aligned_and_averaged_over_their_clients():
    base = lora_state(0)
    full = [permuted(base, 10 + k) for k in range(3)]
    layers = [(0, 1), (1, 2), (1, 3)]
    updates = [ClientUpdate(k, {key: v for key, v in full[k].items() if int(key[0]) in layers[k]}, 10 + k)
               for k in range(3)]
    start = lora_state(99)
    result = fedpia(start, updates).global_state
    for key in start:
        if key.startswith("0:"):
            np.testing.assert_allclose(result[key], full[0][key], rtol=1e-6)  # client 0's alone
        if key.startswith("2:"):
            np.testing.assert_allclose(result[key], full[1][key], rtol=1e-6)  # client 1's alone
    for layer in (1, 3):  # trained by several clients with different neuron orders: function kept
        a_key, b_key = f"{layer}:m{layer}.lora_A.default.weight", f"{layer}:m{layer}.lora_B.default.weight"
        assert relative_error(result[a_key], result[b_key], base[a_key], base[b_key]) < 1e-6
    expected = integrate_adapter([full[k]["1:m1.lora_A.default.weight"] for k in (0, 1, 2)],
                                 [full[k]["1:m1.lora_B.default.weight"] for k in (0, 1, 2)], [10, 11, 12])
    np.testing.assert_allclose(result["1:m1.lora_A.default.weight"], expected[0], rtol=1e-6)
    # a non-LoRA array (client 2 only) is masked FedAvg; nothing untrained moved
    fedavg = masked_fedavg(start, updates).global_state
    np.testing.assert_array_equal(result["3:m3.norm.weight"], fedavg["3:m3.norm.weight"])
    assert result.keys() == start.keys() and all(v.dtype == np.float32 for v in result.values())
    untouched = fedpia(start, [ClientUpdate(0, {}, 5)]).global_state
    assert all(np.array_equal(untouched[k], v) for k, v in start.items())


def test_without_server_alignment_fedpia_is_masked_fedavg():
    updates = [ClientUpdate(k, permuted(lora_state(0), k), 1 + k) for k in range(3)]
    got, fedavg = fedpia(lora_state(5), updates, align=False), masked_fedavg(lora_state(5), updates)
    assert all(np.array_equal(got.global_state[k], v) for k, v in fedavg.global_state.items())


def test_bad_fedpia_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match=r"^fedpia-gamma = -1.0 must be a number >= 0$"):
        fedpia({}, [], gamma=-1.0)
    with pytest.raises(ValueError, match=r"^fedpia-integration = 'mean' is unknown; choose one of "
                                         r"normalised, paper$"):
        fedpia({}, [], integration="mean")
    with pytest.raises(ValueError, match=r"^neuron supports must be two \(r, d\) arrays"):
        match_neurons(np.zeros((3, 2)), np.zeros((4, 2)))


# ---------------------------------------------------------------- client-level PIA (tiny-vilt)
@pytest.fixture(scope="module")
def vilt():
    partition = tasks.load_partition("synthetic", 0, 1, seed=0, max_train=16)
    return tasks.build_model(tasks.ModelSpec("tiny-vilt", seed=0), len(partition.labels)), partition.train


def random_adapters(model, seed: int) -> dict[str, np.ndarray]:
    """The model's LoRA state with random A and B (B is 0 at init, which would hide any order)."""
    rng = np.random.default_rng(seed)
    return {k: (0.3 * rng.standard_normal(v.shape)).astype(v.dtype)
            for k, v in tasks.get_layer_state(model, range(len(model.layer_names))).items()}


@torch.no_grad()
def outputs(model, samples, state) -> torch.Tensor:
    tasks.set_layer_state(model, state)
    model.eval()
    return model(model.collate(samples)).clone()


def test_aligning_an_adapter_never_changes_the_models_outputs(vilt):
    model, samples = vilt
    client, target = random_adapters(model, 1), random_adapters(model, 2)
    aligned, moved = dict(client), 0
    for a_key, b_key in lora_pairs(client):
        perm = match_neurons(neuron_supports(client[a_key], client[b_key]),
                             neuron_supports(target[a_key], target[b_key]))
        moved += int((perm != np.arange(len(perm))).any())
        aligned[a_key], aligned[b_key] = permute_pair(client[a_key], client[b_key], perm)
    assert moved == len(lora_pairs(client))  # every module really was reordered
    torch.testing.assert_close(outputs(model, samples, aligned), outputs(model, samples, client),
                               rtol=1e-5, atol=1e-5)
    # the client-side alignment of a global adapter is a reordering too
    tasks.set_layer_state(model, target)
    aligned_global = client_pia.align_global(model, target, client, samples[:8])
    torch.testing.assert_close(outputs(model, samples, aligned_global),
                               outputs(model, samples, target), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cost", ["activation", "weight"])
def test_client_alignment_recovers_a_planted_permutation_of_the_global_adapter(vilt, cost):
    model, samples = vilt
    received = random_adapters(model, 3)
    local = permuted(received, 4)
    noise = np.random.default_rng(5)
    noisy = {k: v + (1e-3 * noise.standard_normal(v.shape)).astype(v.dtype) for k, v in local.items()}
    tasks.set_layer_state(model, received)
    aligned = client_pia.align_global(model, received, noisy, samples[:8], cost=cost)
    assert aligned.keys() == local.keys()
    for key, value in local.items():
        np.testing.assert_array_equal(aligned[key], value, err_msg=key)


def test_the_default_models_conv_adapters_are_aligned_by_activation_too():
    """minilm-effnet's EfficientNet LoRA modules are Conv2d (A: r × c × k × k, B: c' × r × 1 × 1)."""
    partition = tasks.load_partition("synthetic", 0, 1, seed=0, max_train=8)
    model = tasks.build_model(tasks.ModelSpec("minilm-effnet", seed=0), len(partition.labels))
    received = random_adapters(model, 9)
    local = permuted(received, 10)
    assert any(v.ndim == 4 for v in received.values())
    tasks.set_layer_state(model, received)
    aligned = client_pia.align_global(model, received, local, partition.train[:8])
    for key, value in local.items():
        np.testing.assert_array_equal(aligned[key], value, err_msg=key)


def test_activation_supports_are_one_mean_activation_per_neuron_and_sample(vilt):
    model, samples = vilt
    state = random_adapters(model, 6)
    tasks.set_layer_state(model, state)
    (name, (a_key, _)), *_ = client_pia.lora_modules(state).items()
    acts = client_pia.activation_supports(model, samples[:5], {name: [state[a_key], 2 * state[a_key]]})
    first, doubled = acts[name]
    assert first.shape == (R, 5)
    np.testing.assert_allclose(doubled, 2 * first, rtol=1e-5)


def test_the_combined_forward_is_the_mean_of_the_local_and_frozen_adapters_and_is_undone(vilt):
    model, samples = vilt
    local, frozen = random_adapters(model, 7), random_adapters(model, 8)
    plain = outputs(model, samples, local)
    with client_pia.combined(model, local), torch.no_grad():  # frozen = local: ½ + ½ = the same
        torch.testing.assert_close(model(model.collate(samples)), plain, rtol=1e-5, atol=1e-5)
    name, (a_key, b_key) = next(iter(client_pia.lora_modules(local).items()))
    module = dict(model.named_modules())[name]
    x = torch.randn(2, 3, module.base_layer.in_features)
    s = module.lora_alpha["default"] / module.r["default"]

    def branch(state):
        return s * x @ torch.from_numpy(state[a_key]).T @ torch.from_numpy(state[b_key]).T

    with client_pia.combined(model, frozen):
        out = module(x)
        out.sum().backward()
    expected = module.base_layer(x) + 0.5 * branch(local) + 0.5 * branch(frozen)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert module.lora_A["default"].weight.grad is not None  # the local adapter trains
    model.zero_grad(set_to_none=True)
    torch.testing.assert_close(outputs(model, samples, local), plain)  # hooks and scale undone
    assert module.scaling["default"] == s


def test_the_upload_is_the_neuron_wise_mean():
    aligned, local = lora_state(1), lora_state(2)
    upload = client_pia.integrate(aligned, local)
    for key, value in upload.items():
        np.testing.assert_allclose(value, (aligned[key] + local[key]) / 2, rtol=1e-6)
        assert value.dtype == np.float32


# ---------------------------------------------------------------- settings
BAD = {
    "fedpia-gamma": (-0.5, "fedpia-gamma = -0.5 is out of range"),
    "fedpia-integration": ("sum", "fedpia-integration = 'sum' is unknown; choose one of normalised, paper"),
    "fedpia-level": ("none", "fedpia-level = 'none' is unknown; choose one of both, server, client"),
    "fedpia-client-cost": ("l1", "fedpia-client-cost = 'l1' is unknown; choose one of activation, weight"),
    "fedpia-samples": (0, "fedpia-samples = 0 is out of range"),
}


@pytest.mark.parametrize("key", sorted(BAD))
def test_a_bad_fedpia_setting_is_a_one_line_error_naming_it(key):
    value, message = BAD[key]
    with pytest.raises(ConfigError) as err:
        RunConfig.from_mapping({**default_config(), "aggregation": "fedpia", key: value})
    assert str(err.value) == message


def test_the_server_binds_the_fedpia_settings(tmp_path):
    values = {**default_config(), "aggregation": "fedpia", "fedpia-gamma": 0.25,
              "fedpia-integration": "paper", "fedpia-level": "client", "fedpia-iterations": 3}
    config = RunConfig.from_mapping(values)
    strategy = build_strategy(config, 6, Recorder(tmp_path / "run", 1, [f"l{i}" for i in range(6)]))
    assert strategy.aggregator.func is fedpia and strategy.aggregator.__name__ == "fedpia"
    assert strategy.aggregator.keywords == {"gamma": 0.25, "integration": "paper", "align": False,
                                            "iterations": 3}
    assert aggregator_for(RunConfig.from_mapping(default_config())) is masked_fedavg
    assert client_app_pia.uses_client_pia("lora", config.method_settings)
    server_only = RunConfig.from_mapping({**values, "fedpia-level": "server"}).method_settings
    assert not client_app_pia.uses_client_pia("lora", server_only)
    assert not client_app_pia.uses_client_pia("layer", config.method_settings)


# ---------------------------------------------------------------- runs (in process, tiny-vilt)
FEDPIA_RUN = {**RUN, "aggregation": "fedpia", "budgets": "4,4", "max-train-samples": 12,
              "fedpia-samples": 4}


def run_server(tmp_path, monkeypatch, **settings) -> tuple[InProcessGrid, dict, dict]:
    """One in-process run; returns its grid, what every client-level alignment started from, and
    every train upload, both by (round, partition id)."""
    calls: dict[tuple[int, int], dict] = {}
    uploaded: dict[tuple[int, int], dict] = {}
    current: list[tuple[int, int]] = []
    real_start, real_align = client_app_pia.start, client_pia.align_global

    def start(step, settings):
        current.append((step.server_round, step.setup.partition_id))
        return real_start(step, settings)

    def align_global(model, received, local, samples, cost="activation"):
        calls[current[-1]] = {"local": dict(local), "samples": len(samples), "cost": cost}
        return real_align(model, received, local, samples, cost)

    def recording(msg: Message, context: Context) -> Message:
        reply = client_app(msg, context)
        if msg.metadata.message_type == "train":
            key = (int(msg.content["config"]["server-round"]), int(context.node_config["partition-id"]))
            uploaded[key] = from_record(reply.content["arrays"])
        return reply

    monkeypatch.setattr(client_app_pia, "start", start)
    monkeypatch.setattr(client_pia, "align_global", align_global)
    run = {**FEDPIA_RUN, "results-dir": str(tmp_path), "run-name": "run", **settings}
    grid = InProcessGrid(recording, [{"partition-id": i, "num-partitions": 2} for i in range(2)],
                         run_config=run)
    server_app(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run))
    return grid, calls, uploaded


def rounds_of(tmp_path) -> list[dict]:
    return trained_rounds(tmp_path / "run" / "rounds.jsonl")


def stored_local(tmp_path, pid: int, server_round: int) -> dict[str, np.ndarray]:
    folder = tmp_path / "run" / "clients" / f"partition-{pid}"
    stored = load_file(folder / f"personal-{server_round}.safetensors")
    return {k.removeprefix(LOCAL): v for k, v in stored.items() if k.startswith(LOCAL)}


def sent_global(grid: InProcessGrid, server_round: int) -> dict[str, np.ndarray]:
    return next(from_record(m.content["arrays"]) for m in grid.sent if m.metadata.message_type == "train"
                and m.content["config"]["server-round"] == server_round)


def test_all_layers_with_fedpia_runs_both_levels_and_keeps_each_clients_own_adapter(tmp_path, monkeypatch):
    grid, calls, uploaded = run_server(tmp_path, monkeypatch, strategy="all")
    assert [(r["aggregated"], r["failures"]) for r in rounds_of(tmp_path)] == [(True, 0)] * 2
    assert sorted(calls) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert {c["samples"] for c in calls.values()} == {4}
    for pid in range(2):
        first, second = stored_local(tmp_path, pid, 1), stored_local(tmp_path, pid, 2)
        assert first.keys() == sent_global(grid, 1).keys() == second.keys()  # all: every layer
        # round 1 starts from the global (no local adapter yet), round 2 from its round-1 one
        assert all(np.array_equal(calls[1, pid]["local"][k], v) for k, v in sent_global(grid, 1).items())
        assert all(np.array_equal(calls[2, pid]["local"][k], v) for k, v in first.items())
        assert any(not np.array_equal(v, sent_global(grid, 2)[k]) for k, v in first.items())
        # the upload is the mean of the trained local adapter and the global one reordered
        np.testing.assert_equal(uploaded[1, pid], client_pia.integrate(sent_global(grid, 1), first))
        received = sent_global(grid, 2)
        for a_key, b_key in lora_pairs(received):
            up, local = uploaded[2, pid], second
            rest_a, rest_b = 2 * up[a_key] - local[a_key], 2 * up[b_key] - local[b_key]
            perm = match_neurons(neuron_supports(received[a_key], received[b_key]),
                                 neuron_supports(rest_a, rest_b))
            got_a, got_b = permute_pair(received[a_key], received[b_key], perm)
            np.testing.assert_allclose(rest_a, got_a, atol=1e-6)
            np.testing.assert_allclose(rest_b, got_b, atol=1e-6)


def test_f3ocus_with_fedpia_aligns_and_keeps_only_the_layers_each_client_trained(tmp_path, monkeypatch):
    _, calls, _ = run_server(tmp_path, monkeypatch, strategy="f3ocus",
                          **{"num-server-rounds": 1, "budgets": "2,1"})
    assert [(r["aggregated"], r["failures"]) for r in rounds_of(tmp_path)] == [(True, 0)]
    rows = trained_rounds(tmp_path / "run" / "clients.jsonl")
    masks = {row["partition-id"]: sorted(row["mask"]) for row in rows}
    assert sorted(len(m) for m in masks.values()) == [1, 2]
    for pid, mask in masks.items():
        assert sorted({int(k.partition(":")[0]) for k in stored_local(tmp_path, pid, 1)}) == mask
        assert sorted({int(k.partition(":")[0]) for k in calls[1, pid]["local"]}) == mask


def test_a_resumed_run_finds_each_clients_own_adapters_again(tmp_path, monkeypatch):
    run_server(tmp_path, monkeypatch, strategy="all", **{"num-server-rounds": 1})
    kept = [stored_local(tmp_path, pid, 1) for pid in range(2)]
    assert all(kept)
    # a new process: fresh node contexts, the server resumes from its round-1 checkpoint
    grid, calls, _ = run_server(tmp_path, monkeypatch, strategy="all",
                                **{"resume-from": str(tmp_path / "run")})
    assert sorted(calls) == [(2, 0), (2, 1)] and [r["round"] for r in rounds_of(tmp_path)] == [1, 2]
    for pid in range(2):
        assert kept[pid].keys() == sent_global(grid, 2).keys()
        assert all(np.array_equal(calls[2, pid]["local"][k], v) for k, v in kept[pid].items())


@pytest.mark.parametrize(("level", "cost"), [("server", "activation"), ("client", "weight")])
def test_the_table_5_ablations_run(tmp_path, monkeypatch, level, cost):
    """Server PIA only: no client alignment, the upload is the trained adapter itself; client PIA
    only (with weight supports here): the clients align, the server averages."""
    _, calls, uploaded = run_server(tmp_path, monkeypatch, strategy="all", **{
        "num-server-rounds": 1, "fedpia-level": level, "fedpia-client-cost": cost})
    assert [(r["aggregated"], r["failures"]) for r in rounds_of(tmp_path)] == [(True, 0)]
    assert sorted(uploaded) == [(1, 0), (1, 1)]
    if level == "server":
        assert not calls and not stored_local(tmp_path, 0, 1)
    else:
        assert sorted(calls) == [(1, 0), (1, 1)] and {c["cost"] for c in calls.values()} == {cost}


@pytest.mark.parametrize("place", ["run-dir", "state-dir", "context-state"])
def test_the_local_adapters_ride_with_the_personal_state_but_never_load_as_a_head(tmp_path, place):
    node = {"run-dir": {"partition-id": 1}, "state-dir": {"state-dir": str(tmp_path / "site")},
            "context-state": {}}[place]
    ctx = Context(run_id=1, node_id=7, node_config=node, state=RecordDict(), run_config={})
    run_dir = "" if place == "context-state" else str(tmp_path)
    head = {"head.weight": np.ones((2, 2), np.float32)}
    save_personal(ctx, head, 1, run_dir, local=lora_state(0, layers=[0]))
    save_personal(ctx, head, 2, run_dir)  # a round without client PIA keeps none
    assert load_personal(ctx, run_dir, before=2).keys() == head.keys()
    assert_same(load_local_adapters(ctx, run_dir, before=2), lora_state(0, layers=[0]))
    assert load_local_adapters(ctx, run_dir, before=3) == {}
    assert load_local_adapters(ctx, run_dir, before=1) == {}


def test_server_pia_on_the_default_model_takes_milliseconds_a_round():
    """Server-level PIA takes milliseconds a round at r = 8: the default model's 67 LoRA pairs, 5 clients."""
    model = tasks.build_model(tasks.ModelSpec("minilm-effnet", lora_rank=8, seed=0), 4)
    start = tasks.get_layer_state(model, range(len(model.layer_names)))
    rng = np.random.default_rng(0)
    updates = [ClientUpdate(k, {key: (v + 0.01 * rng.standard_normal(v.shape)).astype(v.dtype)
                                for key, v in start.items()}, 100) for k in range(5)]
    assert len(lora_pairs(start)) == 67
    seconds = []
    for _ in range(3):
        began = time.perf_counter()
        fedpia(start, updates)
        seconds.append(time.perf_counter() - began)
    print(f"server PIA, minilm-effnet r=8, 5 clients: {1e3 * min(seconds):.1f} ms a round")
    assert min(seconds) < 1.0


# ---------------------------------------------------------------------- fedpia-iterations
# Four clients hold the rank units of one adapter (A: 3 x 2, B: 2 x 3) in the planted orders below,
# each unit moved by its own training noise, so their neurons differ (a seeded search, noise 0.2).
PLANTED_ORDER = ([0, 2, 1], [0, 2, 1], [0, 1, 2], [1, 0, 2])  # client k's slot i holds common unit [k][i]
PLANTED_A = np.array([[[-0.14, -0.44], [-0.96, 0.48], [1.1, -0.86]],
                      [[0.0, -0.8], [-1.12, 1.22], [0.7, -1.46]],
                      [[0.26, -1.06], [0.62, -0.62], [-1.28, 0.24]],
                      [[0.9, -1.16], [0.24, -0.96], [-1.08, 0.8]]])
PLANTED_B = np.array([[[1.7, 0.94, 1.2], [0.32, 0.78, -0.38]],
                      [[1.12, 1.7, 1.56], [0.42, 0.18, -0.32]],
                      [[1.02, 1.72, 1.5], [0.48, -0.12, 0.74]],
                      [[1.06, 1.42, 1.48], [-0.82, 0.64, 0.68]]])


def _assignment_margin(source: np.ndarray, target: np.ndarray) -> float:
    """(second-best − best) / best transport cost over every assignment of the neurons (r! of
    them): how far the OT problem is from a tie."""
    cost = cdist(source, target)
    totals = sorted(cost[list(p), range(len(p))].sum() for p in itertools.permutations(range(len(cost))))
    return (totals[1] - totals[0]) / totals[0]


def test_one_pia_pass_misaligns_a_planted_case_that_iterating_to_a_fixed_point_recovers():
    """Aligned once to the FedAvg of the unaligned adapters (the paper's server step), the blended
    slots send two clients' units to other places than the rest; re-aligning to the integrated
    adapter until the assignment settles puts every client's units where the planted orders say.
    Every OT problem on both paths is at least 5 % away from a tie, so neither the CPU's summation
    order nor the solver's tie-breaking decides it: the outcome is checked for all 24 client
    orders."""
    inverse = [np.argsort(order) for order in PLANTED_ORDER]  # the planted alignment
    right_a = np.mean([a[i] for a, i in zip(PLANTED_A, inverse, strict=True)], axis=0)
    right_b = np.mean([b[:, i] for b, i in zip(PLANTED_B, inverse, strict=True)], axis=0)
    right = right_b @ right_a
    for clients in itertools.permutations(range(4)):
        a_list, b_list = [PLANTED_A[k] for k in clients], [PLANTED_B[k] for k in clients]
        global_a, global_b = np.mean(a_list, axis=0), np.mean(b_list, axis=0)  # pass 1's target
        passes = [(global_a, global_b), *integration_passes(a_list, b_list, [1] * 4, gamma=0.0)]
        assert len(passes) == 3  # pass 2 changes the assignment of pass 1, pass 3 finds it settled
        for a_glob, b_glob in passes:
            margins = [_assignment_margin(neuron_supports(a, b), neuron_supports(a_glob, b_glob))
                       for a, b in zip(a_list, b_list, strict=True)]
            assert min(margins) > 0.05
        once = integrate_adapter(a_list, b_list, [1] * 4, gamma=0.0)
        assert np.abs(once[1] @ once[0] - right).max() > 0.1 * np.abs(right).max()
        fixed = integrate_adapter(a_list, b_list, [1] * 4, gamma=0.0, iterations=5)
        np.testing.assert_allclose(fixed[1] @ fixed[0], right, atol=1e-9)
    assert fedpia({}, [], iterations=1).global_state == {}
    with pytest.raises(ValueError, match="fedpia-iterations = 0"):
        fedpia({}, [], iterations=0)
