#!/usr/bin/env bash
# The GPU check on a fresh CUDA machine (Linux x86-64, NVIDIA driver, Python >= 3.11, network), in about
# 5 minutes: a venv with the CUDA build of torch and ClawDesk, the CUDA tests, then bench/gpu_check.py
# (a 4-bit QLoRA step on the tiny Qwen3, and with --4b on the Qwen3-4B-shaped model; the llama.cpp-vs-PEFT
# check of each adapter; peak VRAM and step time).
#
#   bash bench/gpu_check.sh [--4b] [--json OUT.json]      (arguments go to bench/gpu_check.py)
#
# Environment:
#   VENV=.venv-gpu        where the venv goes (reused when it exists: a second run skips the installs)
#   TORCH_INDEX=URL       a PyTorch wheel index, e.g. https://download.pytorch.org/whl/cu128, when PyPI's
#                         default CUDA build does not fit the driver (nvidia-smi shows the CUDA it supports)
#   LLAMA_WHEEL_INDEX=URL a prebuilt llama-cpp-python wheel index (default: the project's CPU wheels)
#
# Time: torch from PyPI is the CUDA build on Linux x86-64 (~3 GB with its nvidia-* wheels: about a minute
# on a fast link). llama-cpp-python 0.3.36 is taken as a prebuilt CPU wheel when the index has one for
# this Python; otherwise pip compiles it (about 10 minutes on 2 cores, 2-3 on 16: the build is run with
# every core). The CPU build is enough: the check compares llama.cpp's logits on the CPU, and training
# runs in torch. The 5 minutes are for the tiny model; --4b adds several: writing the 2.3 GB Q4_0 GGUF,
# its llama.cpp validation, and the check's fp32 transformers reference on the CPU (~16 GB of RAM).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv-gpu}
LLAMA_WHEEL_INDEX=${LLAMA_WHEEL_INDEX:-https://abetlen.github.io/llama-cpp-python/whl/cpu}
started=$(date +%s)
say() { echo "[gpu_check $(($(date +%s) - started)) s] $*"; }

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
    say "no NVIDIA GPU visible (nvidia-smi); the GPU path stays untested here"
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    python3 -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip

if ! python -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    say "installing the CUDA build of torch 2.13.0"
    if [ -n "${TORCH_INDEX:-}" ]; then
        python -m pip install -q "torch==2.13.0" --index-url "$TORCH_INDEX"
    else
        python -m pip install -q "torch==2.13.0"
    fi
fi

if ! python -c 'import llama_cpp' 2>/dev/null; then
    say "installing llama-cpp-python 0.3.36 (a prebuilt CPU wheel if $LLAMA_WHEEL_INDEX has one)"
    python -m pip install -q "llama-cpp-python==0.3.36" --only-binary=llama-cpp-python \
        --extra-index-url "$LLAMA_WHEEL_INDEX" \
        || CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python -m pip install -q "llama-cpp-python==0.3.36"
fi

say "installing ClawDesk (torch and llama-cpp-python stay as installed: the pins match)"
python -m pip install -q -e '.[test]'
python -c 'import torch; assert torch.cuda.is_available(), "torch was installed without CUDA"; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'

say "CUDA tests"
python -m pytest -q -p no:cacheprovider tests/learn/test_cuda.py

say "bench/gpu_check.py $*"
python bench/gpu_check.py "$@"
say "done"
