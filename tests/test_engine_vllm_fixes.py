"""What a real vLLM (the CPU build, 0.32) showed the engine client (issue 23): its detokenizer holds
back a trailing incomplete UTF-8 sequence, a server that dies while starting ends its output with
traceback frames below the cause, and `detailed` per-request metrics carry per_step_accepted."""

from __future__ import annotations

import pytest
from conftest import expect_error

from alcheck.backends.engine_client import same_text, streamed_text
from alcheck.backends.engines.failure import failure_line
from alcheck.backends.engines.vllm import VllmDialect

TEXT = "café 日本"  # 2- and 3-byte characters: byte-level tokens cut them mid-character


@pytest.fixture(scope="module")
def tokenizer(pair_dirs):
    from alcheck.prompts.tokenizer import load_tokenizer

    return load_tokenizer(pair_dirs[0], "target")


def held_back(text: str) -> str:
    """vLLM's final text: the trailing incomplete sequence (U+FFFD in tokenizer.decode) left out."""
    return text.rstrip("\ufffd")


def test_every_cut_of_a_multibyte_answer_passes_with_the_right_tokenizer(tokenizer):
    ids = tokenizer(TEXT, add_special_tokens=False).input_ids
    cuts_mid_character = 0
    for n in range(1, len(ids) + 1):
        mine = tokenizer.decode(ids[:n])
        cuts_mid_character += mine.endswith("\ufffd")
        assert same_text(mine, held_back(mine)), (n, mine)
        assert same_text(mine, mine)
    assert cuts_mid_character >= 2  # the case under test happens at all with this vocabulary


def test_a_permuted_tokenizer_still_differs(pair_dirs, tokenizer, tmp_path):
    from test_engine_client import permuted_tokenizer_target

    from alcheck.prompts.tokenizer import load_tokenizer

    other = load_tokenizer(permuted_tokenizer_target(pair_dirs, tmp_path), "target")
    ids = tokenizer(TEXT, add_special_tokens=False).input_ids
    for n in range(2, len(ids) + 1):
        server_text = held_back(tokenizer.decode(ids[:n]))  # what a right server says
        assert not same_text(other.decode(ids[:n]), server_text), n


@pytest.mark.parametrize(
    "mine, theirs",
    [
        ("caf\ufffd", "caX"),  # a differing character before the held-back one
        ("ab\ufffd", "ab\ufffd\ufffd"),  # the server's text longer than ours
        ("ab\ufffd\ufffd\ufffd\ufffd", "ab"),  # four bytes held back: not one incomplete character
        ("abc", "ab"),  # a real character missing, not a replacement one
    ],
)
def test_anything_beyond_a_held_back_character_is_refused(mine, theirs):
    assert not same_text(mine, theirs)


def test_whitespace_is_ignored_as_before():
    assert same_text("a b\n c\ufffd", "abc")


def stray_byte_id(tokenizer) -> int:
    """A token that is one continuation byte: alone it decodes to U+FFFD."""
    for t in tokenizer(TEXT, add_special_tokens=False).input_ids:
        if tokenizer.decode([t]) == "\ufffd":
            return t
    raise AssertionError("no single-byte token in this vocabulary")


def test_a_long_run_of_stray_bytes_at_the_end_is_what_vllm_holds_back(tokenizer):
    # CI's lossless check (2026-12-04): a temperature-1 answer of the demo target ended in nine stray
    # bytes; vLLM's text stopped before them and the client refused a correct server
    head = tokenizer("ab c", add_special_tokens=False).input_ids
    ids = head + [stray_byte_id(tokenizer)] * 9
    decode = tokenizer.decode
    mine = decode(ids)
    assert mine.endswith("\ufffd" * 9)
    assert not same_text(mine, "ab c")  # beyond one character: the cheap rule alone refuses it
    assert streamed_text(decode, ids) == decode(head)
    assert same_text(streamed_text(decode, ids), "ab c")


def test_stray_bytes_followed_by_text_are_sent_and_must_match(tokenizer):
    stray = stray_byte_id(tokenizer)
    ids = [stray] * 4 + tokenizer("xy", add_special_tokens=False).input_ids
    assert streamed_text(tokenizer.decode, ids) == tokenizer.decode(ids)  # nothing held back
    assert not same_text(streamed_text(tokenizer.decode, ids), "")


def test_an_answer_of_stray_bytes_alone_streams_nothing(tokenizer):
    assert streamed_text(tokenizer.decode, [stray_byte_id(tokenizer)] * 3) == ""


