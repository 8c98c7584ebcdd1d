#!/usr/bin/env bash
# Issue 43 on the lent GPU, from the repo root there (device tool), in back-to-back calls on one
# warm machine. The set comes from bench/miles_gpu/make_carry.sh (5 parts):
#   call 1-4: run(carry=[".carry-miles/bin", ".carry-miles/pNN"], "bash bench/miles_gpu/device.sh carry")
#   call 5:   run(carry=[".carry-miles/bin", ".carry-miles/p04"],
#                 "bash bench/miles_gpu/device.sh carry install miles")
#   call 6:   run("bash bench/miles_gpu/device.sh sglang")
# Steps:
#   carry      join the parts this call brought into /tmp/big (sha256 checked; unpacked once whole)
#   install    three --target sites under $S (sglang with the miles shims, transformers 5.12.1,
#              Ray & co. + miles' extras), miles and Megatron-LM's source from their tarballs,
#              the departures record, the model dir and prompts (bench/miles_gpu/prep_model.py)
#   miles      `ppodeck run qwen3-0.6b-ppo-miles-1gpu --engine miles --miles-root $S/miles`:
#              the run directory (its events, status, driver.log and miles' dump) comes back as
#              $OUT/miles_run.tgz, the GPU memory samples and what the GPU holds after
#   miles-stop the same run detached, `ppodeck stop` once its events show a rollout started,
#              then what the GPU holds (nothing, or the pids)
#   sglang     our engine: `ppodeck run qwen3-0.6b-ppo-1gpu --set rollout-backend=sglang` with
#              SGLANG_ROLLOUTS rollouts (6), through bench/gpu_device_run.sh (stock sglang, no
#              shims), launch time kept for the first-metric figure
#   hf         the same preset on our hf decoder, for the per-phase comparison
set -uo pipefail
OUT=${OUT:-/tmp/ppodeck-gpu-out}
S=${S:-/tmp/s}
BIG=/tmp/big
mkdir -p "$OUT" "$S"
export PPODECK_HOME=${PPODECK_HOME:-/tmp/ppodeck-home} PPODECK_RUNS_DIR=/tmp/ppodeck-runs \
  PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 NCCL_NVLS_ENABLE=0 \
  TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PIP="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target"
REPO=$PWD

gpu_holders() {  # LABEL: the GPU's compute processes now (none, or pid and command)
  local pids
  pids=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null)
  if [ -z "$pids" ]; then echo "$1: no process on the GPU"; else
    echo "$1: GPU processes:"; echo "$pids" | while IFS=, read -r pid mem; do
      echo "  pid $pid ($mem): $(ps -o cmd= -p "$pid" | cut -c1-120)"; done; fi
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
}

install() {
  [ -e "$S/.installed" ] && return 0
  [ -d $BIG/src ] || { echo "install: the carried set is not whole in $BIG (carry every part)"; \
    bash .carry-miles/bin/carry-parts status $BIG | tail -3; return 1; }
  local t0=$SECONDS
  $PIP "$S/sgl-site" $BIG/sglang/*.whl || return 1
  $PIP "$S/tf-site" $BIG/tf/*.whl || return 1
  # Ray & co. for the supervisor and miles; megatron-core stays out (the fork is on the path)
  $PIP "$S/miles-site" $BIG/miles/*.whl $(ls $BIG/whl/*.whl | grep -v megatron_core) || return 1
  tar -xzf $BIG/src/miles.tar.gz -C "$S" && tar -xzf $BIG/src/megatron.tar.gz -C "$S" || return 1
  cat $BIG/src/SOURCES
  bash bench/miles_gpu/shims.sh "$S/sgl-site" "$S/stub" "$S/departures.json" || return 1
  PYTHONPATH=$S/tf-site python3 bench/miles_gpu/prep_model.py || return 1
  touch "$S/.installed"
  echo "install done in $((SECONDS - t0)) s"
}

miles_env() {
  export PYTHONPATH=$S/tf-site:$S/stub:$S/sgl-site:$S/miles-site:$REPO \
    PPODECK_MEGATRON_PATH=$S/Megatron-LM PPODECK_MILES_DEPARTURES=$S/departures.json \
    MILES_SGLANG_DUMMY_LOAD=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_DEDUP_LOGS=0
}

launch_stamp() {  # FILE: the wall clock just before `ppodeck run` (launch -> first metric)
  python3 -c "import json,time,sys; json.dump({'launch_ts': time.time()}, open(sys.argv[1],'w'))" "$1"
}

sampler() {  # FILE: GPU memory every 0.5 s until killed
  nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -lms 500 \
    > "$1" 2>&1 &
  echo $!
}

latest_run() { ls -td /tmp/ppodeck-runs/*/ 2>/dev/null | head -1; }

