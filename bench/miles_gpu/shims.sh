#!/usr/bin/env bash
# The sglang-side shims that let miles (radixark/miles, written against its sglang-miles fork)
# run on stock sglang 0.5.17, applied to the CARRIED sglang site, never to the miles checkout;
# then the record PPO Deck shows of them ($PPODECK_MILES_DEPARTURES: the run's log and events).
#   bash bench/miles_gpu/shims.sh SGL_SITE STUB_DIR DEPARTURES_JSON
set -euo pipefail
SGL=$1; STUB=$2; RECORD=$3
mkdir -p "$STUB/mooncake"
PS=$SGL/sglang/srt/distributed/parallel_state.py
grep -q "class RankParallelismConfig" "$PS" || cat >> "$PS" <<'EOT'


class RankParallelismConfig:  # placeholder: sglang-miles only; imported by miles' p2p weight sync
    pass


class ParallelismContext:  # placeholder, as above
    pass
EOT
PM=$SGL/sglang/srt/model_loader/parameter_mapper.py
[ -f "$PM" ] || printf 'class ParameterMapper:  # placeholder (sglang-miles only)\n    pass\n' > "$PM"
HS=$SGL/sglang/srt/entrypoints/http_server.py
grep -q "_miles_begin_weight_update" "$HS" || cat >> "$HS" <<'EOT'


@app.post("/begin_weight_update")  # sglang-miles route; no-op on stock 0.5.17 (no quantized refit)
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def _miles_begin_weight_update(request: Request):
    return ORJSONResponse({"success": True, "message": "no-op on sglang 0.5.17"})


@app.post("/end_weight_update")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def _miles_end_weight_update(request: Request):
    return ORJSONResponse({"success": True, "message": "no-op on sglang 0.5.17"})
EOT
# miles/backends/sglang_utils/sglang_engine.py assigns server_args.host after resolution;
# stock 0.5.17's ServerArgs raises on any such assignment. Let `host` through (sglang side).
SA=$SGL/sglang/srt/server_args.py
grep -q "ppodeck shim: host" "$SA" || sed -i \
  's/^            not name.startswith("_")$/            not name.startswith("_") and name != "host"  # ppodeck shim: host (miles)/' "$SA"
grep -q "ppodeck shim: host" "$SA"
: > "$STUB/mooncake/__init__.py"
printf 'class TransferEngine:  # stub: miles imports it at module level (p2p/RDMA only)\n    def __init__(self, *a, **k):\n        raise RuntimeError("mooncake stub")\n' > "$STUB/mooncake/engine.py"
cp "$(dirname "$0")/stub_soundfile.py" "$STUB/soundfile.py"
cat > "$RECORD" <<'EOT'
[
 {"what": "sglang 0.5.17 (stock) instead of miles' sglang-miles fork",
  "why": "the fork is not published as a wheel; its extra names are shimmed in the carried sglang: RankParallelismConfig and ParallelismContext placeholders, a ParameterMapper module, no-op /begin_weight_update and /end_weight_update routes (no quantized refit)"},
 {"what": "sglang ServerArgs.host assignable after resolution (carried sglang, not miles)",
  "why": "miles' sglang_engine.py strips brackets from server_args.host after sglang resolved its args; stock 0.5.17 refuses any such assignment"},
 {"what": "stub modules soundfile and mooncake on PYTHONPATH",
  "why": "sglang's HTTP server imports soundfile for realtime audio and miles imports mooncake for RDMA weight transfer, at module level; neither is used by this run"},
 {"what": "python-multipart, polars, pylatexenc, sglang-router, Ray 2.60 carried as wheels",
  "why": "the machine's image lacks them and has no network"},
 {"what": "MILES_SGLANG_DUMMY_LOAD=1 with an empty --load and --ref-load",
  "why": "random init: no checkpoint exists for this shape; the actor's weights reach SGLang by the first weight update"}
]
EOT
python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$RECORD"
echo "shims applied; departures recorded in $RECORD"