# -- the line that says why a server died ---------------------------------------------------------

FRAMES = [
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/vllm/engine/arg_utils.py", line 1955, in create_model_config',
    "    return ModelConfig(",
    "           ^^^^^^^^^^^^",
]


def test_the_cause_below_the_frames_with_its_detail_line():
    lines = [
        "(APIServer pid=7) WARNING ulimit ... `OSError: [Errno 24] Too many open files` ...",
        *FRAMES,
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
        "  Value error, User-specified max_model_len (4096) is greater than the derived max_model_len "
        "(max_position_embeddings=2048.0 ...) [type=value_error]",
        "    For further information visit https://errors.pydantic.dev/2.14/v/value_error",
    ]
    line = failure_line(lines)
    assert line.startswith(
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig: "
        "Value error, User-specified max_model_len (4096) is greater than the derived"
    )
    assert "File " not in line and "For further information" not in line


def test_a_pointer_to_the_root_cause_is_skipped_for_the_engine_cores_own_error():
    """As vLLM 0.32 logs a worker's failure: line by line behind process and logger prefixes."""
    core = [f"(EngineCore pid=9) ERROR 12-01 20:36:47 [core.py:1510] {ln}" for ln in FRAMES] + [
        "(EngineCore pid=9) ERROR 12-01 20:36:47 [core.py:1510] ValueError: Unsupported CPU attention "
        "configuration: head_dim=16"
    ]
    api = FRAMES + [
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
    ]
    assert (
        failure_line(core + ["(APIServer pid=8) INFO shutting down"] + api)
        == "ValueError: Unsupported CPU attention configuration: head_dim=16"
    )


def test_without_a_traceback_the_last_error_log_line_and_else_nothing():
    assert (
        failure_line(
            [
                "INFO a",
                "(APIServer pid=1) ERROR 12-01 20:36:47 [x.py:1] port 8000 in use",
                "(APIServer pid=1) INFO 12-01 20:36:48 [x.py:2] an error was logged above",
            ]
        )
        == "port 8000 in use"
    )
    assert failure_line(["INFO starting", "INFO still starting"]) is None


# -- per-step traces from `detailed` metrics --------------------------------------------------------


def answer(spec: dict, ids=(5, 6, 7, 8, 9, 10, 11)) -> dict:
    return {
        "choices": [{"text": "", "token_ids": list(ids), "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": len(ids)},
        "metrics": {"speculative_decoding": spec},
    }


def test_detailed_metrics_give_the_per_step_trace():
    per_step = [1, 2, 0, 1, 0, 3, 2]  # a real vLLM 0.32 CPU answer (demo pair, K=3)
    hist = [per_step.count(j) for j in range(4)]
    counts, has, k = VllmDialect().parse(
        answer(
            {
                "acceptance_histogram": hist,
                "num_spec_tokens": 3,
                "per_step_accepted": per_step,
                "per_step_drafted": [3] * 7,
            },
            ids=range(100, 117),  # 17 tokens: the prefill's, then each step's accepted drafts plus one
        ),
        [1, 2, 3],
        3,
        "srv",
    )
    assert has and k == 3 and counts.per_step_accepted == per_step
    assert (counts.steps, counts.accepted) == (len(per_step), sum(per_step))


def test_summary_metrics_have_no_trace():
    counts, _, _ = VllmDialect().parse(
        answer({"acceptance_histogram": [1, 1, 0, 0], "num_spec_tokens": 3, "per_step_accepted": None}),
        [1, 2, 3],
        3,
        "srv",
    )
    # 2 drafted steps accepting 1 draft, 7 tokens: 6 tokens after the prefill's = 2 + 1 + 3 plain steps
    assert counts.per_step_accepted is None and (counts.drafted_steps, counts.steps) == (2, 5)


@pytest.mark.parametrize(
    "per_step, needle",
    [
        ([1, 0], "has 2 steps accepting 1 drafts but the acceptance histogram 2 steps accepting 2"),
        ([0, 4], "not a list of counts 0..3"),
        ("1;1", "not a list of counts"),
    ],
)
def test_a_trace_that_disagrees_with_the_histogram_is_refused(per_step, needle):
    spec = {"acceptance_histogram": [0, 2, 0, 0], "num_spec_tokens": 3, "per_step_accepted": per_step}
    expect_error(lambda: VllmDialect().parse(answer(spec), [1, 2, 3], 3, "srv"), needle)
