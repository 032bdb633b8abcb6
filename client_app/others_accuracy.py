"""FedMosaic's 'Others' accuracy (paper §5): with ``eval-others = true``, accuracy of this client's
final model on the other partitions' test splits as their clients see them (the same seeded split
every client computes, with a planted conflict's rotated answers where the other client has them;
the answer vocabulary is the data set's, shared by all). It costs an evaluation pass over N − 1 test
splits per client, so it runs in the last round only (the one the tables report) and is off by
default; a site that cannot build the other partitions (its own ``dataset``/``data-dir``) reports
none."""

from __future__ import annotations

import tasks
from client_app.runtime import ClientSetup, client_partition
from tasks.names import MODEL_SIZES


def others_metrics(setup: ClientSetup, server_round: int) -> dict[str, float]:
    """'Others' accuracy (or F1) and example count in the last round, plus the client's model
    size (module doc)."""
    config, node = setup.config, setup.node
    metrics: dict[str, float] = {"model-size": MODEL_SIZES.index(node.model_size)}
    if not config.eval_others or node.num_partitions < 2 or server_round < config.num_server_rounds:
        return metrics
    samples = [s for pid in range(node.num_partitions) if pid != node.partition_id
               for s in client_partition(config, node.dataset, pid, node.num_partitions).test]
    result = tasks.evaluate(setup.model, samples, batch_size=max(64, config.training.pass_size),
                            device=setup.device, answers=config.eval_answers)
    for key, value in result.items():
        metrics[f"others-{key.replace('_', '-')}"] = value
    return metrics
