#!/usr/bin/env bash
# Builds .whl/: the wheels the lent H200 lacks (python 3.12, torch 2.11 + CUDA there, no
# network), to carry with `run(carry=[".whl"])` and install with bench/gpu_device_run.sh.
# Ray's wheel (79 MB) is over one call's 64 MiB limit: it is rebuilt without its Java jars
# (unused by the Python API), about 47 MB. .whl/ stays out of git (.git/info/exclude).
#   bash bench/make_gpu_wheels.sh        # here, on the CPU machine (needs PyPI)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUTDIR=${OUTDIR:-.whl}
mkdir -p "$OUTDIR"
EXCLUDE="$(git rev-parse --git-common-dir)/info/exclude"  # a worktree's .git is a file
grep -qx "/.whl/" "$EXCLUDE" 2>/dev/null || echo "/.whl/" >> "$EXCLUDE"
fetch() {  # pip download for the device's interpreter, binary wheels only, no dependencies
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$OUTDIR" "$@"
}
fetch megatron-core==0.16.1 datasets==5.2.0 dill multiprocess tomlkit platformdirs \
  jsonschema jsonschema-specifications referencing rpds-py pytest-timeout
if ! ls "$OUTDIR"/ray-2.60.0-*linux_x86_64.whl >/dev/null 2>&1; then
  work=$(mktemp -d)
  fetch -d "$work" ray==2.60.0
  "$PY" -m pip install -q wheel
  "$PY" -m wheel unpack -d "$work/unpacked" "$work"/ray-2.60.0-*.whl
  root=$(ls -d "$work"/unpacked/ray-2.60.0)
  rm -rf "$root/ray/jars"
  sed -i '/^ray\/jars\//d' "$root"/ray-2.60.0.dist-info/RECORD
  mkdir -p "$work/packed"
  "$PY" -m wheel pack -d "$work/packed" "$root"
  mv "$work"/packed/ray-2.60.0-*.whl "$OUTDIR/"
  rm -rf "$work"
fi
du -sh "$OUTDIR"
