"""PQ-LoRA (FedMosaic paper §4.2, A.1-A.4): the two theorems, block-wise attachment
(Eq. 7), the weight alignment of a larger model (Eq. 8, A.4) and a short run with two model sizes
in which only P and Q travel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Context, Message, RecordDict
from torch import nn

import tasks
from client_app.app import app as client_app
from flower_compat.inprocess import InProcessGrid
from server_app.app import app as server_app
from strategies.records import from_record
from tasks.mosaic import MosaicLinear, block_layers
from tasks.mosaic.align import _capture, _rows, public_samples
from tasks.mosaic.modules import orthonormal, seeded_generator
from tests.client_app.test_config_node import RUN
from tests.helpers.runs import trained_rounds


def _pq(d_in: int = 24, d_out: int = 20, rank: int = 4, seed: int = 0) -> MosaicLinear:
    return MosaicLinear(nn.Linear(d_in, d_out), "pq", rank, gated=False, name="site", seed=seed)


def test_theorem_2_averaging_p_gives_zero_aggregation_error_while_lora_a_and_b_do_not():
    module = _pq()
    a, b = module.pq_A.double(), module.pq_B.double()
    gen = torch.Generator().manual_seed(1)
    ps = [torch.randn(4, 4, generator=gen, dtype=torch.float64) for _ in range(5)]
    ideal = torch.stack([b @ p @ a for p in ps]).mean(0)
    assert torch.allclose(b @ torch.stack(ps).mean(0) @ a, ideal, atol=1e-6, rtol=0)
    # the module itself: averaging P and Q gives the average of the clients' adapter outputs
    qs = [torch.randn(4, generator=gen) for _ in ps]
    x = torch.randn(7, 24, generator=gen)
    outputs = []
    for p, q in zip(ps, qs, strict=True):
        module.mosaic_local.P.data.copy_(p.float())
        module.mosaic_local.Q.data.copy_(q)
        outputs.append(module.delta(x))
    module.mosaic_local.P.data.copy_(torch.stack(ps).mean(0).float())
    module.mosaic_local.Q.data.copy_(torch.stack(qs).mean(0))
    assert torch.allclose(module.delta(x), torch.stack(outputs).mean(0), atol=1e-5)
    # conventional LoRA: clients' own A_i, B_i averaged separately
    a_s = [torch.randn(4, 24, generator=gen, dtype=torch.float64) for _ in range(5)]
    b_s = [torch.randn(20, 4, generator=gen, dtype=torch.float64) for _ in range(5)]
    lora_ideal = torch.stack([bi @ ai for ai, bi in zip(a_s, b_s, strict=True)]).mean(0)
    lora_error = (torch.stack(b_s).mean(0) @ torch.stack(a_s).mean(0) - lora_ideal).abs().max()
    assert lora_error > 1e-2


@pytest.mark.parametrize("rank", [2, 4, 6])
def test_theorem_1_orthonormal_a_and_b_span_r_squared_dimensions(rank):
    module = _pq(rank=rank, seed=rank)
    a, b = module.pq_A.double(), module.pq_B.double()
    assert torch.allclose(a @ a.T, torch.eye(rank, dtype=torch.float64), atol=1e-6)  # Eq. 20
    assert torch.allclose(b.T @ b, torch.eye(rank, dtype=torch.float64), atol=1e-6)
    outer = torch.stack([torch.outer(b[:, i], a[j]).reshape(-1) for i in range(rank) for j in range(rank)])
    assert int(torch.linalg.matrix_rank(outer)) == rank * rank


def test_pq_starts_at_zero_so_the_adapter_starts_as_the_pretrained_layer():
    module = _pq()
    x = torch.randn(3, 24)
    assert torch.equal(module(x), module.base(x))
    assert not module.pq_A.requires_grad and "pq_A" not in dict(module.named_parameters())


def test_eq7_block_layers():
    assert block_layers(13, 4) == [2, 5, 8, 12]  # I_k = 3, 6, 9, 13 (1-based)
    assert block_layers(16, 4) == [3, 7, 11, 15]  # official code's example
    assert block_layers(4, 4) == [0, 1, 2, 3]
    assert block_layers(13, 1) == [12]
    with pytest.raises(ValueError, match="num-blocks = 5 must be an int in 1..4"):
        block_layers(4, 5)


def test_only_block_layers_carry_p_and_q_and_their_names_do_not_depend_on_the_size():
    base = tasks.build_model(tasks.ModelSpec("tiny-vilt", adapter="pq-lora", num_blocks=2), 13)
    state = tasks.get_layer_state(base, range(4))
    assert {tasks.layer_of_key(k) for k in state} == {1, 3}
    assert all(k.endswith((".P", ".Q")) for k in state)
    large = tasks.build_model(tasks.ModelSpec("tiny-vilt", adapter="pq-lora", num_blocks=2, size="large"), 13)
    large_state = tasks.get_layer_state(large, range(4))
    assert {k: v.shape for k, v in large_state.items()} == {k: v.shape for k, v in state.items()}


def test_alignment_keeps_a_and_b_orthonormal_fits_a_by_mse_and_is_the_same_on_every_client():
    pivot = tasks.build_model(tasks.ModelSpec("tiny-vilt", adapter="pq-lora"), 13)
    aligned = tasks.build_model(tasks.ModelSpec("tiny-vilt", adapter="pq-lora", size="large"), 13)
    again = tasks.build_model(tasks.ModelSpec("tiny-vilt", adapter="pq-lora", size="large"), 13)
    samples = public_samples(0)
    mine, ref = _capture(aligned, samples), _capture(pivot, samples)  # inputs do not depend on A (P = 0)
    pivot_sites = {m.canonical: m for m in pivot.modules() if isinstance(m, MosaicLinear)}
    again_sites = {m.canonical: m for m in again.modules() if isinstance(m, MosaicLinear)}
    for module in (m for m in aligned.modules() if isinstance(m, MosaicLinear)):
        a, b, r = module.pq_A.double(), module.pq_B.double(), module.rank
        assert a.shape[1] == 48 or b.shape[0] == 48  # the large model's width
        assert torch.allclose(a @ a.T, torch.eye(r, dtype=torch.float64), atol=1e-5)
        assert torch.allclose(b.T @ b, torch.eye(r, dtype=torch.float64), atol=1e-5)
        assert torch.equal(module.pq_A, again_sites[module.canonical].pq_A)
        assert torch.equal(module.pq_B, again_sites[module.canonical].pq_B)
        x, xp = _rows(mine[module.canonical][0], ref[module.canonical][0])
        target = xp @ pivot_sites[module.canonical].pq_A.double().T
        fitted = ((x @ a.T - target) ** 2).mean()
        unaligned_a = orthonormal(r, a.shape[1], seeded_generator(0, module.canonical)).double()
        unaligned = ((x @ unaligned_a.T - target) ** 2).mean()
        assert fitted < 0.5 * unaligned, module.canonical


def test_a_run_with_two_model_sizes_sends_only_p_and_q_and_logs_both_sizes_accuracy(tmp_path):
    """Two rounds, three tiny-vilt clients (base, large, base) with SIMA + PQ-LoRA."""
    uploads: list[dict[str, np.ndarray]] = []

    def watching(msg: Message, ctx: Context) -> Message:
        reply = client_app(msg, ctx)
        if msg.metadata.message_type == "train" and not reply.has_error():
            uploads.append(from_record(reply.content["arrays"]))
        return reply

    run = {**RUN, "strategy": "all", "budgets": "4", "aggregation": "sima", "adapter": "pq-lora",
           "model-sizes": "base,large", "eval-others": True, "local-steps": 2, "sima-freq": 1,
           "results-dir": str(tmp_path), "run-name": "run"}
    grid = InProcessGrid(watching, [{"partition-id": i, "num-partitions": 3} for i in range(3)], run)
    server_app(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run))
    rounds = trained_rounds(tmp_path / "run" / "rounds.jsonl")
    assert len(rounds) == 2 and all(r["aggregated"] and r["failures"] == 0 for r in rounds)
    assert len(uploads) == 6
    assert all(key.endswith((".P", ".Q")) for upload in uploads for key in upload)
    assert all(v.shape in ((8, 8), (8,)) for upload in uploads for v in upload.values())
    rows = trained_rounds(tmp_path / "run" / "clients.jsonl")
    sizes = {r["partition-id"]: r["evaluate"]["model-size"] for r in rows}
    assert sizes == {0: 0, 1: 1, 2: 0}
    for row in rows:
        assert 0.0 <= row["evaluate"]["accuracy"] <= 1.0
        if row["round"] == 1:  # Others: the final model's, evaluated in the last round only
            assert "others-accuracy" not in row["evaluate"]
            continue
        assert 0.0 <= row["evaluate"]["others-accuracy"] <= 1.0
        assert row["evaluate"]["others-num-examples"] == 16  # the two other clients' 8 test samples
        assert len(row["train"]["sima-grad"]) == 13 * 32  # vocabulary x the base model's width
