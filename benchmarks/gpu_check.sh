#!/usr/bin/env bash
# The GPU machine's checks (issue 19), in one go; under 8 minutes on 16 cores:
#   (a) processes/async scaling at 1, 2, 4, 8, 16 workers vs A3C's 12.5x at 16 (target >= 10x)
#   (a') the same speed-ups as the calibrated virtual clock predicts them, beside (a):
#        predicted / measured (benchmarks/speedup.py's table; --profile P.json or calibrated here)
#   (b) the hybrid scheduler's learner on ALE/Pong-v5 (Nature CNN), CPU vs CUDA
#
#   benchmarks/gpu_check.sh            # the real thing (needs hybrid-rl[atari], a CUDA torch)
#   benchmarks/gpu_check.sh --smoke    # tiny settings: checks that it runs (CPU-only is fine)
#
# PYTHON picks the interpreter (default: .venv/bin/python if there is one, else python3).
# Extra arguments go to benchmarks/gpu_check.py (see its --help).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export WANDB_MODE=offline
echo "== $(date -u +%FT%TZ) $(uname -n): $(nproc) CPUs"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
else
    echo "no nvidia-smi: no GPU rows in (b)"
fi
"$PYTHON" -c 'import torch; print(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}")'
# 8 minutes in all; a hang ends as a failure, not a stalled machine.
exec timeout --signal=INT --kill-after=30 480 "$PYTHON" benchmarks/gpu_check.py "$@"
