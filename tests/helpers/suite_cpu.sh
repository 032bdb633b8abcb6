#!/usr/bin/env bash
# The README's test command, with the whole machine's busy and idle CPU seconds over it (/proc/stat):
# on 2 cores the suite is CPU-bound when busy ≈ 2 × wall (tests/conftest.py). Extra arguments go to
# pytest. Run it on an otherwise quiet machine: /proc/stat counts every process.
set -euo pipefail
cd "$(dirname "$0")/../.."
cpu() { read -r _ user nice system idle iowait irq softirq steal _ < /proc/stat
        echo "$((user + nice + system + irq + softirq + steal)) $((idle + iowait))"; }
read -r busy0 idle0 < <(cpu)
start=$(date +%s.%N)
status=0
python -m pytest -q "$@" || status=$?
read -r busy1 idle1 < <(cpu)
hz=$(getconf CLK_TCK)
python - "$start" "$(date +%s.%N)" "$(( (busy1 - busy0) / hz ))" "$(( (idle1 - idle0) / hz ))" <<'PY'
import sys
start, end, busy, idle = map(float, sys.argv[1:])
print(f"suite: {end - start:.1f} s wall, {busy:.0f} core-seconds busy, {idle:.0f} idle")
PY
exit "$status"
