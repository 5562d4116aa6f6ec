from dataclasses import FrozenInstanceError

import pytest

from alcheck.errors import AlcheckError
from alcheck.prompts import protocols as P
from alcheck.prompts.protocols import (
    EAGLE_SYSTEM_PROMPT,
    PROTOCOLS,
    Protocol,
    answer_text,
    build_messages,
    build_prompt_ids,
    get_protocol,
)

# EAGLE-NOTES section 6, verbatim (two spaces after "safe.").
EAGLE_PROMPT_TEXT = (
    "You are a helpful, respectful and honest assistant. Always answer as helpfully as possible, while "
    "being safe.  Your answers should not include any harmful, unethical, racist, sexist, toxic, "
    "dangerous, or illegal content. Please ensure that your responses are socially unbiased and "
    "positive in nature.\n\nIf a question does not make any sense, or is not factually coherent, "
    "explain why instead of answering something not correct. If you don't know the answer to a "
    "question, please don't share false information."
)

TURNS = ["Write a haiku about the sea.", "Now make it rhyme, please."]


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    from alcheck.testing.tiny import make_tiny_target

    return make_tiny_target(tmp_path_factory.mktemp("tiny") / "target")


@pytest.fixture
def tok(target_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(target_dir))


def template_ids(tok, messages):
    """Reference ids straight from the tokenizer's own chat template."""
    out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def eagle_repo_ids(tok, messages):
    """How EAGLE's gen_ea_answer_llama3chat.py tokenizes: render to text, then no extra specials."""
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tok([text], add_special_tokens=False).input_ids[0]


# --------------------------------------------------------------------------- presets


def test_presets():
    assert set(PROTOCOLS) == {"vllm-example", "eagle-repo", "eagle-repo-vicuna", "eagle-repo-llama2"}
    v = get_protocol("vllm-example")
    assert (v.name, v.system_prompt, v.num_turns, v.max_tokens) == ("vllm-example", None, 1, 256)
    e = get_protocol("eagle-repo")
    assert (e.name, e.num_turns, e.max_tokens) == ("eagle-repo", 2, 512)
    assert e.system_prompt == EAGLE_PROMPT_TEXT == EAGLE_SYSTEM_PROMPT
    assert "while being safe.  Your answers" in e.system_prompt
    assert all(p.description for p in PROTOCOLS.values())
    assert v.fastchat is None and e.fastchat is None  # both render the tokenizer's chat template
    with pytest.raises(FrozenInstanceError):
        v.max_tokens = 1  # frozen


def test_unknown_protocol_lists_valid_names():
    with pytest.raises(AlcheckError) as info:
        get_protocol("sglang")
    assert "unknown protocol 'sglang'" in info.value.message
    assert all(name in info.value.message for name in PROTOCOLS)
    assert info.value.exit_code == 2


def test_protocol_of_a_run_config_keeps_its_stored_system_prompt():
    from alcheck.config import RunConfig

    cfg = RunConfig(target="t", draft="d", protocol="eagle-repo-llama2", system_prompt="stored")
    p = P.protocol_of(cfg)
    assert (p.name, p.system_prompt, p.fastchat, p.prompt_suffix) == (
        "eagle-repo-llama2",
        "stored",
        "llama-2",
        " ",
    )
    assert P.protocol_of(RunConfig(target="t", draft="d")) == get_protocol("vllm-example")


# --------------------------------------------------------------------------- messages and ids


def test_messages():
    e = get_protocol("eagle-repo")
    assert build_messages(e, TURNS) == [
        {"role": "system", "content": EAGLE_PROMPT_TEXT},
        {"role": "user", "content": TURNS[0]},
    ]
    assert build_messages(None, TURNS, ["  the answer \n"]) == [
        {"role": "user", "content": TURNS[0]},
        {"role": "assistant", "content": "the answer"},
        {"role": "user", "content": TURNS[1]},
    ]
    assert build_messages("custom", TURNS[:1])[0] == {"role": "system", "content": "custom"}
    with pytest.raises(ValueError, match="one more user turn than answers"):
        build_messages(None, TURNS, ["a", "b"])


