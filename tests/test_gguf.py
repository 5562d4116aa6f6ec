"""GGUF as input (issue 48, item 1): a tiny Llama written as a real GGUF file (alcheck/testing/tiny_gguf.py,
gguf's own writer, llama.cpp's names and Q/K row order) converts into a folder that is the HF model it
came from: the same logits, token ids and chat template, the same `alcheck run` rows; the converted
folder is reused, recorded in run.json and covered by the resume fingerprint; what cannot be converted
is refused in one line, exit 2. Every conversion goes to a temporary $ALCHECK_CACHE_DIR."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner
from conftest import interrupt_at_cell, invoke, one_line_error

from alcheck.cli.main import cli
from alcheck.models.hub import resolve_checkpoint
from alcheck.testing.tiny import make_tiny_target
from alcheck.testing.tiny_gguf import write_tiny_gguf

RUN = ["--method", "ngram", "--prompt-lookup-min", "1", "--prompt-lookup-max", "3", "--limit", "2"]
RUN += ["--max-tokens", "8", "--ks", "1", "--repeats", "1", "--reference", "none"]
LAYER_NAMES = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up"]
LLAMA_CPP_NAMES = {"token_embd.weight", "output_norm.weight", "output.weight"} | {
    f"blk.{i}.{n}.weight" for i in range(2) for n in [*LAYER_NAMES, "ffn_down"]
}
TEXTS = ["The quick brown fox, 12345!  ok", "<|eot_id|>hi there\n\nx", "héllo wörld ☃ Paris"]


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory):
    """Conversions go here, never to the user's cache."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("cache")
        mp.setenv("ALCHECK_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf")


@pytest.fixture(scope="module")
def hf_dir(root):
    return make_tiny_target(root / "hf", num_layers=2, hidden_size=64)


@pytest.fixture(scope="module")
def gguf_file(hf_dir, root):
    return write_tiny_gguf(hf_dir, root / "tiny.gguf")


@pytest.fixture(scope="module")
def converted(gguf_file):
    return resolve_checkpoint(str(gguf_file), "target")


@pytest.fixture(scope="module")
def other(root):
    """Another checkpoint (seed 1, tied embeddings) as (HF folder, GGUF file)."""
    hf = make_tiny_target(root / "hf-other", num_layers=2, seed=1, tie_word_embeddings=True)
    return hf, write_tiny_gguf(hf, root / "other.gguf")


def hf_logits(directory, seqs) -> list[torch.Tensor]:
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
    with torch.no_grad():
        return [model(torch.tensor([s])).logits[0] for s in seqs]


def sequences(n=3) -> list[list[int]]:
    g = torch.Generator().manual_seed(5)
    return [torch.randint(5, 320, (length,), generator=g).tolist() for length in (3, 11, 24)[:n]]


def assert_same_model(hf, conv):
    seqs = sequences()
    for want, got in zip(hf_logits(hf, seqs), hf_logits(conv, seqs)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def gguf_tensors(path) -> dict:
    import gguf

    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def test_llama_cpp_layout(gguf_file, other):
    import gguf

    fields = gguf.GGUFReader(str(gguf_file)).fields
    expected = {
        "general.architecture": "llama",
        "llama.block_count": 2,
        "llama.embedding_length": 64,
        "llama.feed_forward_length": 128,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
        "llama.rope.dimension_count": 16,
        "tokenizer.ggml.model": "gpt2",
    }
    assert {key: fields[key].contents() for key in expected} == expected
    assert set(gguf_tensors(gguf_file)) == LLAMA_CPP_NAMES
    assert set(gguf_tensors(other[1])) == LLAMA_CPP_NAMES - {"output.weight"}  # tied: no head of its own


def test_f32_gguf_converts_to_the_same_model(hf_dir, gguf_file, converted, root):
    source = json.loads((converted / "gguf_source.json").read_text())
    assert source["sha256"] == hashlib.sha256(gguf_file.read_bytes()).hexdigest()
    assert source["quantization"] == {"F32": len(LLAMA_CPP_NAMES)}
    assert (source["file"], source["architecture"], source["model_type"]) == ("tiny.gguf", "llama", "llama")
    only = root / "only"
    only.mkdir()
    shutil.copy(gguf_file, only / gguf_file.name)
    assert resolve_checkpoint(str(only), "target") == converted  # a folder holding just the file
    assert_same_model(hf_dir, converted)


def test_tied_gguf_converts_to_the_same_model(other):
    hf, file = other
    conv = resolve_checkpoint(str(file), "target")
    assert json.loads((conv / "config.json").read_text())["tie_word_embeddings"] is True
    assert_same_model(hf, conv)


def test_tokenizer_and_chat_template_come_from_the_file(hf_dir, converted):
    from transformers import AutoTokenizer

    from alcheck.prompts.protocols import build_prompt_ids

    ours, theirs = AutoTokenizer.from_pretrained(str(hf_dir)), AutoTokenizer.from_pretrained(str(converted))
    for text in TEXTS:
        assert theirs(text)["input_ids"] == ours(text)["input_ids"], text
    turns = ["What is the capital of France?"]
    messages = [{"role": "user", "content": turns[0]}]
    render = lambda tok: tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)  # noqa: E731
    assert render(theirs) == render(ours) and render(ours).startswith("<|begin_of_text|>")
    assert build_prompt_ids(theirs, None, turns) == build_prompt_ids(ours, None, turns)


