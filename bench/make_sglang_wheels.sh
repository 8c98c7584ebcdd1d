#!/usr/bin/env bash
# Builds the SGLang wheel set for the lent H200 (python 3.12, torch 2.11 + CUDA 13 there, no
# network) and cuts it, together with the Ray wheels of bench/make_gpu_wheels.sh, into parts
# that each fit one device call (64 MiB with the working tree):
#   .sglang-wheels/raw       the lean sglang 0.5.17 set as downloaded (46 wheels)
#   .sglang-wheels/lean      the same, sglang-kernel's FA3/Blackwell/InfLLM libraries and
#                            xgrammar's static library stripped (about 97 MB)
#   .sglang-wheels/tf        transformers 5.12.1 + tokenizers 0.22.2 (the image's 5.17 breaks
#                            sglang's config registry); installed into their own --target
#   .carry/pNN               the parts; .carry/bin/carry-parts joins them on the device
# Nothing of it goes into git (.git/info/exclude). Run here, on the CPU machine (needs PyPI):
#   bash bench/make_sglang_wheels.sh           # then bench/gpu_device_run.sh carry/sglang steps
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
TOOLS=${SGLANG_TOOLS:-../shared/tools}
PART_MIB=${PART_MIB:-58}
for path in /.sglang-wheels/ /.carry/ /.whl/; do
  grep -qx "$path" .git/info/exclude 2>/dev/null || echo "$path" >> .git/info/exclude
done
[ -d .whl ] || bash bench/make_gpu_wheels.sh
fetch() {  # binary cp312 wheels for the device; sglang >= 0.5.11 needs manylinux_2_34 first
  local dest=$1
  shift
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d "$dest" "$@"
}
mkdir -p .sglang-wheels/raw .sglang-wheels/tf
fetch .sglang-wheels/raw $(grep -v '^#' "$TOOLS/sglang-h200/wheels-sglang-0.5.17-lean.txt")
fetch .sglang-wheels/tf $(grep -v '^#' "$TOOLS/sglang-h200/wheels-transformers-5.12.1.txt")
rm -rf .sglang-wheels/lean
"$PY" "$TOOLS/sglang-h200/strip-wheels.py" .sglang-wheels/raw .sglang-wheels/lean
# one tree for carry-parts: Ray & co. (.whl), the stripped sglang set, transformers apart
stage=$(mktemp -d)
mkdir -p "$stage/whl" "$stage/sglang" "$stage/tf"
cp .whl/*.whl "$stage/whl/"
cp .sglang-wheels/lean/*.whl "$stage/sglang/"
cp .sglang-wheels/tf/*.whl "$stage/tf/"
rm -rf .carry
bash "$TOOLS/carry-parts" split "$stage" .carry --part-mib "$PART_MIB"
mkdir -p .carry/bin
cp "$TOOLS/carry-parts" .carry/bin/
rm -rf "$stage"
du -sh .whl .sglang-wheels/lean .sglang-wheels/tf .carry/p*
