"""Sequences from a running engine at temperature > 0, for the lossless check
(alcheck/engine/lossless_check.py): each prompt sent `samples` times with its own seed, the
output token ids kept. Neutral top_p / top_k / min_p go with every request (engines/vllm.py
NEUTRAL), so the engine samples the target's own distribution at the temperature."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from alcheck.errors import AlcheckError


def sample_seed(seed: int, prompt_index: int, draw: int) -> int:
    return seed + 100003 * draw + prompt_index


def engine_samples(http, dialect, info: dict, prompts: list[list[int]], k: int, max_tokens: int,
                   temperature: float, samples: int, seed: int, concurrency: int = 4) -> list[list[list[int]]]:
    """[prompt][draw] -> output ids, from the server behind `http` (an EngineHTTP) in `dialect`."""
    if temperature <= 0:
        raise AlcheckError("the lossless check samples at a temperature > 0: pass --temperature above 0")
    where = f"{http.base_url} (K={k})"

    def one(job):
        i, draw = job
        path, body = dialect.request(info, prompts[i], max_tokens, temperature, sample_seed(seed, i, draw))
        counts, _, _ = dialect.parse(http.post_json(path, body, dialect.what), prompts[i], k, where)
        if counts.output_ids is None:
            raise AlcheckError(f"{where} returns no output token ids: the lossless check needs them "
                               "(vLLM >= 0.10.2 returns them with return_token_ids)")
        return counts.output_ids

    jobs = [(i, draw) for draw in range(samples) for i in range(len(prompts))]
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        outputs = list(pool.map(one, jobs))
    per_prompt: list[list[list[int]]] = [[] for _ in prompts]
    for (i, _), ids in zip(jobs, outputs):
        per_prompt[i].append(ids)
    return per_prompt
