"""Runs miles' own parse_args() over argvs in one interpreter: a script run by miles' Python
(never imported by PPO Deck, so standard library only at import). Two callers: the oracle
(bench/miles_oracle.py, in its cached CPU environment, many cases) and the parser gate
(engine/miles/parser_gate.py, in the user's own miles environment, one case).

    PYTHON parse_runner.py [--site-root DIR ...] < cases.json

Input: a JSON list of cases on stdin, each {"id", "argv", "env"}. Output: one JSON line per
case on stdout: {"id", "verdict": "accept" | "refuse", "error", "site"}; when miles' parser
cannot even be imported, one line {"id": null, "verdict": "unavailable", "error"} and exit 3.
miles' parser reads sys.argv and os.environ, so each case sets both and restores them after;
argparse's exit on a bad flag is caught as SystemExit and its message read from stderr. A
raise site is named relative to the first --site-root holding its file.

On a machine without CUDA, Megatron's validate_args asks device 0 for its architecture
(training/utils.py:449 at the pinned commit) and would refuse every config for want of a GPU;
the runner then answers those device queries as a Hopper GPU would (_stand_in_gpu), the
machines miles targets. No argument rule is touched: only what the hardware would have
answered. Where torchvision is missing, sglang's import-time names get stand-ins too."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import logging
import os
import sys
import traceback
import types

UNAVAILABLE_EXIT = 3


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
    torch = sys.modules.get("torch")
    if torch is None or torch.cuda.is_available():  # no torch: no device query; a GPU: itself
        return
    try:
        from megatron.training import arguments, utils
    except ImportError:  # a miles without Megatron's arguments (FSDP only): nothing to answer
        return

    def get_device_arch_version() -> int:  # megatron/training/utils.py:449
        return HOPPER

    # arguments.py imported the name itself (`from ...utils import`), so patch both bindings
    utils.get_device_arch_version = get_device_arch_version
    arguments.get_device_arch_version = get_device_arch_version
    # arguments.py:917 asks torch for the capability when --moe-grouped-gemm is set
    torch.cuda.get_device_capability = lambda device=None: (HOPPER, 0)


def _site(tb, roots: list[str]) -> str:
    """The deepest frame inside miles or Megatron: where the refusal was raised, relative to
    the first of `roots` holding it (without roots, from the first /miles/ or /megatron/)."""
    site = ""
    for frame in traceback.extract_tb(tb):
        real = os.path.realpath(frame.filename)
        inside = [r for r in roots if real.startswith(r.rstrip("/") + "/")]
        if inside:
            tail = os.path.relpath(real, inside[0])
            site = f"{tail}:{frame.lineno}"
            continue
        for root in ("/miles/", "/megatron/"):
            if not roots and root in frame.filename:
                tail = frame.filename.split(root, 1)[1]
                site = f"{root.strip('/')}/{tail}:{frame.lineno}"
    return site


def _judge(parse_args, case: dict, roots: list[str]) -> dict:
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
        return {"id": case["id"], "verdict": "refuse", "error": last[:300], "site": "argparse"}
    except BaseException as exc:  # miles raises AssertionError, ValueError, ...
        text = str(exc).strip().splitlines()
        last = f"{type(exc).__name__}: {text[-1] if text else ''}"
        return {
            "id": case["id"],
            "verdict": "refuse",
            "error": last[:300],
            "site": _site(exc.__traceback__, roots),
        }
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv


def _site_roots(argv: list[str]) -> list[str]:
    roots = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--site-root"]
    return [os.path.realpath(root) for root in roots]


def _import_parse_args():
    """miles' parse_args with its stand-ins in place; raises what the import raised."""
    if importlib.util.find_spec("sglang") and not importlib.util.find_spec("torchvision"):
        _hide_torchvision()
    from miles.utils.arguments import parse_args

    _stand_in_gpu()
    return parse_args


def main() -> None:
    cases = json.load(sys.stdin)
    roots = _site_roots(sys.argv[1:])
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            parse_args = _import_parse_args()
    except BaseException as exc:  # a missing module, a broken install: not a verdict
        text = str(exc).strip().splitlines()
        print(
            json.dumps(
                {
                    "id": None,
                    "verdict": "unavailable",
                    "error": f"{type(exc).__name__}: {text[-1] if text else ''}"[:300],
                }
            ),
            flush=True,
        )
        sys.exit(UNAVAILABLE_EXIT)
    logging.disable(logging.CRITICAL)
    for case in cases:
        print(json.dumps(_judge(parse_args, case, roots)), flush=True)


if __name__ == "__main__":
    main()
