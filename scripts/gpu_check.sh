#!/usr/bin/env bash
# Check graft's vLLM path on a machine with a CUDA GPU, in under 10 minutes once the packages are
# downloaded. Installs graft with its `vllm` extra into its own environment (Python 3.13: the
# only Python on which vLLM 0.30 resolves together with graft's pins, see docs/scaling.md), runs
# the gpu tests one by one and a 3-step GRAFT run with two tiny policies sampling through vLLM,
# and prints one summary line per check. Exit status: the number of failed checks.
#
#   scripts/gpu_check.sh                       # creates .venv-vllm with python3.13
#   PYTHON=/opt/py313/bin/python3 scripts/gpu_check.sh
#   VENV=/path/to/ready/env SKIP_INSTALL=1 scripts/gpu_check.sh
#
# Logs go to $LOG_DIR (default runs/gpu_check/); each summary line names its log.
set -u
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.13}
VENV=${VENV:-.venv-vllm}
LOG_DIR=${LOG_DIR:-runs/gpu_check}
PY="$VENV/bin/python"
mkdir -p "$LOG_DIR"
failed=0

# check NAME SECONDS COMMAND...: run COMMAND with a time limit, log its output, print one line.
check() {
    local name=$1 limit=$2
    shift 2
    local log="$LOG_DIR/$name.log" start status
    start=$(date +%s)
    if timeout "$limit" "$@" >"$log" 2>&1; then
        status=PASS
        if grep -qE "[0-9]+ skipped" "$log"; then status="FAIL (skipped: no GPU or no vllm?)"; fi
    else
        status="FAIL (exit $?)"
    fi
    [[ $status == PASS ]] || failed=$((failed + 1))
    echo "gpu_check: $name: $status in $(($(date +%s) - start))s ($log)"
}

if [[ ${SKIP_INSTALL:-0} != 1 ]]; then
    check install 900 bash -c "
        set -e
        test -x '$PY' || '$PYTHON' -m venv '$VENV'
        '$PY' -m pip install --upgrade 'pip>=24'
        '$PY' -m pip install -e '.[vllm,dev]'
    "
fi

check environment 120 "$PY" -c "
import importlib.metadata as m
import torch
from graft.rollout.vllm_engine import check_vllm_version
check_vllm_version(m.version('vllm'))
assert torch.cuda.is_available(), 'no CUDA device visible'
print('vllm', m.version('vllm'), 'torch', torch.__version__, torch.cuda.get_device_name(0))
"

check tiny_models 300 "$PY" -c "
from graft.models.tiny import build_tiny
for name in ('llama-char-add', 'qwen2-bpe-add'):
    print(build_tiny(name))
"

for test in \
    test_gpu_engine_builds_on_a_tiny_model \
    test_gpu_logprobs_match_the_policy_after_an_update_on_a_long_prefix \
    test_gpu_logprobs_match_the_policy_with_top_k_and_top_p \
    test_gpu_grpo_run_with_vllm_tracks_the_native_sampler; do
    check "$test" 400 "$PY" -m pytest -m gpu -q -p no:cacheprovider "tests/test_vllm.py::$test"
done

GRAFT_OUT="$LOG_DIR/graft_run"
rm -rf "$GRAFT_OUT"
check graft_two_tiny_policies 400 bash -c "
    set -e
    '$VENV/bin/graft' train configs/graft_tiny.yaml --out '$GRAFT_OUT' \
        --set rollout.engine=vllm --set rollout.vllm_gpu_memory=0.25 --set run.steps=3 \
        --set run.save_every=3 --set eval.every=0 --set run.progress=false
    '$PY' - '$GRAFT_OUT' <<'EOF'
import sys
from graft.rundir import read_metrics

records = read_metrics(sys.argv[1])
assert records and records[-1]['step'] == 3, [r.get('step') for r in records]
for name in ('llama', 'qwen'):
    ratios = [r[f'm/{name}/loss/ratio_mean'] for r in records if f'm/{name}/loss/ratio_mean' in r]
    assert ratios and all(abs(x - 1) < 0.05 for x in ratios), (name, ratios)
    rewards = [r[f'm/{name}/reward/mean'] for r in records if f'm/{name}/reward/mean' in r]
    print(name, 'ratio means', ratios, 'reward means', rewards)
EOF
"

echo "gpu_check: $failed failed"
exit "$failed"