def test_q8_0_gguf_loads_as_its_dequantized_weights(hf_dir, root):
    from safetensors.torch import load_file

    file = write_tiny_gguf(hf_dir, root / "tiny-q8.gguf", quant="Q8_0")
    conv = resolve_checkpoint(str(file), "target")
    source = json.loads((conv / "gguf_source.json").read_text())
    assert source["quantization"] == {"F32": 5, "Q8_0": 16}  # the norms stay F32
    want, got = load_file(str(hf_dir / "model.safetensors")), load_file(str(conv / "model.safetensors"))
    assert set(got) == set(want)
    for name, w in want.items():
        if w.ndim == 1:
            assert torch.equal(got[name], w), name
        else:  # Q8_0: 8 bits per weight and an f16 scale per 32: within 1/200 of the largest weight
            err = (got[name] - w).abs().max() / w.abs().max()
            assert 0 < err < 1 / 200, (name, err)


def test_a_second_resolve_reuses_the_converted_folder(gguf_file, converted, capfd):
    stamps = {p.name: p.stat().st_mtime_ns for p in converted.iterdir()}
    capfd.readouterr()
    assert resolve_checkpoint(str(gguf_file), "target") == converted
    assert {p.name: p.stat().st_mtime_ns for p in converted.iterdir()} == stamps
    assert "converting" not in capfd.readouterr().err


def read_rows(out) -> pd.DataFrame:
    return pd.read_csv(out / "questions.csv", dtype={"accepted_per_pos": str})


def run_rows(out) -> pd.DataFrame:
    rows = read_rows(out).sort_values(["k", "repeat", "question_id"])
    traces = pd.read_csv(out / "traces.csv").sort_values(["k", "repeat", "question_id"])
    rows["output_ids"] = traces.output_ids.to_numpy()
    cols = ["k", "question_id", "prompt_tokens", "prompt_hash", "generated_tokens", "steps", "accepted"]
    return rows[[*cols, "output_ids"]].reset_index(drop=True)


def test_a_run_on_the_gguf_equals_the_run_on_its_hf_folder(hf_dir, gguf_file, tmp_path):
    on_gguf, on_hf = tmp_path / "gguf", tmp_path / "hf"
    for target, out in ((gguf_file, on_gguf), (hf_dir, on_hf)):
        result = invoke(["run", "--target", str(target), *RUN, "--out", str(out)])
        assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(run_rows(on_gguf), run_rows(on_hf))
    recorded = json.loads((on_gguf / "run.json").read_text())["gguf"]["target"]
    assert recorded["sha256"] == hashlib.sha256(gguf_file.read_bytes()).hexdigest()
    assert recorded["quantization"] == {"F32": len(LLAMA_CPP_NAMES)}
    assert "gguf" not in json.loads((on_hf / "run.json").read_text())


