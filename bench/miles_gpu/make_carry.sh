#!/usr/bin/env bash
# Builds the one wheel-and-source set that both GPU runs of issue 43 need, cut into device-call
# parts (.carry-miles/pNN, about 58 MiB each, plus .carry-miles/bin/carry-parts):
#   whl/     Ray 2.60 without its jars, megatron-core 0.16.1 & co. (bench/make_gpu_wheels.sh):
#            our engine's set
#   sglang/  the lean sglang 0.5.17 set, stripped (bench/make_sglang_wheels.sh's recipe)
#   tf/      transformers 5.12.1 + tokenizers 0.22.2 (the image's 5.17 breaks sglang)
#   miles/   what miles needs beyond the image and the above: polars, pylatexenc,
#            python-multipart (FastAPI's form routes), sglang-router 0.3.2
#   src/     `git archive` of radixark/miles at MILES_REF and of radixark/Megatron-LM's
#            miles-main (megatron/ and miles_megatron_plugins/ only): their source, never ours
# Run here (CPU machine, PyPI reachable):  bash bench/miles_gpu/make_carry.sh
# MILES_GIT / MEGATRON_GIT point at git directories holding those commits (the fetch tool's
# mirrors by default). Nothing of it goes into git (.git/info/exclude).
set -euo pipefail
cd "$(dirname "$0")/../.."
TOOLS=${SGLANG_TOOLS:-../shared/tools}
PART_MIB=${PART_MIB:-58}
MILES_REF=${MILES_REF:-31f1ca961}
MEGATRON_REF=${MEGATRON_REF:-miles-main}
# git directories of radixark/miles and radixark/Megatron-LM (clones or mirrors of them)
MILES_GIT=${MILES_GIT:?set MILES_GIT to a git directory of radixark/miles}
MEGATRON_GIT=${MEGATRON_GIT:?set MEGATRON_GIT to a git directory of radixark/Megatron-LM}
. bench/wheel_set_common.sh
exclude_from_git /.whl/ /.sglang-wheels/ /.miles-wheels/ /.carry-miles/
[ -d .whl ] || bash bench/make_gpu_wheels.sh
fetch() {  # DEST WHEEL...: binary cp312 wheels for the device; sglang needs manylinux_2_34 first
  local dest=$1
  shift
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d "$dest" "$@"
}
mkdir -p .sglang-wheels/raw .sglang-wheels/tf .miles-wheels
if [ ! -d .sglang-wheels/lean ]; then
  fetch .sglang-wheels/raw $(grep -v '^#' "$TOOLS/sglang-h200/wheels-sglang-0.5.17-lean.txt")
  "$PY" "$TOOLS/sglang-h200/strip-wheels.py" .sglang-wheels/raw .sglang-wheels/lean
fi
ls .sglang-wheels/tf/transformers-*.whl >/dev/null 2>&1 \
  || fetch .sglang-wheels/tf $(grep -v '^#' "$TOOLS/sglang-h200/wheels-transformers-5.12.1.txt")
fetch .miles-wheels polars==1.42.1 polars-runtime-32==1.42.1 pylatexenc==2.11 \
  python-multipart==0.0.34 sglang-router==0.3.2
stage=$(mktemp -d)
mkdir -p "$stage/sglang" "$stage/tf" "$stage/miles" "$stage/src"
cp .sglang-wheels/lean/*.whl "$stage/sglang/"
cp .sglang-wheels/tf/*.whl "$stage/tf/"
cp .miles-wheels/*.whl "$stage/miles/"
git -C "$MILES_GIT" archive --format=tar.gz --prefix=miles/ "$MILES_REF" > "$stage/src/miles.tar.gz"
git -C "$MEGATRON_GIT" archive --format=tar.gz --prefix=Megatron-LM/ "$MEGATRON_REF" \
  megatron miles_megatron_plugins > "$stage/src/megatron.tar.gz"
{
  echo "miles $(git -C "$MILES_GIT" rev-parse "$MILES_REF")"
  echo "Megatron-LM $MEGATRON_REF $(git -C "$MEGATRON_GIT" rev-parse "$MEGATRON_REF")"
} > "$stage/src/SOURCES"
carry_split "$stage" .carry-miles
show_parts .carry-miles
