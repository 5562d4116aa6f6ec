"""The FastChat-era heads (issue 9): sentencepiece-only tokenizers, the `eagle-repo-vicuna` and
`eagle-repo-llama2` protocols, `--chat-template FILE`, and the prompt hash.

Oracles: a sentencepiece model trained here in the real LLaMA format (BPE, byte fallback,
<unk>/<s>/</s> = 0/1/2, dummy prefix, no whitespace folding) and saved as tokenizer.model +
tokenizer_config.json the way Vicuna-7B-v1.3 ships; prompt strings written out here from
FastChat's format (fschat 0.2.31, as the EAGLE repo's gen_ea_answer_vicuna.py /
gen_ea_answer_llama2chat.py build them) and encoded with sentencepiece itself, chunk by chunk
around the special tokens, BOS first.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import sys

import pandas as pd
import pytest
from click.testing import CliRunner

from alcheck.cli.main import cli
from alcheck.errors import AlcheckError
from alcheck.paths import MT_BENCH_FILE
from alcheck.prompts.protocols import PROTOCOLS, answer_text, build_prompt_ids, get_protocol
from alcheck.prompts.tokenizer import check_chat_template, load_tokenizer, prompt_hash, read_chat_template

spm = pytest.importorskip("sentencepiece")

VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
EAGLE_SYSTEM = (
    "You are a helpful, respectful and honest assistant. Always answer as helpfully as possible, while "
    "being safe.  Your answers should not include any harmful, unethical, racist, sexist, toxic, "
    "dangerous, or illegal content. Please ensure that your responses are socially unbiased and "
    "positive in nature.\n\nIf a question does not make any sense, or is not factually coherent, "
    "explain why instead of answering something not correct. If you don't know the answer to a "
    "question, please don't share false information."
)
BOS, EOS = 1, 2
Q1, Q2, A1 = "What is A? Explain it.", "Now say it  twice.", "A is the first letter."


def _added(content):
    return {
        "__type": "AddedToken",
        "content": content,
        "lstrip": False,
        "normalized": True,
        "rstrip": False,
        "single_word": False,
    }


def write_llama_sp_tokenizer(out, *, legacy=None):
    """tokenizer.model + tokenizer_config.json + special_tokens_map.json, as Vicuna-7B-v1.3 ships
    them (no tokenizer.json, no `legacy` key, no chat template)."""
    out.mkdir(parents=True, exist_ok=True)
    questions = [json.loads(line)["turns"] for line in MT_BENCH_FILE.read_text().splitlines()[:12]]
    lines = [
        VICUNA_SYSTEM,
        EAGLE_SYSTEM,
        Q1,
        Q2,
        A1,
        "USER: ASSISTANT: [INST] <<SYS>> <</SYS>> [/INST]",
        "A cat. A dog. A plan. ABBA, CAB and BAA are words with A inside.",
    ]
    lines += [t for turns in questions for t in turns]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines * 20),
        model_writer=model,
        model_type="bpe",
        vocab_size=700,
        hard_vocab_limit=False,
        byte_fallback=True,
        split_digits=True,
        unk_id=0,
        bos_id=BOS,
        eos_id=EOS,
        pad_id=-1,
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        allow_whitespace_only_pieces=True,
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
    )
    (out / "tokenizer.model").write_bytes(model.getvalue())
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": _added("<s>"),
        "clean_up_tokenization_spaces": False,
        "eos_token": _added("</s>"),
        "model_max_length": 2048,
        "pad_token": None,
        "padding_side": "right",
        "sp_model_kwargs": {},
        "tokenizer_class": "LlamaTokenizer",
        "unk_token": _added("<unk>"),
    }
    if legacy is not None:
        config["legacy"] = legacy
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": _added("<s>"), "eos_token": _added("</s>"), "unk_token": _added("<unk>")})
    )
    return out


@pytest.fixture(scope="module")
def sp_dir(tmp_path_factory):
    return write_llama_sp_tokenizer(tmp_path_factory.mktemp("vicuna") / "tok")


@pytest.fixture(scope="module")
def sp(sp_dir):
    proc = spm.SentencePieceProcessor(model_file=str(sp_dir / "tokenizer.model"))
    # the vocabulary has both pieces, like Vicuna's (319 "▁A", 29909 "A")
    assert proc.piece_to_id("▁A") not in (0, proc.piece_to_id("A")) and proc.piece_to_id("A") != 0
    return proc


@pytest.fixture(scope="module")
def tok(sp_dir):
    return load_tokenizer(sp_dir, "target")


def sp_ids(sp, *chunks):
    """BOS, then each text chunk encoded by sentencepiece on its own (dummy prefix each time) and
    each int chunk (a special token id) as is: the slow LLaMA tokenizer with legacy=True."""
    ids = [BOS]
    for chunk in chunks:
        ids += [chunk] if isinstance(chunk, int) else sp.encode(chunk)
    return ids


# --------------------------------------------------------------------------- sentencepiece folders


def test_sentencepiece_only_folder_loads(sp_dir, sp, tok):
    assert not (sp_dir / "tokenizer.json").exists()
    assert (tok.bos_token_id, tok.eos_token_id) == (BOS, EOS)
    assert not getattr(tok, "chat_template", None)
    text = "Hello there, A user asks:  what is 1234?"
    assert tok(text).input_ids == sp_ids(sp, text)
    assert tok.decode(sp.encode(text)) == text


def test_presets_registered_with_the_scripts_settings():
    v, l2 = get_protocol("eagle-repo-vicuna"), get_protocol("eagle-repo-llama2")
    assert (v.fastchat, v.system_prompt, v.num_turns, v.max_tokens, v.prompt_suffix) == (
        "vicuna_v1.1",
        VICUNA_SYSTEM,
        2,
        512,
        "",
    )
    assert (l2.fastchat, l2.system_prompt, l2.num_turns, l2.max_tokens, l2.prompt_suffix) == (
        "llama-2",
        EAGLE_SYSTEM,
        2,
        512,
        " ",
    )
    assert {"eagle-repo-vicuna", "eagle-repo-llama2"} <= set(PROTOCOLS)


def test_vicuna_first_prompt_token_is_the_dummy_prefixed_A(tok, sp):
    ids = build_prompt_ids(tok, get_protocol("eagle-repo-vicuna"), [Q1, Q2])
    assert ids[0] == BOS and ids.count(BOS) == 1
    assert ids[1] == sp.piece_to_id("▁A") != sp.piece_to_id("A")


def test_vicuna_ids_equal_the_scripts_construction(tok, sp):
    protocol = get_protocol("eagle-repo-vicuna")
    turn1 = build_prompt_ids(tok, protocol, [Q1, Q2])
    assert turn1 == sp_ids(sp, f"{VICUNA_SYSTEM} USER: {Q1} ASSISTANT:")
    # turn 2: the stripped turn-1 answer as text, closed by "</s>", then the next user turn
    turn2 = build_prompt_ids(tok, protocol, [Q1, Q2], [f"  {A1}\n"])
    assert turn2 == sp_ids(sp, f"{VICUNA_SYSTEM} USER: {Q1} ASSISTANT: {A1}", EOS, f"USER: {Q2} ASSISTANT:")
    assert turn2[: len(turn1)] == turn1


def test_llama2_ids_equal_the_scripts_construction(tok, sp):
    protocol = get_protocol("eagle-repo-llama2")
    head = f"[INST] <<SYS>>\n{EAGLE_SYSTEM}\n<</SYS>>\n\n{Q1} [/INST]"
    turn1 = build_prompt_ids(tok, protocol, [Q1, Q2])
    assert turn1 == sp_ids(sp, head + " ")  # the script appends " " to get_prompt()
    turn2 = build_prompt_ids(tok, protocol, [Q1, Q2], [A1])
    assert turn2 == sp_ids(sp, f"{head} {A1} ", EOS, BOS, f"[INST] {Q2} [/INST] ")
    assert "safe.  Your answers" in tok.decode(turn1)


def test_empty_answer_is_no_message_as_in_fastchat(tok, sp):
    ids = build_prompt_ids(tok, get_protocol("eagle-repo-vicuna"), [Q1, Q2], ["  "])
    assert ids == sp_ids(sp, f"{VICUNA_SYSTEM} USER: {Q1} ASSISTANT:USER: {Q2} ASSISTANT:")


def test_explicit_legacy_false_is_kept(tmp_path, sp):
    """A tokenizer_config that says legacy: false gets no dummy prefix after a special token."""
    from sentencepiece import sentencepiece_model_pb2

    folder = write_llama_sp_tokenizer(tmp_path / "tok", legacy=False)
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((folder / "tokenizer.model").read_bytes())
    proto.normalizer_spec.add_dummy_prefix = False
    no_prefix = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
    tok = load_tokenizer(folder, "target")
    ids = build_prompt_ids(tok, get_protocol("eagle-repo-vicuna"), [Q1, Q2], [A1])
    first = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    expected = [BOS] + first.encode(f"{VICUNA_SYSTEM} USER: {Q1} ASSISTANT: {A1}") + [EOS]
    assert ids == expected + no_prefix.encode(f"USER: {Q2} ASSISTANT:")


def test_answer_text_round_trip(tok, sp):
    answer = answer_text(tok, sp.encode(f"  {A1} ") + [EOS] + sp.encode("junk"), [EOS])
    assert answer == A1


@pytest.mark.parametrize(
    "blocked, named",
    [
        (["sentencepiece"], "sentencepiece package: pip install sentencepiece"),
        (["google.protobuf"], "protobuf package: pip install protobuf"),
        (
            ["sentencepiece", "google.protobuf"],
            "sentencepiece and protobuf packages: pip install sentencepiece protobuf",
        ),
    ],
)
def test_missing_packages_named_in_one_line(sp_dir, monkeypatch, blocked, named):
    for module in blocked:
        monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(AlcheckError) as info:
        load_tokenizer(sp_dir, "target")
    message = info.value.message
    assert named in message and "tokenizer.model" in message
    assert "tiktoken" not in message and "\n" not in message and info.value.exit_code == 2


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"\x00\x01garbage bytes that are no model", "not a readable sentencepiece model"),
        (b"IQ== 0\nIg== 1\nIw== 2\n", "tiktoken file"),
    ],
)
def test_unreadable_tokenizer_model(tmp_path, sp_dir, content, needle):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text((sp_dir / "tokenizer_config.json").read_text())
    (folder / "tokenizer.model").write_bytes(content)
    with pytest.raises(AlcheckError, match=needle) as info:
        load_tokenizer(folder, "target")
    assert "\n" not in info.value.message


def test_folder_without_tokenizer_files(tmp_path):
    with pytest.raises(
        AlcheckError, match="cannot load the tokenizer.*tokenizer.json, or tokenizer.model"
    ) as info:
        load_tokenizer(tmp_path, "target")
    assert "\n" not in info.value.message


# --------------------------------------------------------------------------- chat templates


TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}<<{{ m['content'] }}>>\n"
    "{% else %}{{ m['role'] | upper }}: {{ m['content'] }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


def test_chat_protocol_without_template_names_both_ways_out(tok):
    with pytest.raises(AlcheckError) as info:
        build_prompt_ids(tok, get_protocol("vllm-example"), [Q1])
    message = info.value.message
    assert "no chat template" in message and "--chat-template" in message and "eagle-repo-vicuna" in message


def test_chat_template_file_replaces_the_tokenizers(tmp_path, sp_dir, sp):
    import jinja2

    file = tmp_path / "t.jinja"
    file.write_text(TEMPLATE)
    tok = load_tokenizer(sp_dir, "target", chat_template=str(file))
    assert tok.chat_template == TEMPLATE
    ids = build_prompt_ids(tok, get_protocol("eagle-repo"), [Q1, Q2], [A1])
    messages = [
        {"role": "system", "content": EAGLE_SYSTEM},
        {"role": "user", "content": Q1},
        {"role": "assistant", "content": A1},
        {"role": "user", "content": Q2},
    ]
    text = (
        jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        .from_string(TEMPLATE)
        .render(messages=messages, add_generation_prompt=True, bos_token="<s>")
    )
    assert text.startswith("<s><<You are") and text.endswith("USER: " + Q2 + "\nASSISTANT:")
    # "<s>" is BOS itself; the text after it is one chunk (no second BOS is added by the template path)
    assert ids == sp_ids(sp, text[len("<s>") :])


@pytest.mark.parametrize(
    "name, content, needle",
    [
        ("missing.jinja", None, "no such file"),
        ("bad.jinja", "{% for m in messages %}{{ m['content'] }}", "line 1 is not a valid Jinja template"),
        (
            "bad2.jinja",
            "hello\n{{ messages | nosuchfilter }}",
            "not a valid Jinja template (No filter named 'nosuchfilter'",
        ),
        ("empty.jinja", "  \n", "is empty"),
        ("latin.jinja", b"caf\xe9 {{ x }}", "not UTF-8"),
        ("dir.jinja", "DIR", "is a directory"),
    ],
)
def test_bad_chat_template_file_is_one_line(tmp_path, name, content, needle):
    path = tmp_path / name
    if content == "DIR":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(AlcheckError, match=needle.replace("(", r"\(").replace("|", r"\|")) as info:
        read_chat_template(path)
    assert "\n" not in info.value.message and info.value.exit_code == 2


def test_check_chat_template_against_the_protocol(tmp_path):
    file = tmp_path / "t.jinja"
    file.write_text(TEMPLATE)
    assert check_chat_template(None, get_protocol("eagle-repo-vicuna")) is None
    assert check_chat_template(file, get_protocol("vllm-example")) == str(file)
    with pytest.raises(AlcheckError, match="--chat-template is not used by --protocol eagle-repo-llama2"):
        check_chat_template(file, get_protocol("eagle-repo-llama2"))


@pytest.mark.parametrize(
    "template",
    [
        "Hello, answer the question: ",  # static text
        "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: \n{% endfor %}ASSISTANT:",  # roles only
    ],
)
def test_chat_template_that_ignores_the_message_is_refused(tmp_path, pair_args, template):
    """Every question would get one prompt: refused before any weight loads (issue 24 item 3)."""
    file = tmp_path / "static.jinja"
    file.write_text(template)
    result = CliRunner().invoke(
        cli,
        [
            "run",
            *pair_args,
            "--ks",
            "1",
            "--repeats",
            "1",
            "--limit",
            "2",
            "--max-tokens",
            "4",
            "--chat-template",
            str(file),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert f"--chat-template {file}" in message and "same prompt for different user messages" in message
    assert not (tmp_path / "o" / "run.json").exists()


def test_a_failing_chat_template_file_is_blamed_not_the_targets(tmp_path, pair_args):
    file = tmp_path / "raises.jinja"
    file.write_text("{% for m in messages %}{{ raise_exception('no users here') }}{% endfor %}")
    result = CliRunner().invoke(
        cli,
        [
            "run",
            *pair_args,
            "--ks",
            "1",
            "--repeats",
            "1",
            "--limit",
            "2",
            "--max-tokens",
            "4",
            "--chat-template",
            str(file),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert f"--chat-template {file} rejected a user chat (no users here)" in message, message
    assert "chat template of" not in message


# --------------------------------------------------------------------------- prompt hash


def test_prompt_hash():
    ids = [1, 319, 29909, 0, 31999, 2**31 - 1]
    expected = hashlib.sha256(b"".join(i.to_bytes(4, "little", signed=True) for i in ids)).hexdigest()[:16]
    assert prompt_hash(ids) == expected and len(expected) == 16
    assert prompt_hash(tuple(ids)) == expected
    assert prompt_hash(ids[:-1]) != expected and prompt_hash([319, 1] + ids[2:]) != expected
    assert prompt_hash([]) == hashlib.sha256(b"").hexdigest()[:16]
    with pytest.raises(ValueError, match="int32"):
        prompt_hash([2**31])
    assert struct.calcsize("<i") == 4


# --------------------------------------------------------------------------- alcheck run, end to end


@pytest.fixture(scope="module")
def vicuna_pair(tmp_path_factory, sp_dir):
    """A tiny Llama target whose tokenizer is the sentencepiece-only folder, and an EAGLE-1 head."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from alcheck.testing.tiny import make_tiny_eagle

    root = tmp_path_factory.mktemp("vicuna_pair")
    target = root / "vicuna-tiny"
    vocab = spm.SentencePieceProcessor(model_file=str(sp_dir / "tokenizer.model")).get_piece_size()
    config = LlamaConfig(
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=vocab,
        max_position_embeddings=4096,
        bos_token_id=BOS,
        eos_token_id=EOS,
        initializer_range=0.5,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(str(target))
    GenerationConfig(bos_token_id=BOS, eos_token_id=EOS, do_sample=False).save_pretrained(str(target))
    for name in ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"):
        (target / name).write_bytes((sp_dir / name).read_bytes())
    head = make_tiny_eagle(root / "eagle", target, copy_target_layer=0)
    return target, head


def run(args):
    return CliRunner().invoke(cli, ["run", *args], catch_exceptions=False)


def greedy_answer(target_dir, ids, max_tokens):
    """Target-only greedy continuation with transformers' own model, as the next turn sees it."""
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            max_new_tokens=max_tokens,
            do_sample=False,
            eos_token_id=EOS,
            pad_token_id=EOS,
        )
    return out[0, len(ids) :].tolist()