keep_run() {  # RUN_DIR NAME: the run directory as $OUT/NAME_run.tgz (miles' big tensors out)
  local run=${1%/}
  tar -czf "$OUT/$2_run.tgz" -C "$(dirname "$run")" --exclude='*/policy_loss_debug' \
    "$(basename "$run")"
  if [ "$(stat -c %s "$OUT/$2_run.tgz")" -gt $((15 * 1048576)) ]; then  # 16 MiB a file back
    tar -czf "$OUT/$2_run.tgz" -C "$(dirname "$run")" --exclude='*/policy_loss_debug' \
      --exclude='*/train_data' --exclude='*/rollout_data' "$(basename "$run")"
    echo "$2_run.tgz: train_data/ and rollout_data/ left out (over 15 MiB)"
  fi
}

views() {  # RUN_DIR: what a user sees of the run
  local id; id=$(basename "${1%/}")
  for cmd in "runs ls" "tail $id" "health $id" "samples $id"; do
    echo "\$ ppodeck $cmd"; timeout 60 python3 -m ppodeck $cmd 2>&1 | cut -c1-220 | tail -60
  done
}

run_miles() {
  ( miles_env
    gpu_holders "before the miles run"
    mon=$(sampler "$OUT/miles_gpumem.csv")
    launch_stamp "$OUT/miles_launch.json"
    timeout "${MILES_TIMEOUT:-480}" python3 -m ppodeck run qwen3-0.6b-ppo-miles-1gpu \
      --engine miles --miles-root "$S/miles" --yes ${MILES_SETS:-} > "$OUT/miles_cli.log" 2>&1
    echo "ppodeck run --engine miles: rc $?"
    run=$(latest_run)
    if ! grep -qE '"state": "(succeeded|failed|stopped)"' "$run/status.json"; then
      echo "still running after the timeout: ppodeck stop"; timeout 90 python3 -m ppodeck stop \
        "$(basename "$run")" 2>&1 | tail -3
    fi
    sleep 3; kill "$mon" 2>/dev/null
    gpu_holders "after the miles run" | tee "$OUT/miles_after.txt"
    tail -25 "$OUT/miles_cli.log"
    views "$run" > "$OUT/miles_views.txt" 2>&1; head -60 "$OUT/miles_views.txt"
    grep -aE "departure|Traceback|Error|ending pid" "$run/driver.log" | cut -c1-300 | head -20
    keep_run "$run" miles )
}

stop_test() {
  ( miles_env
    launch_stamp "$OUT/stop_launch.json"
    python3 -m ppodeck run qwen3-0.6b-ppo-miles-1gpu --engine miles --miles-root "$S/miles" \
      --yes --detach > "$OUT/stop_cli.log" 2>&1
    run=$(latest_run); id=$(basename "$run")
    for _ in $(seq 1 ${STOP_WAIT_S:-240}); do
      grep -q '"kind":"metrics"' "$run/events.jsonl" 2>/dev/null && break; sleep 1; done
    gpu_holders "before stop" | tee "$OUT/stop_gpu.txt"
    start=$SECONDS; timeout 120 python3 -m ppodeck stop "$id" 2>&1 | tail -5 | tee -a "$OUT/stop_gpu.txt"
    for _ in $(seq 1 90); do
      grep -qE '"state": "(stopped|failed|succeeded)"' "$run/status.json" && break; sleep 1; done
    sleep 2
    echo "stop took $((SECONDS - start)) s; status: $(python3 -c "import json,sys; \
s=json.load(open(sys.argv[1])); print(s['state'], '-', s.get('detail'))" "$run/status.json")" \
      | tee -a "$OUT/stop_gpu.txt"
    gpu_holders "after stop" | tee -a "$OUT/stop_gpu.txt" )
}

run_ours() {  # NAME BACKEND: our preset through bench/gpu_device_run.sh's e2e_run
  launch_stamp "$OUT/$1_launch.json"
  SGLANG_CHECK=0 E2E_TIMEOUT=${OURS_TIMEOUT:-420} bash bench/gpu_device_run.sh sglang "e2e-$2"
  gpu_holders "after our $2 run"
}

for step in "$@"; do
  case $step in
    carry)
      for part in .carry-miles/p*/; do bash .carry-miles/bin/carry-parts join "$part" $BIG; done
      bash .carry-miles/bin/carry-parts status $BIG | tail -2 ;;
    install) install || exit 1 ;;
    miles) install || exit 1; run_miles ;;
    miles-stop) install || exit 1; stop_test ;;
    sglang) run_ours sglang sglang ;;
    hf) run_ours hf hf ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
