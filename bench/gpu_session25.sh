#!/usr/bin/env bash
# Issues 42 and 45 on the lent GPU (device tool, repo root there, `.whl` carried; build .whl/
# with bench/make_gpu_wheels.sh):
#   call 1: run(carry=[".whl"], "bash bench/gpu_session25.sh gpu tests forecast trial")
#   call 2: run(carry=[".whl"], "bash bench/gpu_session25.sh gpu probe canary")
#   (the canary alone again after a recipe change: "bash bench/gpu_session25.sh gpu canary")
#   call 3 (held out: the forecast calibrated from call 1's kept run, on 12 rollouts):
#   run(carry=[".whl"], "FORECAST_ROLLOUTS=12 bash bench/gpu_session25.sh gpu forecast probe")
# Steps:
#   gpu       what the GPU holds before anything runs (nvidia-smi)
#   tests     every gpu-marked test file (tests/gpu/ and the three in tests/train/), one pytest per
#             file side by side; the logs joined into $OUT/gpu_tests.log
#   forecast  `ppodeck validate qwen3-0.6b-ppo-1gpu --set rollout-backend=hf --json` on a fresh
#             runs dir, then `ppodeck run` of the same with launch and done stamps around it:
#             $OUT/forecast.tgz (validate.json, wall.json, events.jsonl, status.json, cli.log)
#   trial     bench/canary_trial.py: the GPU canary recipe at a few learning rates, one flipped
#             ($OUT/trial.log, the runs' events in $OUT/trial.tgz)
#   canary    `ppodeck canary --preset qwen3-0.6b-ppo-1gpu --refresh --runs 2`, then the check,
#             then the check with PPODECK_TEST_FLIP_ADVANTAGES=1 (must exit 3): the corridor
#             file and the three logs in $OUT, every run's events in $OUT/canary_runs.tgz
#   probe     bench/gpu_bounds_probe.py: pinned copy, HBM and bf16 matmul bounds ($OUT/probe.txt)
set -uo pipefail
OUT=${OUT:-/tmp/ppodeck-gpu-out}
mkdir -p "$OUT"
bash bench/gpu_device_run.sh setup > /dev/null || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled \
  RAY_USAGE_STATS_ENABLED=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
PRESET=qwen3-0.6b-ppo-1gpu
stamp() {  # the wall clock now, as a JSON number
  python3 -c 'import time; print(time.time())'
}
gpu_now() {  # LABEL: the GPU's memory and compute processes now
  echo "== $1"
  nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv,noheader
  nvidia-smi --query-compute-apps=pid,used_memory,process_name --format=csv,noheader
}
run_tests() {
  local pids=() target
  for target in tests/gpu/test_*.py tests/train/test_worker_gpu.py tests/train/test_checkpoint.py \
      tests/train/test_init_weights_device.py; do
    timeout "${TESTS_TIMEOUT:-280}" python3 -m pytest "$target" -m gpu -v -p no:cacheprovider \
      --timeout-method=thread > "/tmp/gpu_tests_$(basename "$target" .py).log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  for log in /tmp/gpu_tests_*.log; do echo "#### $log"; cat "$log"; done > "$OUT/gpu_tests.log"
  grep -E "^(FAILED|ERROR)|^=+ .*(passed|failed|skipped|error).* in " "$OUT/gpu_tests.log"
}
run_forecast() {
  local dir=/tmp/forecast launch done rc run
  rm -rf "$dir" && mkdir -p "$dir"
  export PPODECK_RUNS_DIR=/tmp/forecast-runs
  # FORECAST_ROLLOUTS: another rollout count than the kept run's, so the check is held out
  local sets=(--set rollout-backend=hf ${FORECAST_ROLLOUTS:+--set num-rollout=$FORECAST_ROLLOUTS})
  python3 -m ppodeck validate $PRESET "${sets[@]}" --json > "$dir/validate.json"
  python3 -c 'import json,sys; f=json.load(open(sys.argv[1]))["forecast"]; print("forecast", f)' \
    "$dir/validate.json"
  launch=$(stamp)
  timeout 400 python3 -m ppodeck run $PRESET "${sets[@]}" --yes > "$dir/cli.log" 2>&1
  rc=$?
  done=$(stamp)
  echo "{\"launch_ts\": $launch, \"done_ts\": $done, \"rc\": $rc}" > "$dir/wall.json"
  run=$(ls -td /tmp/forecast-runs/*/ | head -1)
  cp "$run/events.jsonl" "$run/status.json" "$dir/"
  tail -5 "$dir/cli.log"
  python3 -c 'import json,sys; w=json.load(open(sys.argv[1])); f=json.load(open(sys.argv[2]))
print("measured launch->done %.1f s (rc %d), forecast %s s" % (w["done_ts"]-w["launch_ts"],
      w["rc"], f["forecast"]["seconds"]))' "$dir/wall.json" "$dir/validate.json"
  tar -czf "$OUT/forecast.tgz" -C "$dir" .
  unset PPODECK_RUNS_DIR
}
run_trial() {
  local left=$((${CALL_BUDGET_S:-585} - SECONDS))
  [ "$left" -gt 60 ] || { echo "trial: only $left s left, skipped"; return; }
  timeout "$left" python3 bench/canary_trial.py --lr 1e-5 --lr 3e-5 --lr 1e-4 --flip-lr 3e-5 \
    --runs-dir /tmp/trial --timeout $((left - 30)) 2>&1 | tee "$OUT/trial.log"
  (cd /tmp/trial && tar -czf "$OUT/trial.tgz" */events.jsonl */status.json)
}
run_canary() {  # the logs go straight to $OUT: a call cut at its limit still brings them back
  local runs=/tmp/canary-runs
  export PPODECK_RUNS_DIR=$runs
  timeout 280 python3 -m ppodeck canary --preset $PRESET --refresh --runs 2 \
    > "$OUT/canary_refresh.log" 2>&1
  echo "refresh rc $?"; tail -3 "$OUT/canary_refresh.log"
  cp engine/run/corridors/$PRESET.json "$OUT/" 2>/dev/null
  timeout 120 python3 -m ppodeck canary --preset $PRESET > "$OUT/canary_check.log" 2>&1
  echo "check rc $?"; tail -3 "$OUT/canary_check.log"
  PPODECK_TEST_FLIP_ADVANTAGES=1 timeout 120 python3 -m ppodeck canary --preset $PRESET \
    > "$OUT/canary_flipped.log" 2>&1
  echo "flipped rc $?"; tail -12 "$OUT/canary_flipped.log"
  (cd $runs && tar -czf "$OUT/canary_runs.tgz" */events.jsonl */status.json)
  unset PPODECK_RUNS_DIR
}
for step in ${*:-gpu}; do
  echo "######## $step (t=${SECONDS}s)"
  case $step in
    gpu) gpu_now "GPU at t=${SECONDS}s" | tee -a "$OUT/gpu_before.txt" ;;
    tests) run_tests ;;
    forecast) run_forecast ;;
    trial) run_trial ;;
    canary) run_canary ;;
    probe) python3 bench/gpu_bounds_probe.py --json "$OUT/probe.json" | tee "$OUT/probe.txt" ;;
  esac
done
echo "######## done (t=${SECONDS}s)"
