"""The engine client backend: a running vLLM or SGLang server decodes the sweep's prompts.

Prompts arrive as token ids (built by the sweep exactly as for the built-in runner) and go out as
token ids, so the chat template cannot drift between the two. Per request the server reports its
speculative counts (engines/vllm.py, engines/sglang.py), or, for a vLLM without per-request
metrics, its /metrics counters are differenced around one request at a time (engines/counters.py).

Each server is first asked to tokenize a fixed text: its ids (vLLM) or their count (SGLang) must
be --target's tokenizer's. The first request is then sent alone and checked: that the server
reports speculative counts at all and that its K is the K asked for. Every answer's output ids
must decode to the server's own text with --target's tokenizer (another vocabulary would not).
One server is one K; --engine-cmd starts one per K (engines/launch.py).
"""

from __future__ import annotations

import json
import platform
import sys
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from functools import partial

from alcheck import __version__
from alcheck.backends.base import BackendOutput, RequestCounts
from alcheck.backends.engines import counters
from alcheck.backends.engines.http import EngineHTTP, import_httpx
from alcheck.backends.engines.launch import EngineProcess
from alcheck.backends.engines.served_method import EVERY_STEP, REPLAY, ServedMethod, resolve
from alcheck.backends.engines.steps import most_steps, steps_from_tokens
from alcheck.backends.engines.table import client_dialect, get_engine
from alcheck.errors import AlcheckError
from alcheck.versions import package_version

PER_REQUEST = "per-request"
COUNTERS = "counters"
COUNTING = {
    COUNTERS: "vLLM /metrics counter differences, one request at a time (drafted steps); "
    "steps from the tokens"
}
PROBE_TEXT = "Hello, how are you? The quick brown fox jumps over the lazy dog."


def note(text: str):
    print(f"note: {text}", file=sys.stderr, flush=True)


