"""The sglang rollout backend against a fake SGLang that speaks the documented HTTP API.

The fake implements the request/response JSON of /generate (return_logprob),
/update_weights_from_tensor, /update_weights_from_distributed, /init_weights_update_group,
/release_memory_occupation, /resume_memory_occupation, /flush_cache and /health, and records
what our client sends. Real SGLang cannot be installed here (see the module docstring).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from ppodeck.engine.config.resolve import resolve_values
from ppodeck.engine.host.ports import free_port
from ppodeck.engine.model.shape import ModelShape
from ppodeck.engine.rollout import sglang_backend as sb
from ppodeck.engine.rollout.types import GenOut

REPO = Path(__file__).resolve().parents[2]
EOS = 7
VOCAB = 32


# --------------------------------------------------------------------------------------------
# the fake SGLang server
# --------------------------------------------------------------------------------------------
def fake_response(prompt: list[int], params: dict[str, Any]) -> dict[str, Any]:
    """A deterministic 'generation': the length comes from the seed; short ones end in EOS."""
    max_new = params["max_new_tokens"]
    length = 1 + params.get("sampling_seed", 0) % max_new
    tokens = [(prompt[-1] + j + 1) % VOCAB for j in range(length)]
    tokens = [t if t != EOS else EOS + 1 for t in tokens]
    stopped = length < max_new
    if stopped:
        tokens[-1] = EOS
    logprobs = [[-0.25 * (j + 1), tok, None] for j, tok in enumerate(tokens)]
    return {"output_ids": tokens,
            "meta_info": {"id": "x", "prompt_tokens": len(prompt),
                          "completion_tokens": len(tokens),
                          "finish_reason": ({"type": "stop", "matched": EOS} if stopped
                                            else {"type": "length", "length": max_new}),
                          "output_token_logprobs": logprobs}}


class FakeSGLang:
    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.fail = fail  # an endpoint that answers {"success": false}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:
                fake.handle(self, "GET")

            def do_POST(self) -> None:
                fake.handle(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        body = json.loads(req.rfile.read(length)) if length else None
        path = req.path.lstrip("/").split("?")[0]
        self.calls.append((method, path, body))
        status, out = self.route(method, path, body)
        data = (out if isinstance(out, bytes) else json.dumps(out).encode()) if out is not None \
            else b""
        req.send_response(status)
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    def route(self, method: str, path: str, body: Any) -> tuple[int, Any]:  # noqa: ANN401
        if path == self.fail:
            return 400, {"success": False, "message": f"{path} exploded"}
        if path == "health" and method == "GET":
            return 200, None
        if path == "generate":
            rows, params = body["input_ids"], body["sampling_params"]
            if not body.get("return_logprob"):
                return 400, {"error": {"message": "return_logprob missing"}}
            return 200, [fake_response(r, p) for r, p in zip(rows, params, strict=True)]
        if path in ("update_weights_from_tensor", "update_weights_from_distributed",
                    "init_weights_update_group"):
            return 200, {"success": True, "message": "Succeeded."}
        if path in ("release_memory_occupation", "resume_memory_occupation"):
            return 200, None  # SGLang returns an empty 200
        if path == "flush_cache":
            return 200, b"Cache flushed.\nPlease check backend logs for more details.\n"
        return 404, {"detail": "Not Found"}

    def paths(self) -> list[str]:
        return [p for _, p, _ in self.calls]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers() -> Iterator[list[FakeSGLang]]:
    made = [FakeSGLang(), FakeSGLang()]
    yield made
    for server in made:
        server.close()


def json_serializer(named: sb.NamedTensors) -> str:
    """Stands in for SGLang's pickle serializer so the fake server can read names/shapes."""
    return json.dumps([[n, list(t.shape), sb.dtype_name(t.dtype)] for n, t in named])


# the resolved args the backend reads (engine.config.resolve), with this file's placement
ARGS: dict[str, Any] = {**resolve_values({}, os.environ), "colocate": True, "actor_num_nodes": 1,
                        "actor_num_gpus_per_node": 2, "rollout_num_gpus_per_engine": 1,
                        "offload_rollout": True, "offload_rollout_level": ["kv_cache", "weight"],
                        "rollout_batch_size": 8, "n_samples_per_prompt": 4}