def test_a_gguf_draft_model_equals_its_hf_folder(hf_dir, gguf_file, tmp_path):
    """--draft FILE.gguf: detected as a draft model, the rows of the same pair as HF folders, and
    run.json's gguf names both. (Target and draft both from GGUF: transformers' GGUF tokenizer adds
    `<|endoftext|>` to a byte-level vocabulary that lacks it, so the converted tokenizer has one entry
    the HF one has not, which alcheck's draft/target tokenizer check rightly refuses to mix.)"""
    on_gguf, on_hf = tmp_path / "gguf", tmp_path / "hf"
    for model, out in ((gguf_file, on_gguf), (hf_dir, on_hf)):
        args = ["run", "--target", str(model), "--draft", str(model), "--ks", "2", "--repeats", "1"]
        result = invoke(
            [*args, "--limit", "2", "--max-tokens", "8", "--reference", "none", "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(run_rows(on_gguf), run_rows(on_hf))
    meta = json.loads((on_gguf / "run.json").read_text())
    assert meta["config"]["method"] == "draft_model" and set(meta["gguf"]) == {"target", "draft"}


def test_the_files_end_of_turn_id_stops_too(hf_dir, root):
    """A GGUF naming an eot id beside EOS (as Llama-3's do): both are stop ids of the converted folder."""
    from transformers import AutoTokenizer

    from alcheck.testing.tiny import END_TEXT

    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    eot = tok.convert_tokens_to_ids(END_TEXT)
    assert eot != tok.eos_token_id
    folder = resolve_checkpoint(str(write_tiny_gguf(hf_dir, root / "eot.gguf", eot_token_id=eot)), "target")
    stops = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    assert sorted(stops) == sorted({tok.eos_token_id, eot})
    assert json.loads((folder / "gguf_source.json").read_text())["eog_token_ids"] == sorted(stops)


def test_resume_takes_the_same_gguf_and_refuses_another(gguf_file, other, tmp_path, monkeypatch):
    file = shutil.copy(gguf_file, tmp_path / "model.gguf")
    args = ["run", "--target", str(file), *RUN, "--ks", "1,2", "--out", str(tmp_path / "run")]
    interrupt_at_cell(monkeypatch, 2)
    assert CliRunner().invoke(cli, args).exit_code != 0
    monkeypatch.undo()
    part = read_rows(tmp_path / "run")
    assert set(part.k) == {1}
    lock = shutil.ignore_patterns(".alcheck.lock")
    replaced = shutil.copytree(tmp_path / "run", tmp_path / "replaced", ignore=lock)
    shutil.copy(other[1], file)  # another checkpoint at the same path
    resolve_checkpoint(str(file), "target")  # converted first: the refusal is then the only line
    resumed = invoke(["run", "--resume", str(replaced)])
    one_line_error(resumed, "target checkpoint is not the one this run measured", "gguf_source.json changed")
    assert read_rows(replaced).equals(part)
    shutil.copy(gguf_file, file)  # the file the run measured, back
    result = invoke(["run", "--resume", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    rows = read_rows(tmp_path / "run")
    assert set(rows.k) == {1, 2}
    pd.testing.assert_frame_equal(rows[rows.k == 1].reset_index(drop=True), part)


def write_gguf(path, architecture, tensors: dict):
    """A GGUF file with only general.architecture and the given (array, raw type) tensors."""
    import gguf

    writer = gguf.GGUFWriter(str(path), architecture)
    for name, (data, raw_dtype) in tensors.items():
        writer.add_tensor(name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def refused(target, tmp_path, *needles):
    out = tmp_path / "out"
    message = one_line_error(invoke(["run", "--target", str(target), *RUN, "--out", str(out)]), *needles)
    assert not out.exists()
    return message


def test_a_truncated_file_is_refused(gguf_file, tmp_path):
    data = gguf_file.read_bytes()
    for name, size in (("cut-data.gguf", len(data) - 1000), ("cut-header.gguf", 300)):
        (tmp_path / name).write_bytes(data[:size])
        needles = (name, f"truncated or corrupt GGUF file ({size} bytes", "copy it again")
        refused(tmp_path / name, tmp_path, *needles)


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    (tmp_path / "x.gguf").write_text("not a model\n")
    refused(tmp_path / "x.gguf", tmp_path, "not a GGUF file", "GGUF magic")


def test_an_architecture_alcheck_does_not_run_is_refused(tmp_path):
    embeddings = np.ones((4, 8), np.float32)
    file = write_gguf(tmp_path / "g.gguf", "gemma2", {"token_embd.weight": (embeddings, None)})
    refused(file, tmp_path, "GGUF architecture 'gemma2'", "not a target alcheck runs")


def test_a_type_gguf_cannot_dequantize_is_refused(tmp_path):
    import gguf

    q8_1 = gguf.GGMLQuantizationType.Q8_1
    raw = np.zeros((2, gguf.GGML_QUANT_SIZES[q8_1][1]), np.uint8)  # two rows of one block
    with pytest.raises(NotImplementedError):
        gguf.dequantize(raw, q8_1)
    file = write_gguf(tmp_path / "q.gguf", "llama", {"blk.0.attn_q.weight": (raw, q8_1)})
    refused(file, tmp_path, "blk.0.attn_q.weight", "quantized as Q8_1", "cannot dequantize")


def test_a_folder_with_two_gguf_files_is_refused(gguf_file, tmp_path):
    folder = tmp_path / "two"
    folder.mkdir()
    for name in ("a.gguf", "b.gguf"):
        shutil.copy(gguf_file, folder / name)
    refused(folder, tmp_path, "holds 2 .gguf files", "a.gguf, b.gguf", "pass the one to run")


def test_the_missing_extra_is_refused(gguf_file, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # `import gguf` raises ImportError
    refused(gguf_file, tmp_path, "is a GGUF file", "needs the gguf package", "alcheck[gguf]")


def test_conversion_prints_one_note_and_no_progress_bars(gguf_file, tmp_path, capfd):
    file = shutil.copy(gguf_file, tmp_path / "quiet.gguf")
    capfd.readouterr()
    resolve_checkpoint(str(file), "target")
    err = capfd.readouterr().err
    assert "converting the GGUF file" in err
    assert "Converting and de-quantizing" not in err and "Loading weights" not in err, err
