#!/usr/bin/env bash
# Build the GPU kit (here, on the development machine): wheels, for Python 3.12 on x86-64 Linux, of what the
# trainer, tests/test_gpu.py and bench/gpu.py need that a GPU machine with its own CUDA torch, transformers,
# accelerate, pytest and the scientific stack lacks. The GPU machine reaches no registry, so they travel with the
# tree; scripts/gpu-check.sh installs them there. DeepSpeed is published as a source archive only: it is built
# here into a pure-Python wheel with no compiled ops (they compile on first use on the GPU machine, with its nvcc).
# Usage: scripts/gpu-kit.sh [DIR]   (default .gpu-kit, ignored by git)
set -euo pipefail
cd "$(dirname "$0")/.."
kit=${1:-.gpu-kit}
python=${PYTHON:-.venv/bin/python}
rm -rf "$kit" && mkdir -p "$kit"
platforms=()
for p in manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  platforms+=(--platform "$p")
done
# Pinned as in pyproject.toml (the trainer's stack) and bench/ (TRL, the peer); the rest are their needs that the
# GPU image does not hold at a version they accept.
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d "$kit" \
  pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0 \
  pydantic-settings==2.16.3 orjson==3.13.0 ruamel.yaml==0.19.1 \
  transformers==5.23.0 tokenizers==0.23.3 regex==2026.11.19 peft==0.21.2 megatron-core==0.16.1 hjson==3.1.0 \
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 liger-kernel==0.8.5
DS_BUILD_OPS=0 "$python" -m pip wheel -q --no-deps --no-build-isolation -w "$kit" deepspeed==0.19.8
ls -1 "$kit"
du -sh "$kit"