SHAPE = ModelShape(num_layers=2, hidden_size=32, ffn_hidden_size=48, num_attention_heads=4,
                   num_query_groups=2, kv_channels=8, vocab_size=VOCAB, max_sequence_length=64,
                   normalization="RMSNorm", swiglu=True, qk_layernorm=True,
                   add_bias_linear=False)


def generator(servers: list[FakeSGLang], tp: int = 1, **args: Any) -> sb.SGLangGenerator:
    engines = [sb.SGLangHTTPClient(s.url, serializer=json_serializer, tp_size=tp)
               for s in servers]
    return sb.SGLangGenerator(SHAPE, "qwen3", {**ARGS, **args}, engines=engines)


SAMPLING = dict(temperature=0.8, top_p=0.9, top_k=-1, max_new_tokens=5, eos_token_id=EOS,
                pad_token_id=0, seed=42 * 1_000_003 + 3)


# --------------------------------------------------------------------------------------------
# import hygiene and backend choice
# --------------------------------------------------------------------------------------------
def test_import_does_not_import_sglang(tmp_path: Path) -> None:
    """A poisoned `sglang` on the path proves the module never imports it at import time."""
    poison = tmp_path / "sglang"
    poison.mkdir()
    (poison / "__init__.py").write_text("raise ImportError('sglang was imported')\n")
    code = ("import sys; import ppodeck.engine.rollout.sglang_backend as m; "
            "assert 'sglang' not in sys.modules; assert m.sglang_importable(); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"},
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize(("requested", "cuda", "importable", "backend", "words"), [
    ("auto", True, True, "sglang", ["auto picked sglang", "CUDA", "sglang imports"]),
    ("auto", False, True, "hf", ["auto picked hf", "no CUDA device"]),
    ("auto", True, False, "hf", ["auto picked hf", "sglang is not installed"]),
    ("auto", False, False, "hf", ["no CUDA device and sglang is not installed"]),
    ("hf", True, True, "hf", ["hf", "as requested"]),
    ("sglang", True, True, "sglang", ["sglang", "as requested"]),
])
def test_select_backend(requested, cuda, importable, backend, words) -> None:
    name, note = sb.select_backend(requested, cuda, importable)
    assert name == backend
    for word in words:
        assert word in note


def test_select_backend_refuses_sglang_it_cannot_run() -> None:
    with pytest.raises(sb.SGLangUnavailable, match="no CUDA device.*--rollout-backend hf"):
        sb.select_backend("sglang", False, True)
    with pytest.raises(ValueError, match="unknown --rollout-backend"):
        sb.select_backend("vllm", True, True)