def test_run_vicuna_protocol_end_to_end(vicuna_pair, sp, tok, tmp_path):
    target, head = vicuna_pair
    out = tmp_path / "run"
    result = run(
        [
            "--target",
            str(target),
            "--draft",
            str(head),
            "--protocol",
            "eagle-repo-vicuna",
            "--ks",
            "2",
            "--repeats",
            "1",
            "--limit",
            "2",
            "--max-tokens",
            "8",
            "--block-size",
            "4",
            "--out",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "run.json").read_text())
    assert (
        meta["config"]["protocol"] == "eagle-repo-vicuna" and meta["config"]["system_prompt"] == VICUNA_SYSTEM
    )
    rows = pd.read_csv(out / "questions.csv")
    first = json.loads(MT_BENCH_FILE.read_text().splitlines()[0])
    q1, q2 = first["turns"][:2]
    mine = rows[rows.question_id == first["question_id"]].set_index("turn")
    turn1 = sp_ids(sp, f"{VICUNA_SYSTEM} USER: {q1} ASSISTANT:")
    assert mine.loc[1, "prompt_tokens"] == len(turn1) and mine.loc[1, "prompt_hash"] == prompt_hash(turn1)
    # turn 2 holds the turn-1 answer as text: the target's own greedy answer (the run is lossless)
    answer = answer_text(tok, greedy_answer(target, turn1, 8), [EOS])
    turn2 = (
        sp_ids(sp, f"{VICUNA_SYSTEM} USER: {q1} ASSISTANT: {answer}", EOS, f"USER: {q2} ASSISTANT:")
        if answer
        else sp_ids(sp, f"{VICUNA_SYSTEM} USER: {q1} ASSISTANT:USER: {q2} ASSISTANT:")
    )
    assert mine.loc[2, "prompt_tokens"] == len(turn2) and mine.loc[2, "prompt_hash"] == prompt_hash(turn2)


