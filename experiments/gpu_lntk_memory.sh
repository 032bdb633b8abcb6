#!/usr/bin/env bash
# LNTK scoring's peak memory and time beside a local training round's, on one CUDA GPU, at
# LLaVA-1.5-7B's shape (random bf16 weights), without and with gradient checkpointing
# (docs/results/lntk-memory/README.md). From the repository root on the GPU machine:
#
#     OUT=<folder> bash experiments/gpu_lntk_memory.sh
#
# Writes to $OUT: gpu.json (the card, and its bf16 matmul rate on 8192^3 products), checkpoint.json
# (experiments.random_llava) and bench-7b-plain.json / bench-7b-checkpointed.json
# (experiments.bench_client; step_peak_share against PEAK_FLOPS, default 790e12: an H200's measured
# bf16 rate). Needs torch with CUDA, transformers, peft, numpy, scipy, lazy_loader, pillow; not flwr,
# pymoo, flwr-datasets or datasets (the partitioner below cuts without flwr-datasets). About 4
# minutes on an H200: build 7.1 B parameters on the GPU (~40 s), save 14 GB (~20 s), then each
# benchmark loads it (~15 s), scores 8 samples twice and trains STEPS (default 20) steps of 16.
set -euo pipefail
OUT=${OUT:?set OUT to the folder for the results}
CKPT=${CKPT:-/tmp/llava-7b-random}
STEPS=${STEPS:-20}
PEAK_FLOPS=${PEAK_FLOPS:-790e12}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$OUT"

python - > "$OUT/gpu.json" <<'EOF'
import importlib.util, json, sys, time
missing = [m for m in ("torch", "transformers", "peft", "numpy", "scipy", "lazy_loader", "PIL")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"experiments/gpu_lntk_memory.sh: missing {', '.join(missing)} (carry them as wheels)")
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ a
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(20):
    a @ a
torch.cuda.synchronize()
rate = 20 * 2 * 8192**3 / (time.perf_counter() - start)
print(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                  "memory_gb": round(torch.cuda.get_device_properties(0).total_memory / 1e9, 1),
                  "bf16_matmul_flops": float(f"{rate:.4g}")}))
EOF
cat "$OUT/gpu.json"

if [ ! -f "$CKPT/config.json" ]; then
    python -m experiments.random_llava "$CKPT" --shape 7b --device cuda | tee "$OUT/checkpoint.json"
fi

for setting in plain checkpointed; do
    flag=""
    [ "$setting" = checkpointed ] && flag=--gradient-checkpointing
    python -m experiments.bench_client --model "hf:$CKPT" --dataset synthetic \
        --partitioner by-question-type:0.5 --device cuda --dtype bfloat16 --steps "$STEPS" \
        --peak-flops "$PEAK_FLOPS" $flag --json | tail -1 | tee "$OUT/bench-7b-$setting.json"
done