# --------------------------------------------------------------------------------------------
# generation
# --------------------------------------------------------------------------------------------
def hf_sampling(temperature: float, top_p: float, top_k: int) -> dict[str, Any]:
    """What the hf backend's logits processors do, as SGLang sampling-param values."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    from ppodeck.engine.rollout.hf_backend import LogProbRecorder, sampling_processors

    out = {"temperature": 1.0, "top_p": 1.0, "top_k": -1}
    for proc in sampling_processors(LogProbRecorder(temperature), temperature, top_p, top_k):
        if isinstance(proc, TemperatureLogitsWarper):
            out["temperature"] = proc.temperature
        elif isinstance(proc, TopKLogitsWarper):
            out["top_k"] = proc.top_k
        elif isinstance(proc, TopPLogitsWarper):
            out["top_p"] = proc.top_p
    return out


@pytest.mark.parametrize(("temperature", "top_p", "top_k"),
                         [(0.8, 0.9, -1), (1.0, 1.0, 20), (0.6, 0.5, 0), (1.0, 1.0, -1)])
def test_sampling_params_match_the_hf_backend(temperature, top_p, top_k) -> None:
    """The same manager sampling dict filters the same way in SGLang and in the hf backend."""
    from ppodeck.engine.rollout.hf_backend import generation_config

    ours = sb.sampling_params(temperature=temperature, top_p=top_p, top_k=top_k,
                              max_new_tokens=17, eos_token_id=EOS, seed=5)
    assert {k: ours[k] for k in ("temperature", "top_p", "top_k")} == \
        hf_sampling(temperature, top_p, top_k)
    hf = generation_config(True, 17, EOS, 0)
    assert ours["max_new_tokens"] == hf.max_new_tokens
    assert ours["stop_token_ids"] == [hf.eos_token_id]
    assert ours["skip_special_tokens"] is False and ours["no_stop_trim"] is True


def test_generate_payloads_and_outputs(servers) -> None:
    gen = generator(servers)
    prompts = [[1, 2, 3], [4, 5], [6]]
    outs = gen.generate(prompts, n_samples=2, **SAMPLING)

    requests = [c for s in servers for c in s.calls if c[1] == "generate"]
    assert [len(r[2]["input_ids"]) for r in requests] == [3, 3]  # 6 rows over 2 engines
    rows = [row for r in requests for row in r[2]["input_ids"]]
    assert rows == [[1, 2, 3], [1, 2, 3], [4, 5], [4, 5], [6], [6]]  # prompt-major
    params = [p for r in requests for p in r[2]["sampling_params"]]
    assert all(r[0] == "POST" and r[2]["return_logprob"] is True for r in requests)
    expected = sb.sampling_params(temperature=0.8, top_p=0.9, top_k=-1, max_new_tokens=5,
                                  eos_token_id=EOS, seed=None)
    for p in params:
        assert {k: v for k, v in p.items() if k != "sampling_seed"} == expected
    seeds = [p["sampling_seed"] for p in params]
    assert len(set(seeds)) == len(seeds)  # the two samples of a prompt differ
    assert seeds == sb.row_seeds(SAMPLING["seed"], 6)

    assert len(outs) == 6 and all(isinstance(o, GenOut) for o in outs)
    for row, param, out in zip(rows, params, outs, strict=True):
        want = fake_response(row, param)
        tokens = want["output_ids"]
        assert out.response_ids == tokens
        assert out.log_probs == [lp for lp, _, _ in want["meta_info"]["output_token_logprobs"]]
        assert out.truncated == (want["meta_info"]["finish_reason"]["type"] == "length")
        assert out.truncated == (EOS not in tokens)


def test_generate_cuts_after_eos_like_the_hf_backend(servers) -> None:
    results = [{"output_ids": [3, EOS, 4],
                "meta_info": {"output_token_logprobs": [[-1.0, 3, None], [-2.0, EOS, None],
                                                        [-3.0, 4, None]],
                              "finish_reason": {"type": "length"}}}]
    (out,) = sb.to_gen_outs(results, EOS, max_new_tokens=3)
    assert out == GenOut(response_ids=[3, EOS], log_probs=[-1.0, -2.0], truncated=False)


def test_generate_rejects_missing_logprobs_and_aborts() -> None:
    with pytest.raises(sb.SGLangError, match="output_token_logprobs"):
        sb.parse_generate_output({"output_ids": [1], "meta_info": {}})
    with pytest.raises(sb.SGLangError, match="aborted"):
        sb.parse_generate_output({"meta_info": {"output_token_logprobs": [],
                                                "finish_reason": {"type": "abort"}}})


# --------------------------------------------------------------------------------------------
# weights and memory
# --------------------------------------------------------------------------------------------
def hf_state_dict() -> dict[str, torch.Tensor]:
    """A real Megatron-named actor state dict through the conversion code (HF names out)."""
    from ppodeck.engine.model.convert import mcore_to_hf

    sd = {"embedding.word_embeddings.weight": torch.randn(VOCAB, 32),
          "decoder.final_layernorm.weight": torch.ones(32)}
    qkv_rows = (4 + 2 * 2) * 8
    for i in range(SHAPE.num_layers):
        m = f"decoder.layers.{i}."
        sd |= {m + "self_attention.linear_qkv.weight": torch.randn(qkv_rows, 32),
               m + "self_attention.linear_proj.weight": torch.randn(32, 32),
               m + "self_attention.q_layernorm.weight": torch.ones(8),
               m + "self_attention.k_layernorm.weight": torch.ones(8),
               m + "mlp.linear_fc1.weight": torch.randn(96, 32),
               m + "mlp.linear_fc2.weight": torch.randn(32, 48),
               m + "input_layernorm.weight": torch.ones(32),
               m + "pre_mlp_layernorm.weight": torch.ones(32)}
    return mcore_to_hf(sd, SHAPE, "qwen3")


def test_weight_push_sends_the_conversion_names(servers) -> None:
    hf = hf_state_dict()
    gen = generator(servers, tp=2)
    gen.bucket_bytes = 8 << 10  # small buckets so the tiny model needs several
    sent = gen.load_weights(hf)
    assert sent == sum(t.numel() * t.element_size() for t in hf.values())
    for server in servers:
        calls = [c[2] for c in server.calls if c[1] == "update_weights_from_tensor"]
        assert len(calls) > 1  # bucketed
        assert [c["flush_cache"] for c in calls] == [False] * (len(calls) - 1) + [True]
        assert all(c["load_format"] is None for c in calls)
        assert all(len(c["serialized_named_tensors"]) == 2 for c in calls)  # one per TP rank
        received = [entry for c in calls
                    for entry in json.loads(c["serialized_named_tensors"][0])]
        assert [name for name, _, _ in received] == list(hf)
        assert [shape for _, shape, _ in received] == [list(t.shape) for t in hf.values()]
        assert "model.layers.0.self_attn.q_norm.weight" in hf  # qwen3 names, really
        assert "lm_head.weight" not in [name for name, _, _ in received]  # tied


def test_default_serializer_round_trips_tensors() -> None:
    """SGLang's wire format: base64 of a ForkingPickler dump of [(name, tensor)]."""
    import base64
    import pickle

    named = [("model.norm.weight", torch.arange(6.0).reshape(2, 3))]
    text = sb.serialize_named_tensors(named)
    assert isinstance(text, str)
    ((name, tensor),) = pickle.loads(base64.b64decode(text))
    assert name == "model.norm.weight"
    torch.testing.assert_close(tensor, named[0][1])


