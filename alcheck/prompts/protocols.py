"""Evaluation protocols (prompt construction presets) and prompt token ids.

The same weights give different ALs under different protocols (EAGLE-NOTES section 6):
- `vllm-example`: vLLM's examples/offline_inference/eagle.py / spec_decode.py: MT-Bench turn 1
  only, no system prompt, the tokenizer's chat template, 256 new tokens.
- `eagle-repo`: the EAGLE repo's gen_ea_answer_llama3chat.py: its Llama-2 style system prompt,
  both turns (turn 2 sees the turn-1 answer decoded to text, special tokens removed, stripped),
  512 new tokens.
- `eagle-repo-vicuna` / `eagle-repo-llama2`: the EAGLE repo's gen_ea_answer_vicuna.py /
  gen_ea_answer_llama2chat.py: FastChat's `vicuna_v1.1` / `llama-2` prompt string (see
  fastchat.py) tokenized whole with BOS, both turns, 512 new tokens (`eagenerate`'s default:
  the scripts parse --max-new-token but never pass it on).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from alcheck.errors import AlcheckError
from alcheck.prompts.fastchat import VICUNA_V11_SYSTEM, fastchat_prompt
from alcheck.prompts.tokenizer import check_ids_in_vocab

# Verbatim from the EAGLE repo (note the two spaces after "safe.").
EAGLE_SYSTEM_PROMPT = (
    "You are a helpful, respectful and honest assistant. Always answer as helpfully as possible, "
    "while being safe.  Your answers should not include any harmful, unethical, racist, sexist, "
    "toxic, dangerous, or illegal content. Please ensure that your responses are socially "
    "unbiased and positive in nature.\n\nIf a question does not make any sense, or is not "
    "factually coherent, explain why instead of answering something not correct. If you don't "
    "know the answer to a question, please don't share false information."
)


@dataclass(frozen=True)
class Protocol:
    name: str
    system_prompt: str | None
    num_turns: int
    max_tokens: int
    description: str
    # a FastChat conversation format that builds the prompt string instead of the chat template
    fastchat: str | None = None
    prompt_suffix: str = ""  # appended to the FastChat string (EAGLE's llama-2 script adds " ")


PROTOCOLS: dict[str, Protocol] = {
    "vllm-example": Protocol(
        name="vllm-example",
        system_prompt=None,
        num_turns=1,
        max_tokens=256,
        description=(
            "vLLM examples/offline_inference eagle.py / spec_decode.py: turn 1 only, "
            "no system prompt, chat template, 256 new tokens"
        ),
    ),
    "eagle-repo": Protocol(
        name="eagle-repo",
        system_prompt=EAGLE_SYSTEM_PROMPT,
        num_turns=2,
        max_tokens=512,
        description=(
            "EAGLE repo gen_ea_answer_llama3chat.py: EAGLE's system prompt, both turns "
            "(turn-1 answer re-tokenized as text), 512 new tokens"
        ),
    ),
    "eagle-repo-vicuna": Protocol(
        name="eagle-repo-vicuna",
        system_prompt=VICUNA_V11_SYSTEM,
        num_turns=2,
        max_tokens=512,
        description=(
            "EAGLE repo gen_ea_answer_vicuna.py: FastChat vicuna_v1.1 prompt with its system prompt, "
            "no chat template, both turns, 512 new tokens"
        ),
        fastchat="vicuna_v1.1",
    ),
    "eagle-repo-llama2": Protocol(
        name="eagle-repo-llama2",
        system_prompt=EAGLE_SYSTEM_PROMPT,  # the script sets conv.system_message to this text
        num_turns=2,
        max_tokens=512,
        description=(
            "EAGLE repo gen_ea_answer_llama2chat.py: FastChat llama-2 prompt with EAGLE's system "
            "prompt plus a trailing space, no chat template, both turns, 512 new tokens"
        ),
        fastchat="llama-2",
        prompt_suffix=" ",  # `prompt = conv.get_prompt() + " "` in the script
    ),
}


def get_protocol(name: str) -> Protocol:
    try:
        return PROTOCOLS[name]
    except KeyError:
        valid = ", ".join(PROTOCOLS)
        raise AlcheckError(f"unknown protocol '{name}': use one of {valid}") from None


def protocol_of(config) -> Protocol:
    """The protocol a RunConfig runs: its preset, with the system prompt the config stores."""
    return replace(get_protocol(config.protocol), system_prompt=config.system_prompt)


def answer_text(tokenizer, token_ids: Sequence[int], stop_token_ids: Sequence[int] = ()) -> str:
    """A generated answer as the next turn sees it: cut at the first stop token (if any are
    given), decoded with special tokens removed, stripped."""
    ids = [int(t) for t in token_ids]
    stops = {int(t) for t in stop_token_ids}
    if stops:
        for i, t in enumerate(ids):
            if t in stops:
                ids = ids[:i]
                break
    return tokenizer.decode(ids, skip_special_tokens=True).strip()


def _system_prompt_of(protocol_or_system_prompt: Protocol | str | None) -> str | None:
    if isinstance(protocol_or_system_prompt, Protocol):
        return protocol_or_system_prompt.system_prompt
    if protocol_or_system_prompt is None or isinstance(protocol_or_system_prompt, str):
        return protocol_or_system_prompt
    raise TypeError("expected a Protocol, a system prompt string or None")


def build_messages(
    protocol_or_system_prompt: Protocol | str | None,
    user_turns: Sequence[str],
    answers: Sequence[str] = (),
) -> list[dict[str, str]]:
    """The chat for turn t = len(answers) + 1: optional system message, then user/assistant pairs
    for the earlier turns (assistant content = the earlier answer text, stripped), then user
    turn t."""
    turn = len(answers)
    if turn >= len(user_turns):
        raise ValueError(
            f"{len(answers)} answers given but only {len(user_turns)} user turns: "
            "need one more user turn than answers"
        )
    system_prompt = _system_prompt_of(protocol_or_system_prompt)
    messages: list[dict[str, str]] = []
    if system_prompt is not None:
        messages.append({"role": "system", "content": system_prompt})
    for user, answer in zip(user_turns[:turn], answers):
        messages.append({"role": "user", "content": user})
        messages.append({"role": "assistant", "content": answer.strip()})
    messages.append({"role": "user", "content": user_turns[turn]})
    return messages


def _flat_ids(result) -> list[int]:
    """apply_chat_template(tokenize=True) output -> list[int].

    transformers 4 returns a list of ints; transformers 5 a BatchEncoding (a dict) whose
    input_ids may also be nested one level (a batch of one) or a tensor.
    """
    if isinstance(result, Mapping) or hasattr(result, "keys"):
        result = result["input_ids"]
    if hasattr(result, "tolist"):
        result = result.tolist()
    result = list(result)
    if result and isinstance(result[0], (list, tuple)):
        if len(result) != 1:
            raise ValueError(f"expected one tokenized chat, got a batch of {len(result)}")
        result = list(result[0])
    return [int(t) for t in result]


def _tokenizer_name(tokenizer) -> str:
    return getattr(tokenizer, "name_or_path", "") or "the target model"


def _template_name(tokenizer) -> str:
    """Whose template renders the prompts: the --chat-template file, or the target's own."""
    file = getattr(tokenizer, "alcheck_chat_template_file", None)
    return f"--chat-template {file}" if file else f"the chat template of {_tokenizer_name(tokenizer)}"


