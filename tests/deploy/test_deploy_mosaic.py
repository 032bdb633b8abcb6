"""FedMosaic on Flower's Deployment Engine (issue 16): sites of two model sizes, set per node
(``model-size``), run SIMA with PQ-LoRA; only P and Q travel and each size's accuracy is logged.

Its own federation (tests/helpers/deployment.py): the sites' node config names their model size, which a
LoRA run refuses, so it cannot share the budget test's federation. Two sites, one per size, and one
round are enough for every claim: its evaluate messages already carry the P and Q aggregated over
both sizes (the round trip of later rounds is the budget and fault tests' subject; several sites of
one size, tests/tasks/test_pq_lora.py). Each site more costs a SuperNode, a warm worker and a ClientApp
process per message, about 25 s of the suite's CPU.
"""

from __future__ import annotations

import pytest
from safetensors.numpy import load_file

from tests.helpers.deployment import RUN_TIMEOUT, run_config, start_federation
from tests.helpers.runs import trained_rounds

SIZES = {"site-0": "base", "site-1": "large"}
LAYERS = 4  # tiny-vilt's selectable layers; pq-lora trains with strategy "all"


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    config = {name: {"model-size": size, "layer-budget": LAYERS} for name, size in SIZES.items()}
    yield from start_federation(tmp_path_factory.mktemp("federation"), node_config=config,
                                sites=len(SIZES), check_flower=False)


def test_two_model_sizes_run_sima_with_pq_lora_and_share_only_p_and_q(federation, tmp_path):
    result = federation.run(run_config(tmp_path, "mosaic", **{
        "num-server-rounds": 1, "round-timeout": 600, "strategy": "'all'",
        "aggregation": "'sima'", "adapter": "'pq-lora'"}), timeout=RUN_TIMEOUT)
    assert result.ok, result.output[-3000:]
    run_dir = tmp_path / "mosaic"
    rounds = trained_rounds(run_dir / "rounds.jsonl")
    assert [r["round"] for r in rounds] == [1]
    assert all(r["aggregated"] and r["failures"] == 0 for r in rounds), rounds
    shared = load_file(run_dir / "adapters.safetensors")
    assert shared and all(key.rsplit(".", 1)[-1] in ("P", "Q") for key in shared), sorted(shared)[:5]
    rows = trained_rounds(run_dir / "clients.jsonl")
    size_of = {federation.node_ids[name]: size for name, size in SIZES.items()}
    assert sorted(r["node"] for r in rows) == sorted(size_of)
    for row in rows:  # Self accuracy per client, with the size it ran
        assert 0.0 <= row["evaluate"]["accuracy"] <= 1.0
        assert ("large" if row["evaluate"]["model-size"] else "base") == size_of[row["node"]]