def test_offload_then_onload_releases_resumes_and_flushes(servers) -> None:
    gen = generator(servers)
    off, on = gen.offload(), gen.onload()
    tags = ["cuda_graph", "kv_cache", "weights"]
    # miles' order: the weights come back first, the KV cache and CUDA graphs after the push
    # (the actor wakes up on the same GPU to export; a full KV cache made it OOM on the H200)
    for server in servers:
        assert server.paths() == ["release_memory_occupation", "resume_memory_occupation"]
        assert server.calls[0][2] == {"tags": tags}
        assert server.calls[1][2] == {"tags": ["weights"]}
    assert on["deferred_tags"] == ["cuda_graph", "kv_cache"]
    gen.load_weights(hf_state_dict())
    for server in servers:
        assert server.paths()[-2:] == ["resume_memory_occupation", "flush_cache"]
        assert server.calls[-2][2] == {"tags": ["cuda_graph", "kv_cache"]}
    gen.load_weights(hf_state_dict())  # nothing deferred any more
    assert all(s.paths().count("resume_memory_occupation") == 2 for s in servers)
    # SGLang drops the memory (nothing copied): "released", no copy rate; over HTTP there is
    # no NVML reading of the server's GPU, so no bytes are claimed
    assert off["where"] == "released" and on["where"] == "gpu"
    assert not off["noop"] and not on["noop"]
    assert off["bytes"] == 0 and off["gbps"] is None and off["measured_by"] is None


def test_offload_level_and_no_offload(servers) -> None:
    assert sb.memory_tags(["kv_cache"]) == ["cuda_graph", "kv_cache"]
    gen = generator(servers, offload_rollout=False)
    assert gen.offload()["noop"] and gen.onload()["noop"]
    assert all(s.calls == [] for s in servers)


def test_engine_errors_name_the_endpoint() -> None:
    server = FakeSGLang(fail="update_weights_from_tensor")
    try:
        client = sb.SGLangHTTPClient(server.url, serializer=json_serializer)
        assert client.health()
        with pytest.raises(sb.SGLangError, match="update_weights_from_tensor.*HTTP 400.*exploded"):
            client.update_weights_from_tensor([("a", torch.zeros(1))])
    finally:
        server.close()
    assert not sb.SGLangHTTPClient(server.url).health()  # closed: unhealthy, not a crash
    with pytest.raises(sb.SGLangError, match="failed: nope"):
        sb._check_result("x", (False, "nope"))


