"""`--megatron-to-hf-mode bridge` without Megatron-Bridge installed: a clear error, at once."""

from __future__ import annotations

import importlib.util
import os

import pytest

from ppodeck.engine.train.bridge import INSTALL_HINT, BridgeUnavailable, auto_bridge


@pytest.mark.skipif(importlib.util.find_spec("megatron.bridge") is not None,
                    reason="Megatron-Bridge is installed here")
def test_bridge_mode_without_megatron_bridge_names_the_install_and_the_alternative():
    with pytest.raises(BridgeUnavailable) as err:
        auto_bridge("/some/hf/dir")
    assert str(err.value) == INSTALL_HINT
    assert "pip install megatron-bridge" in str(err.value)
    assert "--megatron-to-hf-mode raw" in str(err.value)


def test_worker_refuses_bridge_mode_before_building_anything(monkeypatch):
    from ppodeck.engine.config import resolve
    from ppodeck.engine.presets import load_preset, resolve_preset
    from ppodeck.engine.train.worker import train_worker

    if importlib.util.find_spec("megatron.bridge") is not None:
        pytest.skip("Megatron-Bridge is installed here")
    config = resolve_preset(load_preset("tiny-cpu")).with_values(megatron_to_hf_mode="bridge")
    with pytest.raises(BridgeUnavailable):
        train_worker("actor", 0, 1, "127.0.0.1", 1, dict(resolve(config, os.environ)))