class EngineBackend:
    def __init__(self, cfg, target_dir, target_raw: dict, tokenizer, url: str | None = None):
        import_httpx()
        try:
            import prometheus_client  # noqa: F401 - the /metrics parser
        except ImportError:
            raise AlcheckError(
                "--engine needs httpx and prometheus_client: pip install 'alcheck[serve]'"
            ) from None
        from alcheck.models.loading import eos_ids

        self.cfg, self.tokenizer = cfg, tokenizer
        self.url = url or cfg.endpoint  # this client's server (engine_fleet.py holds one client per URL)
        self.peer: str | None = None  # a fleet's first server, already checked: errors name it too
        self.engine = get_engine(cfg.engine)  # the table's facts about this kind of server
        self.dialect = client_dialect(cfg.engine)()
        self.config_vocab = int(target_raw.get("vocab_size") or 0)
        self.vocab_size = max(self.config_vocab, len(tokenizer))  # the ids --target's model can emit
        # the server runs the model: its config need not be one alcheck's runner implements
        self.eos_token_ids = eos_ids(target_dir, target_raw, tokenizer)
        self.http: EngineHTTP | None = None
        self.process: EngineProcess | None = None
        self.info: dict | None = None
        self.k: int | None = None
        self.mode: str | None = None  # decided by the first answer of each server
        self.servers: dict[str, dict] = {}  # K -> what that server reported
        self.previous: dict = {}  # a resumed run's recorded environment (prepare sets it)
        self.heads: dict[str, dict] = {}  # K -> the draft head as stated, and whether the server confirmed it
        # the method the server runs, where its counts leave out steps (engines/served_method.py)
        self.served: ServedMethod | None = None
        self.note = note

    @classmethod
    def prepare(cls, cfg, target_dir, target_raw: dict, tokenizer, previous: dict) -> EngineBackend:
        """Connect and check now: a server that is down, of another kind or another K fails here, in one
        line."""
        backend = cls(cfg, target_dir, target_raw, tokenizer)
        backend.previous = dict(previous or {})
        try:
            backend.check()
        except BaseException:
            backend.close()
            raise
        return backend

    @classmethod
    def for_worker(cls, cfg, state: dict, device: str, tp=None, tokenizer=None):
        raise AlcheckError("--engine runs in one process: drop --devices and --tensor-parallel-size")

    def worker_state(self) -> dict:
        return {}

    def check_positions(self, positions: int) -> None:
        pass  # the server computes its own model's attention

    def checkpoints(self) -> dict:
        return {}  # the server's head is its own (a resume checks the server instead)

    def runtime(self) -> dict:
        return {}  # the server's device, dtype and kernels are its own

    @property
    def devices(self) -> list[str]:
        return ["-"]  # the server's, not ours

    # -- servers ---------------------------------------------------------------------------------

    def check(self):
        """Before anything is written: connect to --endpoint and check the server (its kind, K,
        vocabulary and metrics). With --engine-cmd that happens as each K's server starts."""
        if not self.cfg.engine_cmd:
            self._connect(self.url, self.cfg.ks[0], "--endpoint")
            self._probe(self.cfg.ks[0])
        else:  # --method against the command's speculative config, before a server starts
            self._served_method(None, ask=False)

    def load(self):
        """Nothing to load: the server holds the weights."""

    def _probe(self, k: int):
        """Short requests before anything is written: tokenizer, metrics present, K and vocabulary right."""
        self._check_tokenizer(k)
        ids = self.tokenizer(PROBE_TEXT).input_ids or [0]
        self._first(list(ids), k, self.cfg.seed, min(self.cfg.max_tokens, 16))
        # after the first answer: a server of another K is named as such, not by a setting K changes
        self._check_same_server(k, self.http.base_url)
        self._check_served_model(self.info.get("model"), self.http.base_url)

    def _check_tokenizer(self, k: int):
        """Round trip: the server tokenizes PROBE_TEXT with its tokenizer; --target's must give the same
        ids (or, where only a count comes back, as many). A tokenizer of the same size but other ids
        passes every vocabulary-size check; this one does not depend on what the model answers."""
        plain = list(self.tokenizer(PROBE_TEXT, add_special_tokens=False).input_ids)
        special = list(self.tokenizer(PROBE_TEXT).input_ids)  # SGLang adds the BOS to a text prompt
        before = None
        if self.dialect.has_counters:
            text = self.http.get_text("/metrics", self.dialect.what, missing_ok=True)
            before = counters.parse_metrics(text, self._where(k)) if text is not None else None
        path, body = self.dialect.text_request(self.info, PROBE_TEXT)
        server_ids, server_count, generated = self.dialect.parse_text(
            self.http.post_json(path, body, self.dialect.what), self._where(k)
        )
        if before is not None:  # its tokens must be counted before the next request's "before" snapshot
            counters.settled_snapshot(self.http, before, generated)
        if server_ids is not None:
            same = server_ids in (plain, special)
        else:  # no ids and no count: nothing to compare here; every answer's text is still checked
            same = server_count is None or server_count in (len(plain), len(special))
        if not same:
            theirs = _ids(server_ids) if server_ids is not None else f"{server_count} tokens"
            raise AlcheckError(
                f"the server at {self.http.base_url} (model {self.info.get('model')}) tokenizes "
                f"{PROBE_TEXT[:20]!r}... as {theirs} but --target {self.cfg.target}'s tokenizer as "
                f"{_ids(plain)}: the tokenizers differ; pass the served model's folder as --target"
            )

    def _connect(self, url: str, k: int, flag: str):
        self._close_http()
        self.http = EngineHTTP(url, flag, self.cfg.request_timeout)
        info = self.dialect.probe(self.http)
        reported = info.pop("reported_head", None)
        self.heads[str(k)] = self._check_head(reported, url)
        self.served = self._served_method(reported)
        if isinstance(info.get("vocab_size"), int) and info["vocab_size"] != self.config_vocab:
            raise AlcheckError(
                f"{flag} {url}: the served model has a vocabulary of {info['vocab_size']} tokens but "
                f"--target {self.cfg.target} has {self.config_vocab}: pass the served model's "
                "folder as --target (its tokenizer and config)"
            )
        if info.get("server_k") is not None and info["server_k"] != k:
            raise self._k_error(k, info["server_k"], "its speculative_num_steps")
        if info.get("server_tree") is not None:
            self._check_tree(info["server_tree"], k, url)
        self.info, self.k, self.mode = info, k, None
        self.servers[str(k)] = {"endpoint": url, **{key: v for key, v in info.items() if v is not None}}

    def _check_head(self, reported: dict | None, url: str) -> dict:
        """--draft / --method are what the user states; a server that reports its head (SGLang's
        server info, `alcheck serve`) is checked against them. A method that disagrees exits 2; a
        draft path that names another head draws a note (the same head can live at two paths)."""
        cfg = self.cfg
        stated = {"draft": cfg.draft or None, "method": cfg.method or None}
        if not reported or not (reported.get("draft") or reported.get("method")):
            return {
                **stated,
                "verified": False,
                "how": (
                    f"the {cfg.engine} server does not report its draft head: --draft and --method are "
                    "as stated"
                ),
            }
        method, draft = reported.get("method"), reported.get("draft")
        if stated["method"] and method and method != stated["method"]:
            told = f" (the kind of --draft {cfg.draft})" if cfg.draft else ""
            raise AlcheckError(
                f"--method {stated['method']}{told} but the server at {url} runs {method} "
                f"({reported['source']}): pass the head the server runs as --draft, or leave --draft "
                "and --method out"
            )
        same_draft = not stated["draft"] or not draft or _same_model(stated["draft"], draft)
        if not same_draft:
            self.note(
                f"--draft {cfg.draft} but the server at {url} "
                f"reports the draft {draft} ({reported['source']}): "
                "run.json records both; pass the server's head as --draft if it is another one"
            )
        return {
            **stated,
            "reported_draft": draft,
            "reported_method": method,
            # confirmed: something was stated, and the server reports every stated part the same
            "verified": bool(
                (stated["draft"] or stated["method"])
                and same_draft
                and (draft or not stated["draft"])
                and (method or not stated["method"])
            ),
            "how": reported["source"],
        }

    def _served_method(self, reported: dict | None, ask: bool = True) -> ServedMethod | None:
        """The method this server runs, where the engine counts only the steps that drafted: from
        --method, --engine-cmd's speculative config, or the server (None: every step is counted)."""
        from alcheck.methods.ngram import NGRAM
        from alcheck.methods.ngram_options import VLLM_RULE, resolve_options

        cfg = self.cfg
        if not self.engine.steps_are_drafted_only:  # every step is counted; a stated rule is still checked
            return ServedMethod(cfg.method, "--method") if cfg.method == NGRAM.name else None
        served = resolve(cfg.method or None, cfg.engine_cmd, reported)
        asker = getattr(self.dialect, "served_method", None)
        if ask and served.name is None and served.kind != EVERY_STEP and asker is not None:
            told = asker(self.http)  # vLLM's /server_info: a dev-mode server only
            if told is not None:
                served = resolve(cfg.method or None, cfg.engine_cmd, told)
        if served.kind == REPLAY and cfg.method == NGRAM.name and cfg.ngram_rule == VLLM_RULE:
            given = [served.spec.get(key) for key in ("prompt_lookup_min", "prompt_lookup_max")]
            if any(v is not None for v in given):
                _, low, high = resolve_options(VLLM_RULE, *given)
                if (low, high) != (cfg.prompt_lookup_min, cfg.prompt_lookup_max):
                    raise AlcheckError(
                        f"--prompt-lookup-min {cfg.prompt_lookup_min} --prompt-lookup-max "
                        f"{cfg.prompt_lookup_max} but {served.source} serves n-gram sizes {low}..{high}: "
                        "state the sizes the server runs (or leave them out of one of the two)"
                    )
        return served

    def _check_served_model(self, served, url: str):
        """The prompts are built with --target's tokenizer (checked against the server's below);
        a served model id that names another model still deserves a word."""
        if served and not _same_model(self.cfg.target, str(served)):
            self.note(
                f"the server at {url} serves {served!r}, not --target {self.cfg.target!r}: the prompts use "
                "--target's tokenizer and chat template; make sure it is the served model's"
            )

    def _check_same_server(self, k: int, url: str):
        """On --resume, K's server must be the one this run measured (model, draft, version, settings):
        rows from two servers would be pooled into one AL. Where it listens may change."""
        old = (self.previous.get("servers") or {}).get(str(k))
        if old is None:
            return
        new = json.loads(json.dumps(self.servers[str(k)], allow_nan=False))  # tuples as the recorded lists
        differ = [
            key
            for key in sorted(set(old) | set(new))
            if key not in ("endpoint", "endpoints", "command") and old.get(key) != new.get(key)
        ]
        if differ:
            said = "; ".join(f"{key} {old.get(key)!r} then, {new.get(key)!r} now" for key in differ[:3])
            raise AlcheckError(
                f"--resume: the server for K={k} at {url} is not the one this run measured ({said}): "
                "restart the same server, or start a new run"
            )

    def _check_tree(self, server_tree: tuple[int, int], k: int, url: str):
        """SGLang's (topk, num_draft_tokens) against the run's --topk / --num-draft-tokens (chain: 1, K +
        1)."""
        topk = self.cfg.topk
        tokens = self.cfg.num_draft_tokens or (None if self.cfg.is_tree else k + 1)
        if (topk, tokens) != tuple(server_tree):
            want = f"--topk {topk} --num-draft-tokens {tokens}" if self.cfg.is_tree else "a chain"
            raise AlcheckError(
                f"the server at {url} drafts with speculative_eagle_topk {server_tree[0]} and "
                f"speculative_num_draft_tokens {server_tree[1]} but this run asks for {want}: pass "
                f"--topk {server_tree[0]} --num-draft-tokens {server_tree[1]}, or restart the server"
            )

    def use_k(self, k: int):
        self._server_for(k)

    def _server_for(self, k: int):
        if self.cfg.engine_cmd:
            if self.process is None or self.k != k:
                self._stop_process()
                self._start(k)
        elif k != self.k:  # RunConfig allows one K without --engine-cmd; a resumed run may ask another
            raise self._k_error(k, self.k, "the K this run connected for")

    def _start(self, k: int):
        proc = EngineProcess(self.cfg.engine_cmd, k, self.url)
        if "{port}" not in self.cfg.engine_cmd:  # else alcheck would measure whatever answers there
            answering = EngineHTTP(proc.url, "--engine-cmd")
            try:
                if answering.status("/health") is not None:
                    raise AlcheckError(
                        f"--engine-cmd: something already listens at {proc.url} before the command "
                        "started: stop it, or put {port} in --engine-cmd so alcheck picks a free port"
                    )
            finally:
                answering.close()
        self.process = proc
        proc.start()
        self.note(f"started the engine for K={k} (pid {proc.pid}): {proc.command}")
        waiting = EngineHTTP(proc.url, "--engine-cmd")
        try:
            proc.wait_healthy(waiting, self.cfg.engine_start_timeout)
        finally:
            waiting.close()
        self._connect(proc.url, k, "--engine-cmd")
        self.servers[str(k)]["command"] = proc.command
        self._probe(k)

    def _k_error(self, k: int, server_k, source: str) -> AlcheckError:
        where = self.http.base_url if self.http else self.url
        if self.peer:  # --ks agreed with the fleet's first server: this one differs from it
            return AlcheckError(
                f"--endpoint {where} drafts {server_k} tokens per step ({source}) but --endpoint "
                f"{self.peer} drafts {k} (--ks {k}): the servers of one run must be alike: restart "
                f"{where} with K={k}, or leave it out"
            )
        return AlcheckError(
            f"--ks {k} but the server at {where} drafts {server_k} tokens per step ({source}): "
            f"pass --ks {server_k}, or restart the server with K={k}"
        )

    def _stop_process(self):
        if self.process is not None:
            proc, self.process = self.process, None
            proc.stop()

    def _close_http(self):
        if self.http is not None:
            self.http.close()
            self.http = None

    def close(self):
        self._close_http()
        self._stop_process()

    # -- requests --------------------------------------------------------------------------------

    def generate(self, prompts, k, seed, on_progress=None) -> BackendOutput:
        self._server_for(k)
        results: list = [None] * len(prompts)
        done = {"tokens": 0}

        def finished(i, counts):
            results[i] = counts
            done["tokens"] += counts.generated_tokens
            if on_progress:
                on_progress(1, done["tokens"])

        seeds = [seed + i for i in range(len(prompts))]  # temperature > 0: a seed per request
        start = 0
        if self.mode is None and prompts:
            finished(0, self._first(prompts[0], k, seeds[0]))
            start = 1
        rest = list(range(start, len(prompts)))
        if self.mode == COUNTERS or self.cfg.concurrency <= 1:
            for i in rest:
                finished(i, self._request(prompts[i], k, seeds[i]))
        else:
            self._parallel(rest, prompts, k, seeds, finished)
        return BackendOutput(results, None)

    def _parallel(self, rest, prompts, k, seeds, finished):
        pool = ThreadPoolExecutor(max_workers=self.cfg.concurrency, thread_name_prefix="alcheck-engine")
        pending = set()
        try:
            futures = {pool.submit(self._request, prompts[i], k, seeds[i]): i for i in rest}
            pending = set(futures)
            while pending:
                complete, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in complete:
                    finished(futures[future], future.result())  # raises the first failure
        except KeyboardInterrupt:
            # queued requests are cancelled; those on the wire cannot be, and Python waits for them at exit
            running = sum(1 for f in pending if f.running())
            if running:
                self.note(
                    f"interrupted: waiting for the {running} request{'s' * (running != 1)} already sent to "
                    f"the server to return (at most {self.cfg.request_timeout:g} s, --request-timeout)"
                )
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _where(self, k: int) -> str:
        return f"{self.http.base_url} (K={k})"

    def _send(self, prompt, k, seed, max_tokens=None):
        cfg = self.cfg
        path, body = self.dialect.request(
            self.info, prompt, max_tokens or cfg.max_tokens, cfg.temperature, seed
        )
        answer = self.http.post_json(path, body, self.dialect.what)
        return self.dialect.parse(answer, prompt, k, self._where(k))

    def _first(self, prompt, k, seed, max_tokens=None) -> RequestCounts:
        """The first request on a server, alone: decides per-request vs counter mode and checks
        the server's K and vocabulary."""
        before = None
        if self.dialect.has_counters:
            text = self.http.get_text("/metrics", self.dialect.what, missing_ok=True)
            before = counters.parse_metrics(text, self._where(k)) if text is not None else None
        counts, has_metrics, server_k = self._send(prompt, k, seed, max_tokens)
        self._check_answer(counts, prompt, k, server_k)
        if has_metrics:
            self.mode = PER_REQUEST
        elif before is not None and before.has_spec:
            self.mode = COUNTERS
            self._difference(before, counts, k)
            if self.cfg.concurrency > 1:
                self.note(
                    f"the server at {self.http.base_url} returns no per-request speculative metrics: "
                    "counting by /metrics differences, one request at "
                    f"a time (--concurrency {self.cfg.concurrency} "
                    "ignored); vLLM >= 0.29 with --per-request-spec-decode-metrics summary allows more"
                )
        elif self.engine.silent_without_steps and counts.generated_tokens <= 1:
            self.mode = None  # finished at prefill: no verification step to report; decide on the next
        else:
            raise AlcheckError(
                f"the server at {self.http.base_url} returned no speculative decoding metrics: "
                f"{self.engine.no_metrics_fix}"
            )
        if self.mode is not None:
            self._settle_steps(counts, prompt, k)
        return counts

    def _request(self, prompt, k, seed) -> RequestCounts:
        if self.mode == COUNTERS:
            before = counters.read_snapshot(self.http)
            counts, _, server_k = self._send(prompt, k, seed)
            self._check_answer(counts, prompt, k, server_k)
            self._difference(before, counts, k)
            self._settle_steps(counts, prompt, k)
            return counts
        counts, has_metrics, server_k = self._send(prompt, k, seed)
        self._check_answer(counts, prompt, k, server_k)
        if not has_metrics and counts.generated_tokens > 1:
            raise AlcheckError(
                f"the server at {self.http.base_url} returned no speculative decoding metrics for a "
                f"request of {counts.generated_tokens} tokens: {self.engine.no_metrics_fix}"
            )
        if self.mode is None and has_metrics:
            self.mode = PER_REQUEST
        if has_metrics:
            self._settle_steps(counts, prompt, k)
        return counts

    def _settle_steps(self, counts: RequestCounts, prompt, k: int):
        """Where the engine counts only the steps that drafted, the steps the tokens leave between
        the fewest and the most (engines/steps.py) are settled by the method: n-gram is replayed
        over the answer (exact, and the server's counts checked against the rule), a head or draft
        model drafts at every step (the fewest); otherwise an answer whose steps are not certain is
        refused in one line, never counted."""
        served = self.served
        if served is None:
            return
        if served.kind == REPLAY and counts.output_ids:
            self._replay_ngram(counts, prompt, k, served)
            return
        if served.kind == EVERY_STEP and counts.steps == counts.steps_drafted:
            return  # every step drafted, as the method does: the steps are the drafted ones
        last = getattr(counts, "last_drafted_accepted", None)
        most = most_steps(counts.generated_tokens, counts.accepted, counts.steps_drafted, k, last)
        if most != counts.steps:
            raise AlcheckError(self._unsettled(counts, most, served, k))

    def _unsettled(self, counts: RequestCounts, most: int, served: ServedMethod, k: int) -> str:
        said = (
            f"{self._where(k)}: the server counts {counts.steps_drafted} drafted steps accepting "
            f"{counts.accepted} drafts for an answer of {counts.generated_tokens} tokens, which leaves "
            f"{counts.steps} to {most} verification steps ({self.engine.title} counts no step that "
            "drafted nothing, and drafts accepted past EOS / max_tokens are cut from the answer)"
        )
        if served.name is None:
            return (
                f"{said}, and nothing names the method it serves: pass --method (n-gram with the "
                "server's --prompt-lookup-min and --prompt-lookup-max is replayed; a head or draft "
                "model drafts at every step), or start the server with --engine-cmd and its "
                "--speculative-config"
            )
        if served.kind == EVERY_STEP:
            return (
                f"{said}, though {served.describe()} drafts at every step: the server skipped drafting "
                "at some steps (another method than stated, or a setting such as vLLM's "
                "disable_by_batch_size): pass the --method the server runs, or serve without that setting"
            )
        if served.kind == REPLAY:
            return (
                f"{said}, and the answer has no token ids to replay {served.describe()} over: use a "
                "vLLM that returns token_ids (>= 0.10.2)"
            )
        return (
            f"{said}, and alcheck cannot replay {served.describe()}, which may draft nothing at some "
            "steps: measure it with alcheck's built-in runner, or pass --method if the server runs "
            "another method"
        )

    def _replay_ngram(self, counts: RequestCounts, prompt, k: int, served: ServedMethod):
        """n-gram: the steps replayed from the answer (engines/replay.py), exact where the counts
        leave them uncertain, and the server's counts checked against the rule: --method ngram's
        options, else the sizes of the speculative config that named it (vLLM's defaults if none)."""
        from alcheck.backends.engines.replay import check_counts, replay
        from alcheck.methods.ngram import NGRAM
        from alcheck.methods.ngram_options import VLLM_RULE, resolve_options
        from alcheck.runner.proposers.ngram_rules import NgramSettings, propose

        cfg = self.cfg
        max_len = (self.info or {}).get("max_model_len")  # vLLM drafts nothing past it
        if cfg.method == NGRAM.name:
            rule = NgramSettings(cfg.ngram_rule, cfg.prompt_lookup_min, cfg.prompt_lookup_max, max_len)
            stated = (
                f"--method ngram --ngram-rule {rule.rule} --prompt-lookup-min {rule.min_n} "
                f"--prompt-lookup-max {rule.max_n}"
            )
        else:
            sizes = (served.spec.get("prompt_lookup_min"), served.spec.get("prompt_lookup_max"))
            name, low, high = resolve_options(VLLM_RULE, *sizes)
            rule = NgramSettings(name, low, high, max_len)
            stated = f"{served.source}'s n-gram rule (sizes {low}..{high})"
        found = replay(lambda ctx: propose(rule, ctx, k, self.eos_token_ids), prompt, counts.output_ids)
        check_counts(found, counts.steps_drafted, counts.accepted, self._where(k), stated)
        counts.steps = found.steps

    def _difference(self, before, counts: RequestCounts, k: int):
        after = counters.settled_snapshot(self.http, before, counts.generated_tokens)
        if after.k is not None and after.k != k:
            raise self._k_error(k, after.k, "its per-position counters")
        counters.check_alone(before, after, counts.generated_tokens, self._where(k))
        drafts, drafted, accepted, per_pos = counters.difference(before, after, k, self._where(k))
        # num_drafts counts the steps that drafted; the steps come from the tokens (engines/steps.py)
        counts.drafted_steps, counts.drafted, counts.accepted, counts.accepted_per_pos = (
            drafts,
            drafted,
            accepted,
            per_pos,
        )
        counts.steps = steps_from_tokens(counts.generated_tokens, accepted, drafts, k, self._where(k))

    def _check_answer(self, counts: RequestCounts, prompt, k: int, server_k):
        where = self.http.base_url
        if server_k is not None and server_k != k:
            raise self._k_error(k, server_k, "its num_spec_tokens")
        if counts.prompt_tokens != len(prompt):
            raise AlcheckError(
                f"the server at {where} counted {counts.prompt_tokens} prompt tokens for a prompt of "
                f"{len(prompt)} token ids: it changed the prompt, so its numbers are not for these prompts"
            )
        ids = counts.output_ids or []
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise AlcheckError(
                f"the server at {where} generated token id {bad[0]}, outside --target's vocabulary of "
                f"{self.vocab_size}: pass the served model's folder as --target"
            )
        # every answer, not only the first: an answer of EOS alone has no text to compare
        if counts.output_ids and counts.text:
            decode = partial(self.tokenizer.decode, skip_special_tokens=True)
            mine = decode(counts.output_ids)
            if not same_text(mine, counts.text) and not same_text(
                streamed_text(decode, counts.output_ids), counts.text
            ):
                raise AlcheckError(
                    f"the server at {where} decodes its output ids to other text than --target's "
                    f"tokenizer does ({counts.text[:40]!r} vs {mine[:40]!r}): its vocabulary differs; "
                    "pass the served model's folder as --target"
                )

    # -- what run.json records -------------------------------------------------------------------

    def _counting(self) -> str | None:
        counting = COUNTING.get(self.mode, self.dialect.counting if self.mode else None)
        how = _how_steps(self.served) if self.engine.steps_are_drafted_only else None
        return f"{counting}; {how}" if counting and how else counting

    def describe(self) -> dict:
        cfg, info = self.cfg, self.info or {}
        env = {
            "alcheck": __version__,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "backend": "engine",
            "engine": cfg.engine,
            "engine_version": info.get("version"),
            "endpoint": self.http.base_url if self.http else self.url,
            "served_model": info.get("model"),
            "max_model_len": info.get("max_model_len"),
            "counting": self._counting(),
            "concurrency": 1 if self.mode == COUNTERS else cfg.concurrency,
            "device_name": f"{cfg.engine} {info.get('version') or ''} server".replace("  ", " "),
            "dtype": info.get("dtype"),
            "servers": {**(self.previous.get("servers") or {}), **self.servers},
            "httpx": package_version("httpx"),
            "transformers": package_version("transformers"),
        }
        if cfg.engine_cmd:
            env["engine_cmd"] = cfg.engine_cmd
        heads = {**(self.previous.get("draft_heads") or {}), **self.heads}
        if heads:  # config.draft / config.method are as stated; this says whether the server confirmed them
            env["draft_heads"] = heads
            env["draft_verified"] = all(h.get("verified") for h in heads.values())
        return {key: value for key, value in env.items() if value is not None}


