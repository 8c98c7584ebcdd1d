"""`ppodeck prepare`: local fixtures offline, the skip on rerun, the offline message, sources.

No test touches the hub: HF_HUB_OFFLINE=1 everywhere, and the one download test replaces
snapshot_download with a fake that writes files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ppodeck.app.cli.prepare import register, rich_tqdm
from ppodeck.engine.config.model import RunConfig
from ppodeck.engine.config.resolve import resolve
from ppodeck.engine.launch import prepare
from ppodeck.engine.launch.prepare import (
    PrepareError,
    missing_inputs,
    plan_prepare,
    sources_from_provenance,
)

REPO = Path(__file__).resolve().parents[2]
TINY_FLAGS = """
num-layers = 2
hidden-size = 32
ffn-hidden-size = 64
num-attention-heads = 4
group-query-attention = true
num-query-groups = 2
kv-channels = 8
vocab-size = 64
swiglu = true
normalization = "RMSNorm"
disable-bias-linear = true
use-rotary-position-embeddings = true
advantage-estimator = "ppo"
"""


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PPODECK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PPODECK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never the hub in tests
    monkeypatch.delenv("PPODECK_PRESET_PATH", raising=False)
    return tmp_path


def cli() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """A root callback keeps `prepare` a subcommand."""

    register(app)
    return app


def invoke(*args: str):  # noqa: ANN201
    return CliRunner().invoke(cli(), ["prepare", *args])


def write_preset(tmp_path: Path, *, sources: str = "", flags: str = "") -> Path:
    path = tmp_path / "tiny-prep.toml"
    path.write_text(textwrap.dedent(f"""\
        schema_version = 1
        name = "tiny-prep"
        description = "prepare test"

        [provenance]
        author = "tests"

        [provenance.sources]
        {sources}

        [flags]
        hf-checkpoint = "${{PPODECK_HOME}}/models/Tiny"
        ref-load = "${{PPODECK_HOME}}/models/Tiny_torch_dist"
        prompt-data = "${{PPODECK_HOME}}/datasets/tiny/prompts.jsonl"
        """) + TINY_FLAGS + flags)
    return path


def write_tiny_hf(path: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=32,
        tie_word_embeddings=True)).save_pretrained(path)


def write_prompts(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"prompt": "1+1=", "label": "2"}\n')


# ------------------------------------------------------------------------------------------
def test_light_modules_import_no_heavy_packages() -> None:
    code = ("import sys, ppodeck.app.cli.prepare, ppodeck.engine.launch.prepare; "
            "heavy = [m for m in ('torch', 'ray', 'megatron', 'transformers', 'datasets', "
            "'huggingface_hub') if m in sys.modules]; print(heavy); sys.exit(bool(heavy))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_offline_local_files_convert_then_skip_on_rerun(isolated_env: Path) -> None:
    home = isolated_env / "home"
    write_tiny_hf(home / "models" / "Tiny")
    write_prompts(home / "datasets" / "tiny" / "prompts.jsonl")
    preset = write_preset(isolated_env, sources='hf-checkpoint = "someone/Tiny"\n'
                                               'prompt-data = "someone/tiny-data"')
    result = invoke(str(preset), "--yes")
    assert result.exit_code == 0, result.output
    assert "convert to torch_dist" in result.output and "Ready" in result.output
    out = home / "models" / "Tiny_torch_dist"
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "release"
    assert (out / "release" / "metadata.json").is_file()
    stamp = (out / "release" / "metadata.json").stat().st_mtime_ns

    again = invoke(str(preset))  # no --yes needed: nothing to download
    assert again.exit_code == 0, again.output
    assert "already converted (release)" in again.output
    assert "nothing to do" in again.output
    assert (out / "release" / "metadata.json").stat().st_mtime_ns == stamp


def test_offline_missing_files_fail_fast_naming_where_to_put_them(isolated_env: Path) -> None:
    preset = write_preset(isolated_env, sources='hf-checkpoint = "Qwen/Qwen3-4B"\n'
                                               'prompt-data = "zhuzilin/dapo-math-17k"')
    result = invoke(str(preset), "--yes")
    assert result.exit_code == 1
    home = isolated_env / "home"
    message = " ".join(result.output.split())
    assert "offline (HF_HUB_OFFLINE=1 is set)" in message
    assert ("--hf-checkpoint model Qwen/Qwen3-4B: config.json, tokenizer files and "
            f"*.safetensors in {home / 'models' / 'Tiny'}") in message
    assert ("--prompt-data dataset zhuzilin/dapo-math-17k: the file prompts.jsonl in "
            f"{home / 'datasets' / 'tiny'}") in message
    assert "--repo-type dataset" in message and "--set FLAG=PATH" in message
    assert not (home / "models" / "Tiny_torch_dist").exists()  # nothing converted


def test_offline_flag_and_missing_source(isolated_env: Path) -> None:
    write_prompts(isolated_env / "home" / "datasets" / "tiny" / "prompts.jsonl")
    preset = write_preset(isolated_env)  # no sources at all
    result = invoke(str(preset), "--offline")
    assert result.exit_code == 1
    assert "--hf-checkpoint" in result.output and "names no hub repo" in result.output
    preset = write_preset(isolated_env, sources='hf-checkpoint = "someone/Tiny"')
    result = CliRunner(env={"HF_HUB_OFFLINE": ""}).invoke(
        cli(), ["prepare", str(preset), "--offline", "--yes"])
    assert result.exit_code == 1 and "offline (--offline was given)" in result.output


def test_unknown_preset_is_a_usage_error() -> None:
    result = invoke("no-such-preset-anywhere")
    assert result.exit_code == 2 and "unknown preset" in result.output


def test_download_with_a_fake_hub(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    home = isolated_env / "home"
    (home / "models" / "Tiny").mkdir(parents=True)
    (home / "models" / "Tiny" / "config.json").write_text("{}")
    (home / "models" / "Tiny" / "model.safetensors").write_text("x")
    calls = []

    def fake_snapshot_download(repo_id, *, repo_type, revision, local_dir, tqdm_class):  # noqa: ANN001, ANN202
        calls.append((repo_id, repo_type, revision, local_dir))
        with tqdm_class(total=2, desc="Fetching 2 files") as bar:  # what the hub does
            write_prompts(Path(local_dir) / "prompts.jsonl")
            bar.update(2)
        return local_dir

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    monkeypatch.setattr(prepare, "offline_reason", lambda force=False: None)
    preset = write_preset(isolated_env, sources="""hf-checkpoint = "someone/Tiny"
