#!/usr/bin/env bash
# On a GPU machine (the lent device machine: Python 3.12 with its own CUDA torch, no registry): install the kit
# that `make gpu-kit` built here, then run tests/test_gpu.py and bench/gpu.py from this source tree. Writes to OUT
# (seven files: the device tool brings back at most eight): versions.txt, gpu-tests.log, gpu-bench.log,
# gpu-bench.json, engines.log and engines.json (bench/engines.py: the rollout engines' tokens/s) and results.json (a
# summary: versions, each test's outcome and seconds, the bench's table); the tests' JUnit XML stays in /tmp.
# Exits non-zero if a test failed or a step broke.
# Usage: scripts/gpu-check.sh OUT [KIT]   (KIT default .gpu-kit)
# Limits (seconds): GPU_TEST_TIMEOUT (default 330) for the tests, GPU_BENCH_TIMEOUT (default 400) for the bench;
# GPU_TEST_WORKERS (default 4) pytest-xdist workers share the one GPU; GPU_TESTS narrows the tests (-k expression);
# GPU_BENCH_ARGS passes arguments to bench/gpu.py (GPU_ENGINES_ARGS to bench/engines.py, GPU_ENGINES_TIMEOUT default
# 150); GPU_SKIP_TESTS=1 / GPU_SKIP_BENCH=1 / GPU_SKIP_ENGINES=1 leave one part out. GPU_PACKING=1 also runs
# bench/packing.py into packing.log (GPU_PACKING_ARGS, GPU_PACKING_TIMEOUT default 300): with the bench and a failed
# run's log that makes nine files, one more than the device tool brings back, so pair it with GPU_SKIP_BENCH=1.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-check.sh OUT [KIT]}
kit=${2:-.gpu-kit}
python=${PYTHON:-python3}
site=${GPU_SITE:-/tmp/rlplane-gpu-site}
mkdir -p "$out"
started=$(date +%s)
"$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$kit"/*.whl \
  || { echo "gpu-check: installing the kit from $kit failed"; exit 2; }
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/rlplane-torch-extensions}
echo "gpu-check: kit installed in $(( $(date +%s) - started )) s"
"$python" - >"$out/versions.txt" 2>&1 <<'PY'
import importlib, platform, subprocess, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none", "count", torch.cuda.device_count())
for name in ("transformers", "deepspeed", "megatron.core", "peft", "accelerate", "trl", "pydantic", "datasets"):
    try:
        m = importlib.import_module(name)
        print(name, getattr(m, "__version__", "?"), m.__file__)
    except Exception as exc:
        print(name, "import failed:", type(exc).__name__, str(exc)[:200])
print(subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:])
PY
cat "$out/versions.txt"
status=0
junit=$(mktemp /tmp/gpu-tests.XXXXXX.xml)
if [ -z "${GPU_SKIP_TESTS:-}" ]; then
  # --noconftest: tests/conftest.py builds the API's fixtures (FastAPI, SQLAlchemy, Postgres), which the GPU tests
  # do not use and the GPU machine lacks; -o addopts= drops the suite's `-m 'not gpu'` and service plugin.
  timeout -k 10 "${GPU_TEST_TIMEOUT:-330}" "$python" -m pytest --noconftest -o addopts= -p no:cacheprovider -m gpu -v --timeout 240 \
    tests/test_gpu.py ${GPU_TESTS:+-k "$GPU_TESTS"} -n "${GPU_TEST_WORKERS:-4}" -rA --durations=0 \
    --junitxml "$junit" >"$out/gpu-tests.log" 2>&1 || status=1
  tail -n 60 "$out/gpu-tests.log"
fi
if [ -z "${GPU_SKIP_BENCH:-}" ]; then
  timeout -k 10 "${GPU_BENCH_TIMEOUT:-400}" "$python" bench/gpu.py --json "$out/gpu-bench.json" --keep /tmp/rlplane-gpu-bench \
    ${GPU_BENCH_ARGS:-} >"$out/gpu-bench.log" 2>&1 || status=1
  tail -n 30 "$out/gpu-bench.log"
  # the first failing run's own log, so a failure can be read here
  grep -l -iE "error|traceback" /tmp/rlplane-gpu-bench/*.log 2>/dev/null | head -1 | while read -r log; do
    tail -n 40 "$log" >"$out/bench-$(basename "$log" | tr -c 'A-Za-z0-9._\n-' _ | cut -c1-60)"
  done
fi
if [ -z "${GPU_SKIP_ENGINES:-}" ]; then
  timeout -k 10 "${GPU_ENGINES_TIMEOUT:-150}" "$python" bench/engines.py --json "$out/engines.json" ${GPU_ENGINES_ARGS:-} \
    >"$out/engines.log" 2>&1 || status=1
  tail -n 12 "$out/engines.log"
fi
if [ -n "${GPU_PACKING:-}" ]; then
  # bench/packing.py prints each variant as it ends, so a cut run still tells what it measured
  timeout -k 10 "${GPU_PACKING_TIMEOUT:-300}" "$python" bench/packing.py ${GPU_PACKING_ARGS:---steps 15 --warmup 3 --threads 8} \
    >"$out/packing.log" 2>&1 || status=1
  tail -n 14 "$out/packing.log"
fi
"$python" - "$out" "$junit" <<'PY'
import json, sys, xml.etree.ElementTree as ET
from pathlib import Path
out, junit = Path(sys.argv[1]), Path(sys.argv[2])
summary = {"versions": (out / "versions.txt").read_text().splitlines(), "tests": {}, "bench": None}
if junit.stat().st_size:
    for case in ET.parse(junit).iter("testcase"):
        outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        summary["tests"][case.get("name")] = {"outcome": outcome, "seconds": float(case.get("time", 0))}
if (out / "gpu-bench.json").exists():
    summary["bench"] = json.loads((out / "gpu-bench.json").read_text())
(out / "results.json").write_text(json.dumps(summary, indent=2))
print({k: v["outcome"] for k, v in summary["tests"].items()})
PY
echo "gpu-check: done in $(( $(date +%s) - started )) s, status $status"
exit $status