def test_vllm_example_turn1_ids(tok):
    ids = build_prompt_ids(tok, get_protocol("vllm-example"), TURNS)
    messages = [{"role": "user", "content": TURNS[0]}]
    assert ids == template_ids(tok, messages) == eagle_repo_ids(tok, messages)
    assert all(type(t) is int for t in ids)
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
    text = tok.decode(ids)
    assert "system" not in text
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_eagle_repo_turn1_ids(tok):
    ids = build_prompt_ids(tok, get_protocol("eagle-repo"), TURNS)
    messages = [
        {"role": "system", "content": EAGLE_PROMPT_TEXT},
        {"role": "user", "content": TURNS[0]},
    ]
    assert ids == template_ids(tok, messages) == eagle_repo_ids(tok, messages)
    assert "safe.  Your answers" in tok.decode(ids)


@pytest.mark.parametrize("name", ["vllm-example", "eagle-repo"])
def test_turn2_ids_contain_stripped_turn1_answer(tok, name):
    protocol = get_protocol(name)
    # A turn-1 generation: text with surrounding whitespace, then the end-of-turn token.
    answer_ids = tok(" \n Calm waves fold the light. \n", add_special_tokens=False).input_ids
    answer_ids = answer_ids + [tok.convert_tokens_to_ids("<|eot_id|>")]
    answer = answer_text(tok, answer_ids)
    assert answer == "Calm waves fold the light."

    ids = build_prompt_ids(tok, protocol, TURNS, [answer])
    messages = ([{"role": "system", "content": protocol.system_prompt}] if protocol.system_prompt else []) + [
        {"role": "user", "content": TURNS[0]},
        {"role": "assistant", "content": "Calm waves fold the light."},
        {"role": "user", "content": TURNS[1]},
    ]
    assert ids == template_ids(tok, messages) == eagle_repo_ids(tok, messages)
    text = tok.decode(ids)
    assert "<|start_header_id|>assistant<|end_header_id|>\n\nCalm waves fold the light.<|eot_id|>" in text
    assert text.count(TURNS[1]) == 1 and text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    # turn 1's prompt is a prefix of turn 2's
    assert ids[: len(build_prompt_ids(tok, protocol, TURNS))] == build_prompt_ids(tok, protocol, TURNS)


def test_answer_text(tok):
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    bos = tok.bos_token_id
    a = tok("Paris is the capital.", add_special_tokens=False).input_ids
    b = tok(" The sea", add_special_tokens=False).input_ids
    assert answer_text(tok, [bos] + a + [eot]) == "Paris is the capital."
    # without stop ids every special token is dropped but later text stays
    assert answer_text(tok, a + [eot] + b) == "Paris is the capital. The sea"
    # with stop ids the answer ends at the first stop token
    assert answer_text(tok, a + [eot] + b, stop_token_ids=[eot]) == "Paris is the capital."
    assert answer_text(tok, [eot]) == ""


def test_flat_ids_shapes():
    from transformers import BatchEncoding

    assert P._flat_ids([1, 2, 3]) == [1, 2, 3]
    assert P._flat_ids([[1, 2, 3]]) == [1, 2, 3]
    assert P._flat_ids({"input_ids": [4, 5]}) == [4, 5]
    assert P._flat_ids(BatchEncoding({"input_ids": [[6, 7]], "attention_mask": [[1, 1]]})) == [6, 7]
    with pytest.raises(ValueError):
        P._flat_ids([[1], [2]])


def test_tokenizer_without_chat_template(tok):
    tok.chat_template = None
    with pytest.raises(AlcheckError, match="has no chat template") as info:
        build_prompt_ids(tok, get_protocol("vllm-example"), TURNS)
    assert "--chat-template" in info.value.message and "eagle-repo-vicuna" in info.value.message
    # a FastChat protocol needs no template: the string is tokenized whole
    text = P.build_prompt_text(get_protocol("eagle-repo-vicuna"), TURNS)
    assert build_prompt_ids(tok, get_protocol("eagle-repo-vicuna"), TURNS) == tok(text).input_ids


def test_template_that_rejects_system_role(tok):
    tok.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "{{ m['content'] }}{% endfor %}"
    )
    with pytest.raises(AlcheckError, match="rejected a system/user chat.*System role not supported"):
        build_prompt_ids(tok, get_protocol("eagle-repo"), TURNS)
    assert build_prompt_ids(tok, get_protocol("vllm-example"), TURNS)  # no system message: fine


def test_custom_protocol_object(tok):
    custom = Protocol("custom", "Be brief.", 2, 64, "test")
    ids = build_prompt_ids(tok, custom, TURNS)
    assert ids == template_ids(tok, build_messages("Be brief.", TURNS))
    assert build_prompt_ids(tok, "Be brief.", TURNS) == ids
