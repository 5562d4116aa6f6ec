"""FastChat's `vicuna_v1.1` and `llama-2` conversation formats, as prompt strings.

The EAGLE repo's Vicuna and LLaMA-2-chat evaluation scripts (eagle/evaluation/
gen_ea_answer_vicuna.py and gen_ea_answer_llama2chat.py, SafeAILab/EAGLE) build prompts with
fschat 0.2.31 (pinned in its requirements.txt): `get_conversation_template("vicuna")` (->
`vicuna_v1.1`) or `get_conversation_template("llama-2-chat")` (-> `llama-2`), append the user
turn and an empty assistant message, `get_prompt()`, then `tokenizer([prompt]).input_ids`, so
the string is tokenized whole, with BOS. Turn 2 appends to the same conversation with the turn-1
answer as text. The formats below follow fastchat/conversation.py at v0.2.31 (separator styles
ADD_COLON_TWO and LLAMA2); like FastChat, an empty message counts as "no message yet".
"""

from __future__ import annotations

from collections.abc import Sequence

# fastchat/conversation.py v0.2.31, template "vicuna_v1.1"
VICUNA_V11_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)


def _messages(user_turns: Sequence[str], answers: Sequence[str]) -> list[str | None]:
    """Alternating user/assistant contents for turn len(answers) + 1, ending in an open
    assistant slot (None)."""
    turn = len(answers)
    if turn >= len(user_turns):
        raise ValueError(
            f"{len(answers)} answers given but only {len(user_turns)} user turns: "
            "need one more user turn than answers"
        )
    out: list[str | None] = []
    for user, answer in zip(user_turns[:turn], answers):
        out += [user, answer.strip()]
    return out + [user_turns[turn], None]


def vicuna_v11(system: str, user_turns: Sequence[str], answers: Sequence[str] = ()) -> str:
    """`SYSTEM USER: q1 ASSISTANT: a1</s>USER: q2 ASSISTANT:` (sep " ", sep2 "</s>")."""
    roles, seps = ("USER", "ASSISTANT"), (" ", "</s>")
    text = system + seps[0]
    for i, content in enumerate(_messages(user_turns, answers)):
        role = roles[i % 2]
        text += f"{role}: {content}{seps[i % 2]}" if content else f"{role}:"
    return text


def llama2(system: str, user_turns: Sequence[str], answers: Sequence[str] = ()) -> str:
    """`[INST] <<SYS>>\\nSYSTEM\\n<</SYS>>\\n\\nq1 [/INST] a1 </s><s>[INST] q2 [/INST]`: the first
    user message follows the system block directly; later ones carry their [INST] tag."""
    tags, seps = ("[INST]", "[/INST]"), (" ", " </s><s>")
    text = f"[INST] <<SYS>>\n{system}\n<</SYS>>\n\n" if system else "[INST] "
    for i, content in enumerate(_messages(user_turns, answers)):
        tag = tags[i % 2]
        if not content:
            text += tag
        elif i == 0:
            text += content + " "
        else:
            text += f"{tag} {content}{seps[i % 2]}"
    return text


FORMATS = {"vicuna_v1.1": vicuna_v11, "llama-2": llama2}


def fastchat_prompt(
    name: str, system: str | None, user_turns: Sequence[str], answers: Sequence[str] = ()
) -> str:
    try:
        build = FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown FastChat format {name!r}: use one of {', '.join(FORMATS)}") from None
    return build(system or "", user_turns, answers)
