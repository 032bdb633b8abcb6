#!/usr/bin/env bash
# Every run of docs/results/bench-gen-equal.md, phase after phase, two runs at a time on 2 cores, one
# thread each. Resumable: each line is a sweep invocation that skips finished runs and resumes an
# interrupted one, so a rerun goes on where the last stopped.
# Usage: docs/results/bench-gen-equal/sweep.sh [seeds]   (default "0 1 2 3 4 5 6 7 8 9")
# Then: docs/results/bench-gen-equal.md's tables (python -m experiments.rows, experiments.curves).
set -euo pipefail
SEEDS=${1:-0 1 2 3 4 5 6 7 8 9}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
base="python run_simulation.py --config conf/bench-gen-cover.toml --config conf/bench-gen-equal.toml --engine in-process"
queue() {  # the lines of stdin, two at a time
    xargs -d '\n' -P 2 -n 1 bash -c 'bash -c "$0" > /dev/null || echo "failed: $0" >&2'
}
pick() {  # rule -> its learning rate chosen on validation questions
    python -m experiments.validation results/bench-gen-val-lr3e-4 results/bench-gen-val-lr1e-3 \
        results/bench-gen-val-lr3e-3 --key lr --json results/bench-gen-lr.json > /dev/null
    python -c "import json, sys; print(json.load(open('results/bench-gen-lr.json'))[sys.argv[1]])" "$1"
}
# 1. the learning rates, on validation questions, seed 0
for tag in 3e-4 1e-3 3e-3; do
    lr=$(python -c "print(float('$tag'))")
    for rule in f3ocus all random lntk; do
        echo "$base --strategies $rule --seeds 0 --run-config \"validation-share=0.12 lr=$lr\" --experiment bench-gen-val-lr$tag"
    done
done | queue
f=$(pick f3ocus-nsga2) a=$(pick all) r=$(pick random) l=$(pick lntk)
# 2. f3ocus, all and random on every seed, seed after seed; 3. lntk
for s in $SEEDS; do
    echo "$base --strategies f3ocus --seeds $s --run-config \"lr=$f\" --experiment bench-gen-equal"
    echo "$base --strategies all --seeds $s --run-config \"lr=$a\" --experiment bench-gen-equal"
    echo "$base --strategies random --seeds $s --run-config \"lr=$r\" --experiment bench-gen-equal"
done | queue
for s in $SEEDS; do
    echo "$base --strategies lntk --seeds $s --run-config \"lr=$l\" --experiment bench-gen-equal"
done | queue
# 4. the paper's 30 rounds, f3ocus and all, 3 seeds
for s in 0 1 2; do
    echo "$base --strategies f3ocus --seeds $s --run-config \"lr=$f num-server-rounds=30\" --experiment bench-gen-equal-30"
    echo "$base --strategies all --seeds $s --run-config \"lr=$a num-server-rounds=30\" --experiment bench-gen-equal-30"
done | queue