# two user messages that any template rendering its messages must render differently
_PROBE_MESSAGES = ("Name three colours.", "What is 2 + 2?")


def check_template_renders_messages(tokenizer, protocol_or_system_prompt) -> None:
    """A chat template whose output does not depend on the user message (static text) would give
    every question the same prompt and still print an AL: render two different messages and
    refuse when they come out the same. Checked once per template."""
    template = getattr(tokenizer, "chat_template", None)
    if not template or getattr(tokenizer, "alcheck_checked_template", None) == template:
        return
    rendered = []
    for text in _PROBE_MESSAGES:
        messages = build_messages(protocol_or_system_prompt, [text])
        try:
            rendered.append(
                _flat_ids(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
            )
        except Exception:  # noqa: BLE001 - the real prompt's rendering reports it, with its own message
            return
    if rendered[0] == rendered[1]:
        raise AlcheckError(
            f"{_template_name(tokenizer)} renders the same prompt for different user messages (it ignores "
            "message['content']), so every question would get one "
            "prompt: use a template that renders the messages"
        )
    tokenizer.alcheck_checked_template = template


def _no_template_error(tokenizer) -> AlcheckError:
    fastchat = ", ".join(name for name, p in PROTOCOLS.items() if p.fastchat)
    return AlcheckError(
        f"tokenizer of {_tokenizer_name(tokenizer)} has no chat template: pass --chat-template FILE "
        f"(a Jinja chat template), or use a FastChat protocol ({fastchat}) for Vicuna/LLaMA-2 style models"
    )


def build_prompt_text(protocol: Protocol, user_turns: Sequence[str], answers: Sequence[str] = ()) -> str:
    """The prompt string of a FastChat protocol for turn len(answers) + 1."""
    if not protocol.fastchat:
        raise ValueError(
            f"protocol {protocol.name} renders the tokenizer's chat template, not a FastChat string"
        )
    return (
        fastchat_prompt(protocol.fastchat, protocol.system_prompt, user_turns, answers)
        + protocol.prompt_suffix
    )


def build_prompt_ids(
    tokenizer,
    protocol_or_system_prompt: Protocol | str | None,
    user_turns: Sequence[str],
    answers: Sequence[str] = (),
) -> list[int]:
    """Prompt token ids for turn len(answers) + 1 (see build_messages), rendered with the
    tokenizer's chat template and add_generation_prompt=True. A FastChat protocol instead
    tokenizes its prompt string whole, special tokens (BOS) added, as the EAGLE scripts do."""
    ids = _prompt_ids(tokenizer, protocol_or_system_prompt, user_turns, answers)
    check_ids_in_vocab(tokenizer, ids)
    return ids


def _prompt_ids(tokenizer, protocol_or_system_prompt, user_turns, answers) -> list[int]:
    if isinstance(protocol_or_system_prompt, Protocol) and protocol_or_system_prompt.fastchat:
        text = build_prompt_text(protocol_or_system_prompt, user_turns, answers)
        return _flat_ids(tokenizer(text, add_special_tokens=True)["input_ids"])
    if not getattr(tokenizer, "chat_template", None):
        raise _no_template_error(tokenizer)
    check_template_renders_messages(tokenizer, protocol_or_system_prompt)
    messages = build_messages(protocol_or_system_prompt, user_turns, answers)
    try:
        result = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    except Exception as e:
        try:
            from jinja2.exceptions import TemplateError
        except ImportError:  # pragma: no cover - jinja2 ships with transformers' chat templates
            TemplateError = ()
        if isinstance(e, ValueError) and "chat template" in str(e).lower().replace("_", " "):
            raise _no_template_error(tokenizer) from None
        if TemplateError and isinstance(e, TemplateError):
            roles = "/".join(dict.fromkeys(m["role"] for m in messages))
            detail = str(e).splitlines()[0] if str(e) else type(e).__name__
            if getattr(tokenizer, "alcheck_chat_template_file", None):
                raise AlcheckError(
                    f"{_template_name(tokenizer)} rejected a {roles} chat ({detail}): fix the template, "
                    "or use a protocol it supports (e.g. --protocol vllm-example has no system prompt)"
                ) from None
            raise AlcheckError(
                f"{_template_name(tokenizer)} rejected a {roles} chat ({detail}): use a protocol "
                "this model's template supports (e.g. --protocol vllm-example has no system prompt), "
                "or pass --chat-template FILE"
            ) from None
        raise
    return _flat_ids(result)
