"""Heavy half of `ppodeck prepare`: `python -m ppodeck.engine.train.prepare_worker convert ...`.

Speaks JSON lines on stdout so the CLI can draw progress without importing torch:
{"msg": "..."} per stage, then {"done": "<out dir>"} or {"error": "..."}. Everything else
(megatron's warnings, tracebacks) goes to stderr, which the CLI keeps in a log file.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Any


def _emit(**event: Any) -> None:  # noqa: ANN401
    print(json.dumps(event), flush=True)


def _convert(args: argparse.Namespace) -> int:
    from .checkpoint import convert_hf_to_torch_dist

    model_flags = json.loads(args.model_flags or "{}")
    out = convert_hf_to_torch_dist(args.hf_checkpoint, args.out, model_flags,
                                   log=lambda msg: _emit(msg=msg))
    _emit(done=str(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ppodeck.engine.train.prepare_worker")
    sub = parser.add_subparsers(dest="command", required=True)
    convert = sub.add_parser("convert", help="HF checkpoint -> Megatron torch_dist (release)")
    convert.add_argument("--hf-checkpoint", required=True)
    convert.add_argument("--out", required=True)
    convert.add_argument("--model-flags", default="{}",
                         help="JSON of the run's model flags to cross-check (dest -> value)")
    args = parser.parse_args(argv)
    try:
        return _convert(args)
    except Exception as exc:  # the CLI shows this line; the traceback goes to its log
        traceback.print_exc()
        _emit(error=f"{type(exc).__name__}: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
