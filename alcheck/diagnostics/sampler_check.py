"""`alcheck run --engine ... --check-lossless` above temperature 0: is the server's sampler lossless?

Per K, the server's turn-1 outputs of every repeat (one seeded sample per question and repeat) are set
against as many target-only samples of the same prompts, drawn by alcheck's own runner, with the
two-sample test of alcheck/metrics/lossless.py. Both sides are scored by the built-in target, loaded
in float32 on the CPU (the reference distribution, whatever the server computes in).

Resume keeps the test exact: each cell's per-sequence statistics go into its run.json record as the
cell is recorded (`lossless_statistics`: [question_id, surprise, top-1] per question, file order), and
the target-only side is drawn from the run's seed, so a K's test reads the same numbers whichever
session recorded its cells. The test runs once a K has all its repeats; its result is
run.json's summary[k]["lossless_test"]. Torch loads only when the first cell is scored.
"""

from __future__ import annotations

from alcheck.errors import AlcheckError

STATISTICS_KEY = "lossless_statistics"


class SamplerCheck:
    def __init__(self, plan):
        from alcheck.models.checkpoint_files import read_config
        from alcheck.models.targets import find_target

        self.plan, self.cfg = plan, plan.cfg
        # a target alcheck cannot run cannot score: refuse before the server is asked for anything
        find_target(read_config(plan.target_dir, "target"), plan.target_dir, "--check-lossless's target")
        self.prompts = {
            str(q.question_id): plan.prompts_turn1[i]
            for i, q in enumerate(plan.questions)
            if plan.turns_to_run[i] >= 1
        }
        self._target = None
        self._reference: dict[int, dict] = {}  # samples per prompt -> question id -> statistics

    def _load(self):
        if self._target is None:
            from alcheck.models.loading import load_target

            self._target = load_target(str(self.plan.target_dir), tokenizer=self.plan.get_tokenizer())
        return self._target

    def _statistics(self, questions: list[str], outputs: list[list[list[int]]]) -> dict[str, list]:
        from alcheck.runner.lossless_check import statistics

        target = self._load()
        found = statistics(target.model, [self.prompts[q] for q in questions], outputs, self.cfg.temperature)
        return {questions[i]: stats for i, stats in found.items()}

    def score(self, cell) -> list[list]:
        """The cell's turn-1 sequences as [question_id, surprise, top-1], in question file order."""
        questions = [q for q in self.prompts if q in (cell.outputs or {})]
        missing = [q for q in questions if not cell.outputs[q]]
        if missing:
            raise AlcheckError(
                f"--check-lossless: the server returned no output token ids for question {missing[0]} "
                f"(K={cell.k}): the test scores token ids (vLLM >= 0.10.2 returns them)"
            )
        found = self._statistics(questions, [[cell.outputs[q]] for q in questions])
        return [[q, *found[q][0]] for q in questions]

    def test(self, k: int, records: list[dict]) -> dict:
        """K's test from its cells' run.json records (repeat order); the dict summary[k] keeps."""
        from alcheck.metrics.lossless import permutation_test

        engine: dict[str, list] = {}
        for record in sorted(records, key=lambda r: r["repeat"]):
            for question, surprise, top1 in record.get(STATISTICS_KEY) or []:
                engine.setdefault(str(question), []).append((surprise, top1))
        samples = max((len(v) for v in engine.values()), default=0)
        if not samples:
            raise AlcheckError(f"--check-lossless: K={k} has no scored sequences: rerun it with a new --out")
        result = permutation_test(engine, self._reference_statistics(samples), seed=self.cfg.seed)
        return {
            **result.to_dict(),
            "line": result.line(),
            "samples_per_prompt": samples,
            "basis": (
                "turn 1; target-only samples from alcheck's runner, both scored by the target in float32"
            ),
        }

    def _reference_statistics(self, samples: int) -> dict[str, list]:
        """`samples` target-only sequences per prompt, drawn once for the run from its seed."""
        if samples not in self._reference:
            from alcheck.runner.lossless_check import reference_outputs

            target = self._load()
            questions = list(self.prompts)
            drawn = reference_outputs(
                target.model,
                target.eos_token_ids,
                [self.prompts[q] for q in questions],
                samples,
                self.cfg.max_tokens,
                self.cfg.temperature,
                self.cfg.seed,
            )
            self._reference[samples] = self._statistics(questions, drawn)
        return self._reference[samples]