prompt-data = { repo = "someone/tiny-data", revision = "v1" }""")
    preset.write_text(preset.read_text().replace('ref-load = "${PPODECK_HOME}/models/'
                                                 'Tiny_torch_dist"\n', ""))
    result = invoke(str(preset), "--yes")
    assert result.exit_code == 0, result.output
    assert calls == [("someone/tiny-data", "dataset", "v1", str(home / "datasets" / "tiny"))]
    assert (home / "datasets" / "tiny" / "prompts.jsonl").is_file()
    assert "Fetching 2 files" in result.output


# ------------------------------------------------------------------------------------------
# the library side
# ------------------------------------------------------------------------------------------
def test_sources_table_forms_and_errors() -> None:
    sources = sources_from_provenance({"author": "x", "sources": {
        "hf-checkpoint": "Qwen/Qwen3-4B",
        "prompt-data": {"repo": "zhuzilin/dapo-math-17k", "revision": "main"}}})
    assert sources["hf_checkpoint"].repo_type == "model"
    assert sources["prompt_data"].repo_type == "dataset"
    assert sources["prompt_data"].revision == "main"
    assert sources_from_provenance({"author": "x"}) == {}
    with pytest.raises(PrepareError, match="not a flag prepare can fetch"):
        sources_from_provenance({"sources": {"lr": "a/b"}})
    with pytest.raises(PrepareError, match="owner/name"):
        sources_from_provenance({"sources": {"hf-checkpoint": "just-a-name"}})
    with pytest.raises(PrepareError, match='"model" or "dataset"'):
        sources_from_provenance({"sources": {"prompt-data": {"repo": "a/b", "type": "x"}}})


def test_missing_inputs_names_flags(tmp_path: Path) -> None:
    config = RunConfig({"hf_checkpoint": str(tmp_path / "hf"),
                        "ref_load": str(tmp_path / "dist"),
                        "prompt_data": str(tmp_path / "p.jsonl")})
    missing = missing_inputs(resolve(config, os.environ))
    assert [m.split()[0] for m in missing] == ["--hf-checkpoint", "--ref-load", "--prompt-data"]
    assert "latest_checkpointed_iteration.txt" in missing[1]
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "hf" / "model.safetensors").write_text("x")
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "latest_checkpointed_iteration.txt").write_text("release")
    write_prompts(tmp_path / "p.jsonl")
    assert missing_inputs(config) == []  # a RunConfig is resolved first
    synthetic = config.with_values(prompt_data=str(tmp_path / "none.jsonl"),
                                   synthetic_task="copy-digit")
    assert missing_inputs(synthetic) == []


def test_plan_marks_done_steps_and_problems(tmp_path: Path) -> None:
    args = resolve(RunConfig({"hf_checkpoint": str(tmp_path / "hf"),
                              "ref_load": str(tmp_path / "dist")}), os.environ)
    plan = plan_prepare(args, {})
    assert len(plan.problems) == 1 and "names no hub repo" in plan.problems[0]
    sources = sources_from_provenance({"sources": {"hf-checkpoint": "a/b"}})
    plan = plan_prepare(args, sources)
    assert [(s.kind, s.done) for s in plan.steps] == [("download", False), ("convert", False)]
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "latest_checkpointed_iteration.txt").write_text("12")
    plan = plan_prepare(args, sources)
    assert plan.steps[1].done and "iteration 12" in plan.steps[1].detail


def test_converter_crash_quotes_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "fake-python"
    fake.write_text("#!/bin/sh\necho '{\"msg\": \"reading\"}'\necho 'Traceback: boom' >&2\n"
                    "exit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    step = prepare.Step("convert", "ref_load", tmp_path / "out", tmp_path / "out", "hf")
    seen: list[str] = []
    with pytest.raises(PrepareError, match=r"crashed \(exit status 3\)") as caught:
        prepare.convert(step, {}, on_message=seen.append, log_path=tmp_path / "c.log")
    assert seen == ["reading"] and "Traceback: boom" in str(caught.value)
    assert str(tmp_path / "c.log") in str(caught.value)


def test_rich_tqdm_drives_a_rich_task() -> None:
    from rich.console import Console
    from rich.progress import Progress

    progress = Progress(console=Console(file=open("/dev/null", "w")))  # noqa: SIM115
    bar = rich_tqdm(progress)(total=0, desc="Downloading bytes", unit="B")
    bar.total = 10  # huggingface_hub grows totals as it discovers files
    bar.update(4)
    bar.close()
    task = progress.tasks[0]
    assert (task.completed, task.total, task.description) == (4, 10, "Downloading bytes")
    assert json.dumps(task.fields) == '{"unit": "B"}'
