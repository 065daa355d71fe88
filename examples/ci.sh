#!/usr/bin/env bash
# A CI job that trains a model and gates on the result: submit, wait, fetch the metrics as JSON,
# download the final model (sha256-verified). Any failing step fails the job.
#
#   examples/ci.sh [SPEC] [--set key=value ...]
#
# It talks to the server in RLPLANE_URL with the token in RLPLANE_TOKEN (on a machine running
# `rlplane up`, neither is needed). Optional: OUT (default ci-output), MAX_EVAL_LOSS (fail the job
# when the run's last eval/loss is above it).
set -euo pipefail

spec=${1:-examples/sft.yaml}
shift || true
out=${OUT:-ci-output}
mkdir -p "$out"

# --wait exits 0 when the run succeeded, 1 failed, 2 cancelled, 3 invalid spec; set -e stops here then.
run_id=$(rlplane submit "$spec" --name "ci-${CI_COMMIT_SHORT_SHA:-local}" "$@" --wait)
echo "run $run_id succeeded"

rlplane metrics "$run_id" --json > "$out/metrics.json"
rlplane download "$run_id" -o "$out/model"

python3 - "$out/metrics.json" "${MAX_EVAL_LOSS:-}" <<'PY'
import json, math, sys

series = {s["key"]: s["points"] for s in json.load(open(sys.argv[1]))["series"]}
if not series.get("eval/loss"):
    sys.exit("no eval/loss in the run's metrics")
point = series["eval/loss"][-1]
last = float(point["value"])  # JSON has no NaN: the API sends "NaN", "Infinity", "-Infinity"
if not math.isfinite(last):
    sys.exit(f"eval/loss is {point['value']} at step {point['step']}: the model is not usable")
print(f"eval/loss at the last evaluation: {last:.4f}")
if sys.argv[2] and last > float(sys.argv[2]):
    sys.exit(f"eval/loss {last:.4f} is above MAX_EVAL_LOSS={sys.argv[2]}")
PY
echo "model in $out/model"