def test_distributed_update_payloads(servers) -> None:
    client = sb.SGLangHTTPClient(servers[0].url)
    client.init_weights_update_group("10.0.0.1", 29500, 1, 3, "g", "nccl")
    client.update_weights_from_distributed(["model.norm.weight"], ["bfloat16"], [[32]], "g",
                                           flush_cache=True)
    assert servers[0].calls == [
        ("POST", "init_weights_update_group",
         {"master_address": "10.0.0.1", "master_port": 29500, "rank_offset": 1,
          "world_size": 3, "group_name": "g", "backend": "nccl"}),
        ("POST", "update_weights_from_distributed",
         {"names": ["model.norm.weight"], "dtypes": ["bfloat16"], "shapes": [[32]],
          "group_name": "g", "flush_cache": True}),
    ]


# --------------------------------------------------------------------------------------------
# the in-process engine (a stand-in `sglang` module) and the layout
# --------------------------------------------------------------------------------------------
# sglang 0.5.17's ServerArgs field names, recorded from the real package (see the file's header)
SERVER_ARGS = frozenset(
    line.strip() for line in (Path(__file__).with_name("sglang_server_args_0_5_17.txt")
                              .read_text().splitlines()) if line.strip() and line[0] != "#")


class StubEngine:
    """sglang.Engine as far as the backend uses it; like the real one (ServerArgs is a
    dataclass) it refuses keywords that are not ServerArgs fields."""

    made: list[StubEngine] = []
    flush_ok = True

    def __init__(self, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - SERVER_ARGS)
        if unknown:
            raise TypeError(f"ServerArgs.__init__() got unexpected keyword arguments {unknown}")
        self.kwargs, self.calls = kwargs, []
        StubEngine.made.append(self)

    def generate(self, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append(("generate", kwargs))
        return [fake_response(r, p) for r, p in zip(kwargs["input_ids"],
                                                   kwargs["sampling_params"], strict=True)]

    def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True):
        self.calls.append(("update_weights_from_tensor", [n for n, _ in named_tensors],
                           flush_cache))
        return True, "Succeeded"

    def release_memory_occupation(self, tags=None):
        self.calls.append(("release_memory_occupation", tags))

    def resume_memory_occupation(self, tags=None):
        self.calls.append(("resume_memory_occupation", tags))

    def flush_cache(self):
        self.calls.append(("flush_cache",))
        # the real Engine answers a FlushCacheReqOutput (attributes, not a dict)
        return SimpleNamespace(success=StubEngine.flush_ok,
                               message="" if StubEngine.flush_ok else "pending requests")

    def shutdown(self):
        self.calls.append(("shutdown",))


