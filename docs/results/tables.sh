#!/usr/bin/env bash
# Issue 34: the committed CSV tables that README's headline numbers and the redrawn figures come from,
# copied from the markdown tables the lab tools printed (no run folders needed), then every figure
# that can be drawn from them. Run from the repository root; `python -m experiments.headlines` then
# recomputes README's numbers from these CSVs.
set -euo pipefail
R=docs/results
x() { python -m experiments.headlines extract "$@"; }
x $R/bench-agg.md $R/bench-agg/vs-fedavg.csv --section "Paired against FedAvg"
x $R/bench-agg.md $R/bench-agg/vs-local.csv --section "Paired against local training"
x $R/bench-agg.md $R/bench-agg/no-conflict.csv --section "Without the conflict"
x $R/bench-agg.md $R/bench-agg/runs.csv --section "Results (last round"
x $R/bench-agg.md $R/bench-agg/sweep_time.csv --section "Setting and runs" --table 1
x $R/README.md $R/bench-yesno/sweep_time.csv --section "The whole sweep: commands and time"
x $R/bench-yesno/paired.md $R/bench-yesno/paired.csv --table 1
x $R/bench-gen/selection-paired.md $R/bench-gen/selection-paired.csv --table 1
x $R/bench-yesno-budget/paired.md $R/bench-yesno-budget/runs.csv --table 0
x $R/bench-yesno-budget/paired.md $R/bench-yesno-budget/paired.csv --table 1
x $R/task2-hetero/optimizers.md $R/task2-hetero/optimizers.csv
x $R/sensitivity.md $R/sensitivity/screening.csv --section "Screening"
x $R/README.md $R/bench-yesno-budget/budget_sweep.csv --section "Budget sweep" --table 0
x $R/sensitivity-aggregation.md $R/sensitivity-aggregation/paired.csv --section "Results" --table 1
python -m experiments.paired --redraw $R/bench-agg/vs-fedavg.csv $R/bench-agg/vs-local.csv $R/bench-agg/types-vs-fedavg.csv $R/bench-gen/vs-fedavg.csv
python -m experiments.budget_sweep --redraw $R/bench-yesno-budget/budget_sweep.csv
python -m experiments.privacy_client --redraw --out $R/privacy-client
python -m experiments.report --from-tables $R/bench-gen
