"""Runs miles' own parse_args() over many argvs in one interpreter, inside the oracle's
environment (bench/miles_oracle.py builds it); never imported by PPO Deck.

Input: a JSON list of cases on stdin, each {"id", "argv", "env"}. Output: one JSON line per
case on stdout: {"id", "verdict": "accept" | "refuse", "error", "site"}. miles' parser reads
sys.argv and os.environ, so each case sets both and restores them after; argparse's exit on a
bad flag is caught as SystemExit and its message read from stderr.

Megatron's validate_args asks CUDA device 0 for its architecture (training/utils.py:449 at
the pinned commit), which on a CPU machine refuses every config for want of a GPU; the runner
answers those device queries as a Hopper GPU would (_stand_in_gpu), the machines miles
targets. No argument rule is touched: only what the hardware would have answered."""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import logging
import os
import sys
import traceback
import types


def _hide_torchvision() -> None:
    """torchvision has no CPU wheel on the index, and sglang imports its names at import time
    only. transformers must first decide torchvision is absent (it caches that), then
    stand-in modules satisfy sglang's imports and its image-processor registrations become
    no-ops. Argument parsing never decodes an image nor looks a processor up."""
    import transformers
    import transformers.image_utils  # noqa: F401  (caches "torchvision unavailable")

    class ImageProcessorRegistry:  # sglang registers its image processors at import
        register = staticmethod(lambda *args, **kwargs: None)

    transformers.AutoImageProcessor = ImageProcessorRegistry
    from transformers.utils import import_utils
    message = import_utils.BACKENDS_MAPPING["torchvision"][1]
    import_utils.BACKENDS_MAPPING["torchvision"] = (lambda: True, message)

    sys.meta_path.insert(0, _TorchvisionStandIn())


class _TorchvisionStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of torchvision.* resolve to modules whose every attribute is a placeholder
    that refuses to run: enough for sglang's import-time names, useless for real work."""

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _placeholder_attribute
        return module

    def exec_module(self, module):
        return None


def _placeholder_attribute(name: str):
    if name.startswith("__"):
        raise AttributeError(name)

    class Placeholder:
        def __init__(self, *args, **kwargs):
            raise RuntimeError(f"torchvision stand-in of the parse oracle: {name}")

    return Placeholder


HOPPER = 9  # compute capability major of an H100/H200, the GPUs miles' scripts target


def _stand_in_gpu() -> None:
    """Stand-ins for the CUDA device queries validate_args makes while parsing, so a CPU
    machine judges the flags rather than its lack of a GPU. Each answers what a Hopper GPU
    would; none changes which flags are accepted except through that answer (e.g. Megatron's
    TP/CP > 1 branch for pre-Blackwell GPUs keeps applying, as it would on an H100). Patched
    on the function objects after import; miles' and Megatron's files are left unedited."""
    import torch
    from megatron.training import arguments, utils

    def get_device_arch_version() -> int:  # megatron/training/utils.py:449
        return HOPPER

    # arguments.py imported the name itself (`from ...utils import`), so patch both bindings
    utils.get_device_arch_version = get_device_arch_version
    arguments.get_device_arch_version = get_device_arch_version
    # arguments.py:917 asks torch for the capability when --moe-grouped-gemm is set
    torch.cuda.get_device_capability = lambda device=None: (HOPPER, 0)


def _site(tb) -> str:
    """The deepest frame inside miles or Megatron: where the refusal was raised."""
    site = ""
    for frame in traceback.extract_tb(tb):
        for root in ("/miles/", "/megatron/"):
            if root in frame.filename:
                tail = frame.filename.split(root, 1)[1]
                site = f"{root.strip('/')}/{tail}:{frame.lineno}"
    return site


def _judge(parse_args, case: dict) -> dict:
    saved_env, saved_argv = dict(os.environ), sys.argv
    os.environ.update(case.get("env", {}))
    sys.argv = ["train.py", *case["argv"]]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            parse_args()
        return {"id": case["id"], "verdict": "accept", "error": "", "site": ""}
    except SystemExit:
        lines = [ln for ln in stderr.getvalue().splitlines() if ln.strip()]
        last = lines[-1] if lines else "argparse exit"
        return {"id": case["id"], "verdict": "refuse", "error": last[:300],
                "site": "argparse"}
    except BaseException as exc:  # miles raises AssertionError, ValueError, ...
        text = str(exc).strip().splitlines()
        last = f"{type(exc).__name__}: {text[-1] if text else ''}"
        return {"id": case["id"], "verdict": "refuse", "error": last[:300],
                "site": _site(exc.__traceback__)}
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv


def main() -> None:
    cases = json.load(sys.stdin)
    _hide_torchvision()
    from miles.utils.arguments import parse_args
    _stand_in_gpu()
    logging.disable(logging.CRITICAL)
    for case in cases:
        print(json.dumps(_judge(parse_args, case)), flush=True)


if __name__ == "__main__":
    main()
