"""weights.init_weights draws each full tensor where the parameter lives (the GPU in a CUDA
run: milliseconds instead of seconds on one host core), seeded by name, without touching the
caller's RNG streams."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch

from ppodeck.engine.train import weights

DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")])]


class Embedding(torch.nn.Module):
    def __init__(self, device: str) -> None:
        super().__init__()
        self.word_embeddings = torch.nn.Embedding(64, 16, device=device)


class TinyGPT(torch.nn.Module):
    """Megatron's names for what init_weights draws: the embedding and one fc1."""

    def __init__(self, device: str) -> None:
        super().__init__()
        self.embedding = Embedding(device)
        self.fc = torch.nn.ModuleDict({"linear_fc1": torch.nn.Linear(16, 32, bias=False,
                                                                     device=device)})


CONFIG = SimpleNamespace(embedding_init_method=functools.partial(torch.nn.init.normal_, std=0.02),
                         init_method=functools.partial(torch.nn.init.normal_, std=0.02),
                         output_layer_init_method=functools.partial(torch.nn.init.normal_,
                                                                    std=0.01))


def drawn(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    weights.init_weights(model, CONFIG, seed, "actor", tp_rank=0, tp_size=1)
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("device", DEVICES)
def test_init_is_seeded_on_the_parameters_device_and_leaves_the_rng_alone(device: str) -> None:
    models = [TinyGPT(device) for _ in range(3)]
    torch.manual_seed(11)
    expected_next = torch.rand(3, device=device)
    torch.manual_seed(11)
    a, b, other = drawn(models[0], 5), drawn(models[1], 5), drawn(models[2], 6)
    assert torch.equal(torch.rand(3, device=device), expected_next)  # caller's stream kept
    for name in a:
        assert a[name].device.type == device
        assert torch.equal(a[name], b[name]) and not torch.equal(a[name], other[name]), name
    assert 0.015 < float(a["embedding.word_embeddings.weight"].std()) < 0.025