def test_in_process_engines_get_documented_kwargs(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "sglang", SimpleNamespace(Engine=StubEngine))
    monkeypatch.setattr(sb, "sglang_importable", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    StubEngine.made.clear()
    args = {**ARGS, "actor_num_gpus_per_node": 2, "rollout_num_gpus_per_engine": 2,
            "sglang_mem_fraction_static": 0.7, "bf16": True, "model_init": "random",
            "run_dir": str(tmp_path), "seed": 9, "rollout_max_context_len": 96}
    gen = sb.SGLangGenerator(SHAPE, "qwen3", args)  # no Ray here: engines in-process
    (engine,) = StubEngine.made  # 2 GPUs / 2 per engine
    kw = engine.kwargs
    assert kw["tp_size"] == 2 and kw["mem_fraction_static"] == 0.7
    assert kw["load_format"] == "dummy" and kw["skip_tokenizer_init"] is True
    assert kw["enable_memory_saver"] is True and kw["dtype"] == "bfloat16"
    assert kw["random_seed"] == 9 and kw["context_length"] == 96
    # the stripped sglang-kernel has no FA3: triton unless PPODECK_SGLANG_ATTENTION says
    assert kw["attention_backend"] == "triton" and kw["sampling_backend"] == "pytorch"
    assert kw["cuda_graph_max_bs_decode"] == 32  # 8 prompts x 4 samples on one engine
    assert kw["cuda_graph_bs_decode"] == [1, 4, 8, 16, 32]  # 5 captures, not SGLang's 9
    assert kw["disable_prefill_cuda_graph"] is True  # its capture dominated the start
    assert (Path(kw["model_path"]) / "config.json").is_file()
    config = json.loads((Path(kw["model_path"]) / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["vocab_size"] == VOCAB

    outs = gen.generate([[1, 2]], n_samples=2, **SAMPLING)
    assert len(outs) == 2
    name, call = engine.calls[0]
    assert name == "generate" and call["return_logprob"] is True
    assert call["input_ids"] == [[1, 2], [1, 2]]
    gen.load_weights(hf_state_dict())
    gen.offload()
    gen.onload()
    gen.load_weights(hf_state_dict())
    assert [c[0] for c in engine.calls[1:]][-5:] == [
        "release_memory_occupation", "resume_memory_occupation", "update_weights_from_tensor",
        "resume_memory_occupation", "flush_cache"]
    gen.shutdown()
    assert engine.calls[-1] == ("shutdown",)


@pytest.mark.parametrize(("args", "engines", "bundles", "share"), [
    ({"colocate": True, "actor_num_gpus_per_node": 4, "rollout_num_gpus_per_engine": 1},
     4, [0, 1, 2, 3], 0.2),
    ({"colocate": True, "actor_num_gpus_per_node": 4, "rollout_num_gpus_per_engine": 2},
     2, [0, 2], 0.2),
    ({"colocate": False, "actor_num_gpus_per_node": 2, "rollout_num_gpus": 4,
      "rollout_num_gpus_per_engine": 2}, 2, [2, 4], 0.2),  # its other GPU: the next bundle
])
def test_engine_layout(args, engines, bundles, share) -> None:
    layout = sb.EngineLayout.from_args({"actor_num_nodes": 1, **args})
    assert layout.num_engines == engines
    assert [layout.bundle(i) for i in range(engines)] == bundles
    assert layout.gpus_per_actor() == share
    with pytest.raises(ValueError, match="do not split"):
        sb.EngineLayout.from_args({"colocate": True, "actor_num_gpus_per_node": 3,
                                   "rollout_num_gpus_per_engine": 2})


def test_split_evenly_and_buckets() -> None:
    assert sb.split_evenly(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert sb.split_evenly(1, 2) == [(0, 1), (1, 1)]
    named = [(str(i), torch.zeros(256)) for i in range(5)]  # 1 KiB each
    assert [len(b) for b in sb.iter_buckets(named, 2048)] == [2, 2, 1]
    assert [len(b) for b in sb.iter_buckets(named, 10)] == [1] * 5


# --------------------------------------------------------------------------------------------
# update_weights_from_distributed: our broadcaster against a receiver in another process
# --------------------------------------------------------------------------------------------
def _receiver(conn: Any) -> None:  # noqa: ANN401
    """Plays SGLang's receiving side: join the group, then receive each named broadcast."""
    from ppodeck.engine.rollout.sglang_backend import init_custom_process_group

    group = None
    while True:
        op, payload = conn.recv()
        if op == "init":
            address, port, rank, world, name, backend = payload
            group = init_custom_process_group(backend=backend,
                                              init_method=f"tcp://{address}:{port}",
                                              world_size=world, rank=rank, group_name=name)
            conn.send(("ok", None))
        elif op == "update":
            names, dtypes, shapes = payload
            got = {}
            for n, d, s in zip(names, dtypes, shapes, strict=True):
                tensor = torch.empty(s, dtype=getattr(torch, d))
                group.broadcast(tensor, 0).wait()
                got[n] = tensor
            conn.send(("ok", got))
        else:
            return


class PipeEngine:
    """Forwards the two distributed calls to the receiver process (blocking, like SGLang)."""

    def __init__(self, conn: Any) -> None:  # noqa: ANN401
        self.conn, self.received = conn, {}

    def init_weights_update_group(self, *args: Any) -> None:
        self.conn.send(("init", args))
        assert self.conn.recv()[0] == "ok"

    def update_weights_from_distributed(self, names, dtypes, shapes, group_name, flush_cache):
        self.conn.send(("update", (names, dtypes, shapes)))
        status, got = self.conn.recv()
        self.received.update(got)


def test_distributed_weight_sync_broadcasts_every_tensor() -> None:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_receiver, args=(child,), daemon=True)
    proc.start()
    try:
        engine = PipeEngine(parent)
        sync = sb.DistributedWeightSync([engine], "127.0.0.1", free_port(), tp_size=1,
                                        backend="gloo", bucket_bytes=4 << 10,
                                        group_name="ppodeck_test_sync")
        sync.connect(timeout_s=60)
        hf = {k: v.to(torch.bfloat16) for k, v in hf_state_dict().items()}
        assert sync.push(list(hf.items())) == sum(t.numel() * 2 for t in hf.values())
        assert list(engine.received) == list(hf)
        for name, tensor in hf.items():
            assert engine.received[name].dtype == torch.bfloat16
            torch.testing.assert_close(engine.received[name], tensor)
    finally:
        parent.send(("stop", None))
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()


def test_stub_refuses_what_sglang_refuses() -> None:
    with pytest.raises(TypeError, match="cuda_graph_max_bs"):
        StubEngine(model_path="m", cuda_graph_max_bs=8)  # 0.5.17 spells it ..._decode
    assert {"attention_backend", "enable_memory_saver", "random_seed"} <= SERVER_ARGS


def test_engine_kwargs_read_resolved_args_as_they_are() -> None:
    kw = sb.engine_kwargs({**ARGS, "seed": 0}, "/m", random_weights=False, rank=1,
                          num_engines=2)
    assert kw["random_seed"] == 1  # seed 0 is a seed, not "unset"
    assert kw["cuda_graph_max_bs_decode"] == 16 and "load_format" not in kw
    assert set(kw) <= SERVER_ARGS


def test_in_process_flush_cache_failure_is_raised(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "sglang", SimpleNamespace(Engine=StubEngine))
    monkeypatch.setattr(StubEngine, "flush_ok", False)
    actor = sb.SGLangEngineActor({"model_path": "m", "base_gpu_id": 0})
    with pytest.raises(sb.SGLangError, match="flush_cache failed: pending requests"):
        actor.flush_cache()


def test_release_resume_report_what_nvml_saw(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "sglang", SimpleNamespace(Engine=StubEngine))
    readings = iter([5 << 30, 40 << 30, 2 << 30, 2 << 30, 38 << 30])
    monkeypatch.setattr(sb, "nvml_used_bytes", lambda: next(readings))
    StubEngine.made.clear()
    actor = sb.SGLangEngineActor({"model_path": "m", "base_gpu_id": 0})
    assert actor.ready()["nvml_used_bytes"] == 5 << 30
    gen = sb.SGLangGenerator(SHAPE, "qwen3", {**ARGS, "actor_num_gpus_per_node": 1},
                             engines=[actor])
    assert "sglang engine 0: started in" in gen.notes[0]
    off, on = gen.offload(), gen.onload()
    assert off["bytes"] == 38 << 30 and off["where"] == "released" and off["copied"] is False
    assert on["bytes"] == 36 << 30 and on["where"] == "gpu" and on["measured_by"] == "nvml"
    assert off["gbps"] is None


def test_ipc_weights_travel_as_a_flattened_bucket(servers) -> None:
    from ppodeck.engine.model.weight_transfer import IpcWeights

    gen = generator(servers, tp=2, rollout_num_gpus_per_engine=2)  # one payload per TP rank
    handles = IpcWeights(payload="c2VyaWFsaXplZA==", nbytes=1234, count=3, flatten_seconds=0.0)
    assert gen.load_weights(handles) == 1234
    for server in servers:
        ((_, path, body),) = server.calls
        assert path == "update_weights_from_tensor"
        assert body["load_format"] == "flattened_bucket" and body["flush_cache"] is True
        assert body["serialized_named_tensors"] == [handles.payload] * 2
