#!/usr/bin/env bash
# Issue 29's aggregation benchmark: every run of docs/results/bench-agg.md, two at a time on 2 cores.
# Usage: docs/results/bench-agg/sweep.sh [seeds]   (default 0,1,2; a rerun skips finished runs)
# Then: python -m experiments.paired results/bench-aggc-fedavg results/bench-aggc-* (and the rest of
# docs/results/bench-agg.md), python -m experiments.sweep_time results/bench-agg*
set -euo pipefail
SEEDS=${1:-0,1,2}
run() {  # run <config> <experiment> <run-config overrides>
    python run_simulation.py --config "conf/$1.toml" --num-clients 4 --client-cpus 1 --jobs 2 \
        --seeds "$SEEDS" --experiment "$2" --run-config "$3"
}
F3OCUS="strategy='f3ocus' budgets='6,4,6,4'"
# (a) sharing helps: FedAvg against local training, no conflict
run bench-agg bench-agg-local "aggregation='local'"
run bench-agg bench-agg-fedavg "aggregation='masked-fedavg'"
# the comparison, under the planted conflict
run bench-agg-conflict bench-aggc-fedavg "aggregation='masked-fedavg'"
run bench-agg-conflict bench-aggc-local "aggregation='local'"
run bench-agg-conflict bench-aggc-oracle "aggregation='group-oracle'"
run bench-agg-conflict bench-aggc-sima "aggregation='sima' adapter='lora'"
run bench-agg-conflict bench-aggc-sima-pq "aggregation='sima' adapter='pq-lora' model-sizes='base,large'"
run bench-agg-conflict bench-aggc-fedpia-both-5 "aggregation='fedpia' fedpia-level='both' fedpia-iterations=5"
run bench-agg-conflict bench-aggc-fedpia-both-1 "aggregation='fedpia' fedpia-level='both' fedpia-iterations=1"
run bench-agg-conflict bench-aggc-fedpia-server-5 "aggregation='fedpia' fedpia-level='server' fedpia-iterations=5"
run bench-agg-conflict bench-aggc-fedpia-server-1 "aggregation='fedpia' fedpia-level='server' fedpia-iterations=1"
run bench-agg-conflict bench-aggc-fedpia-client "aggregation='fedpia' fedpia-level='client'"
run bench-agg-conflict bench-aggc-f3ocus-fedavg "$F3OCUS aggregation='masked-fedavg'"
run bench-agg-conflict bench-aggc-f3ocus-fedpia "$F3OCUS aggregation='fedpia'"
run bench-agg-conflict bench-aggc-f3ocus-sima "$F3OCUS aggregation='sima'"