def _how_steps(served: ServedMethod | None) -> str | None:
    """How the steps the engine leaves out were settled, in words (run.json's counting says it)."""
    if served is None:
        return None
    if served.kind == REPLAY:
        return f"steps replayed by the n-gram rule ({served.source})"
    if served.kind == EVERY_STEP:
        return f"steps = drafted steps ({served.describe()} drafts at every step)"
    method = served.describe() if served.name else "no method named"
    return f"steps from the tokens, certain in every answer ({method})"


def _same_model(stated: str, reported: str) -> bool:
    """The same checkpoint named two ways: equal strings, one resolved local folder, or the same
    last path component (a hub id and its local copy)."""
    from pathlib import Path

    if stated == reported:
        return True
    a, b = Path(stated).expanduser(), Path(reported).expanduser()
    if a.exists() and b.exists():
        return a.resolve() == b.resolve()
    return a.name == b.name and a.name != ""


HELD_BACK_MAX = 3  # one character cut short: at most 3 U+FFFD (a longer tail: streamed_text)


def same_text(mine: str, theirs: str) -> bool:
    """--target's decode of the output ids against the server's text, whitespace aside.

    vLLM's detokenizer holds back a trailing incomplete UTF-8 sequence (an answer cut mid-character),
    where tokenizer.decode ends in U+FFFD instead: those trailing replacement characters may be
    missing from the server's text, nothing else may differ."""
    mine, theirs = "".join(mine.split()), "".join(theirs.split())
    if mine == theirs:
        return True
    kept = mine.rstrip("\ufffd")
    held = len(mine) - len(kept)
    # the server's text is ours less some of the trailing replacement characters
    return (
        held <= HELD_BACK_MAX
        and len(theirs) < len(mine)
        and theirs.startswith(kept)
        and theirs[len(kept) :] == "\ufffd" * (len(theirs) - len(kept))
    )


def streamed_text(decode, ids: list[int]) -> str:
    """The text an incremental detokenizer has sent when the answer ends (vLLM's, which steps
    tokenizers' DecodeStream): it sends text only when what it holds does not end in U+FFFD, so a
    tail whose text keeps ending in one never comes out. That tail is one character cut short, or a
    run of stray bytes of any length from a small model at temperature 1 (the CI's lossless check
    saw nine), so it has no fixed bound."""
    for m in range(len(ids), 0, -1):
        text = decode(ids[:m])
        if not text.endswith("\ufffd"):
            return text
    return ""


def _ids(ids: list[int]) -> str:
    head = ", ".join(map(str, ids[:6]))
    return f"[{head}{', ...' if len(ids) > 6 else ''}] ({len(ids)} tokens)"
