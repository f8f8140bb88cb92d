#!/usr/bin/env bash
# GRPO with vLLM replicas on one GPU: the instrumented SQL-shaped agent through runners + gateway + collector, and
# verl's own agent loop on the same tiny model, side by side (benchmarks/verl_step_time.py --device cuda).
#
# The GPU machine reaches no package registry and takes 64 MiB of carried files per call, and vLLM (266 MiB) and
# Ray (76 MiB) are bigger. So, in two phases:
#   bash benchmarks/gpu/verl_gpu.sh prepare        # here (registry access): wheels -> benchmarks/gpu/.wheels/*.part*
#   bash benchmarks/gpu/verl_gpu.sh install DIR     # there, once per warm machine, after every chunk was carried
#   bash benchmarks/gpu/verl_gpu.sh run             # there: tiny model built offline, GRPO steps, reward + tokens/s
# The device image has torch 2.11.0+cu130, transformers, accelerate and peft; vllm 0.24.0 pins torch 2.11.0.
# Status: written for the device; not yet run (no session with a GPU so far).
set -euo pipefail
cd "$(dirname "$0")/../.."
WHEELS=benchmarks/gpu/.wheels
CHUNK=60M

case "${1:-}" in
  prepare)
    # Everything vLLM, verl and our extras need, for the device's Python (3.11, x86_64); then drop what its image
    # already has (torch 2.11.0+cu130 with its nvidia-* and triton wheels), so pip resolves against those.
    mkdir -p "$WHEELS/full"
    python3 -m pip wheel -q -w "$WHEELS/full" --no-deps .            # ours, so its extras resolve with the rest
    python3 -m pip download -q -d "$WHEELS/full" --find-links "$WHEELS/full" --python-version 3.11 \
      --platform manylinux_2_28_x86_64 --only-binary=:all: "lightning-otel[verl,langchain]" "vllm==0.24.0"
    rm -f "$WHEELS"/full/torch-* "$WHEELS"/full/nvidia_* "$WHEELS"/full/triton-*
    (cd "$WHEELS/full" && for wheel in *.whl; do split -b "$CHUNK" -d "$wheel" "../$wheel.part"; done)
    rm -rf "$WHEELS/full"
    du -sh "$WHEELS"
    echo "carry benchmarks/gpu/.wheels in calls of at most 64 MiB, then: bash benchmarks/gpu/verl_gpu.sh install"
    ;;
  install)
    mkdir -p /tmp/agl-wheels
    for first in "$WHEELS"/*.part00; do
      name=$(basename "$first" .part00)
      cat "$WHEELS/$name".part* > "/tmp/agl-wheels/$name"
    done
    # No index: every requirement comes from the carried wheels or is already in the image (torch stays).
    python3 -m pip install -q --no-index --find-links /tmp/agl-wheels "vllm==0.24.0" "verl==0.9.1" \
      "lightning-otel[verl,langchain]"
    python3 -c "import vllm, verl, ray, lightning_otel; print('vllm', vllm.__version__, 'verl', verl.__version__)"
    ;;
  run)
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    python3 -m benchmarks.verl_step_time --device cuda --steps "${STEPS:-12}"
    ;;
  *)
    echo "usage: $0 prepare | install | run" >&2
    exit 2
    ;;
esac