def test_run_chat_protocol_on_a_template_less_tokenizer(vicuna_pair, sp, tmp_path):
    target, head = vicuna_pair
    base = [
        "--target",
        str(target),
        "--draft",
        str(head),
        "--ks",
        "1",
        "--repeats",
        "1",
        "--limit",
        "1",
        "--max-tokens",
        "4",
        "--block-size",
        "4",
    ]
    refused = run([*base, "--out", str(tmp_path / "refused")])
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1
    assert "--chat-template" in refused.output and "eagle-repo-vicuna" in refused.output
    assert not (tmp_path / "refused" / "run.json").exists()

    file = tmp_path / "t.jinja"
    file.write_text(TEMPLATE)
    ok = run([*base, "--chat-template", str(file), "--out", str(tmp_path / "ok")])
    assert ok.exit_code == 0, ok.output
    assert json.loads((tmp_path / "ok" / "run.json").read_text())["config"]["chat_template"] == str(file)
    row = pd.read_csv(tmp_path / "ok" / "questions.csv").iloc[0]
    q1 = json.loads(MT_BENCH_FILE.read_text().splitlines()[0])["turns"][0]
    assert row.prompt_hash == prompt_hash(sp_ids(sp, f"USER: {q1}\nASSISTANT:"))


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--chat-template", "MISSING"], "no such file"),
        (["--chat-template", "BAD"], "not a valid Jinja template"),
        (["--chat-template", "GOOD", "--protocol", "eagle-repo-vicuna"], "--chat-template is not used"),
    ],
)
def test_run_refuses_bad_chat_template_in_one_line(pair_args, tmp_path, extra, needle):
    (tmp_path / "bad.jinja").write_text("{% if x %}never closed")
    (tmp_path / "good.jinja").write_text(TEMPLATE)
    files = {
        "MISSING": tmp_path / "missing.jinja",
        "BAD": tmp_path / "bad.jinja",
        "GOOD": tmp_path / "good.jinja",
    }
    extra = [str(files.get(a, a)) for a in extra]
    out = tmp_path / "o"
    result = run([*pair_args, "--limit", "1", "--out", str(out), *extra])
    assert result.exit_code == 2 and needle in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (out / "run.json").exists()


def test_format_strings_and_misuse():
    from alcheck.prompts.fastchat import fastchat_prompt
    from alcheck.prompts.protocols import build_prompt_text

    assert (
        fastchat_prompt("vicuna_v1.1", "S", [Q1, Q2], [A1])
        == f"S USER: {Q1} ASSISTANT: {A1}</s>USER: {Q2} ASSISTANT:"
    )
    assert fastchat_prompt("llama-2", None, [Q1]) == f"[INST] {Q1} [/INST]"  # no system: no <<SYS>> block
    with pytest.raises(ValueError, match="unknown FastChat format"):
        fastchat_prompt("chatml", "S", [Q1])
    with pytest.raises(ValueError, match="one more user turn"):
        fastchat_prompt("llama-2", "S", [Q1], [A1])
    with pytest.raises(ValueError, match="chat template"):
        build_prompt_text(get_protocol("eagle-repo"), [Q1])
