"""`--megatron-to-hf-mode bridge`: HF <-> Megatron weights through NVIDIA Megatron-Bridge.

Megatron-Bridge is optional and not installed on the project's machines, so this path has never
run here; it is written against Megatron-Bridge's documented AutoBridge API
(`from_hf_pretrained`, `load_hf_weights`, `export_hf_weights`). `raw` mode (engine/model/convert.py)
is the tested default. The critic's value head has no HF counterpart in either mode: it keeps its
fresh initialization, and the worker says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

INSTALL_HINT = ("--megatron-to-hf-mode bridge needs Megatron-Bridge, which is not installed here: "
                "`pip install megatron-bridge` (a GPU machine with transformer-engine), or use "
                "--megatron-to-hf-mode raw (PPO Deck's own converter: Llama, Qwen2 and Qwen3)")


class BridgeUnavailable(RuntimeError):
    """str() is the user-facing message with the install hint."""


def auto_bridge(hf_checkpoint: str | None) -> Any:  # noqa: ANN401 - megatron.bridge.AutoBridge
    try:
        from megatron.bridge import AutoBridge
    except ImportError as err:
        raise BridgeUnavailable(INSTALL_HINT) from err
    if not hf_checkpoint:
        raise BridgeUnavailable("--megatron-to-hf-mode bridge reads the architecture from "
                                "--hf-checkpoint, which is not set")
    return AutoBridge.from_hf_pretrained(hf_checkpoint)


def load_hf_weights(bridge: Any, model: torch.nn.Module, role: str,  # noqa: ANN401
                    note: Callable[[str], None]) -> None:
    if role == "critic":
        head = model.output_layer
        bridge.load_hf_weights([model])
        model.output_layer = head  # the bridge may map lm_head; the value head stays fresh
        note("critic value head freshly initialized (bridge mode: it has no HF counterpart)")
        return
    bridge.load_hf_weights([model])


def export_hf_weights(bridge: Any, model: torch.nn.Module) -> dict[str, torch.Tensor]:  # noqa: ANN401
    return {name: tensor.detach().cpu() for name, tensor in
            bridge.export_hf_weights([model], cpu=True)}
