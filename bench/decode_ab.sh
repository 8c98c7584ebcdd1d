#!/usr/bin/env bash
# The hf decoder of two commits side by side on the lent H200: the default variant and `ref`,
# alternated (A, B, A, B) so drift between runs shows. Here, before the device call:
#   mkdir -p .carry-head && git archive -o .carry-head/a.tgz A && git archive -o .carry-head/b.tgz B
#   (.carry-head/ in .git/info/exclude; .whl/ from bench/make_gpu_wheels.sh)
# then run(carry=[".whl", ".carry-head"]): bash bench/decode_ab.sh
# Each run's full bench log comes back as $OUT/decode_{a,b}_{1,2}.txt; bench/evidence.py reads them.
set -uo pipefail
OUT=${OUT:?set by the device tool}
D=${DECODE_VARIANT:-packed+decode-attn+graph-sampling+fused-sampling+fused-prefill+folded-norms+skinny-down+cdf-sampling}
for tree in a b; do mkdir -p /tmp/$tree && tar -xzf .carry-head/$tree.tgz -C /tmp/$tree || exit 1; done
cp -r .whl /tmp/b/ && (cd /tmp/b && bash bench/gpu_device_run.sh setup) || exit 1
for round in 1 2; do
  for tree in a b; do
    (cd /tmp/$tree && PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 timeout 170 \
      python3 bench/gpu_decode_profile.py --no-attention --variant "$D" --variant ref \
      > "$OUT/decode_${tree}_$round.txt" 2>&1)
    echo "== $tree $round"; tail -22 "$OUT/decode_${tree}_$round.txt"
  done
done
