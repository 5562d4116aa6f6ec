"""Several servers of one kind, one per node, measured as one: `alcheck run --engine E --endpoint A
--endpoint B ...` spreads the sweep's requests over them.

Each server gets its own client (engine_client.py), checked as a single server is (kind, tokenizer,
K, vocabulary, its first request alone), and then against the first server: what each reports
(engine, version, model, context, draft head, tree, counting) must be the same, or the run would pool
two servers' rows into one AL. A request's counts depend only on its prompt, K and seed (the seed is
the request's index, not the server's), so the rows equal a single server's whoever answers.

The spread is a shared queue, not a fixed split: answers vary in length by 10x, and a queue keeps
every server busy until the cell's last request. Each server takes --concurrency requests at once,
or one at a time where its counts are /metrics differences (engines/counters.py), which need the
server to themselves; the servers run side by side either way.
"""

from __future__ import annotations

import queue
import re
import sys
import threading

from alcheck.backends.base import BackendOutput
from alcheck.backends.engine_client import COUNTERS, EngineBackend
from alcheck.backends.engines.http import EngineAnswer
from alcheck.errors import AlcheckError

POLL_S = 0.1  # how often the waiting main thread wakes (Ctrl-C lands between waits)
SAME_EXCEPT = ("endpoint", "endpoints", "command")  # where a server listens, not what it computes


class EngineFleet:
    def __init__(self, members: list[EngineBackend]):
        self.members = members
        self.cfg = members[0].cfg
        first = members[0]
        self.tokenizer, self.eos_token_ids, self.vocab_size = (
            first.tokenizer,
            first.eos_token_ids,
            first.vocab_size,
        )

    @classmethod
    def prepare(cls, cfg, target_dir, target_raw: dict, tokenizer, previous: dict) -> EngineFleet:
        """Connect to every --endpoint and check each, then each against the first: before anything
        is written, in one line naming both servers."""
        members: list[EngineBackend] = []
        note = _once()
        try:
            for url in cfg.endpoints:
                member = EngineBackend(cfg, target_dir, target_raw, tokenizer, url=url)
                member.previous, member.note = dict(previous or {}), note
                member.peer = members[0].url if members else None
                members.append(member)
                _check_one(member, cfg)
                if member.peer:
                    check_alike(members[0], member)
        except BaseException:
            for member in members:
                member.close()
            raise
        return cls(members)

    @classmethod
    def for_worker(cls, cfg, state: dict, device: str, tp=None, tokenizer=None):
        return EngineBackend.for_worker(cfg, state, device, tp, tokenizer)

    def worker_state(self) -> dict:
        return {}

    def check_positions(self, positions: int) -> None:
        pass

    def checkpoints(self) -> dict:
        return {}

    def runtime(self) -> dict:
        return {}

    @property
    def devices(self) -> list[str]:
        return ["-"]

    def load(self):
        """Nothing to load: the servers hold the weights."""

    def use_k(self, k: int):
        for member in self.members:
            member.use_k(k)

    def close(self):
        for member in self.members:
            member.close()

    # -- requests --------------------------------------------------------------------------------

    def generate(self, prompts, k, seed, on_progress=None) -> BackendOutput:
        for member in self.members:
            member.use_k(k)  # refuses a K its server was not checked for
        results: list = [None] * len(prompts)
        todo: queue.SimpleQueue = queue.SimpleQueue()
        for i in range(len(prompts)):
            todo.put(i)
        done: queue.SimpleQueue = queue.SimpleQueue()  # (index, counts) or (None, exception)
        stop = threading.Event()

        def lane(member: EngineBackend, first: bool):
            """One request at a time off the shared queue until it is empty (or another lane failed)."""
            try:
                while not stop.is_set():
                    try:
                        i = todo.get_nowait()
                    except queue.Empty:
                        return
                    ask = member._first if first else member._request
                    counts = ask(prompts[i], k, seed + i)  # the seed of the request, whoever answers
                    counts.served_by = member.url
                    done.put((i, counts))
                    if first:  # its server's first answer decided how to count: now the rest of its lanes
                        first = False
                        for _ in range(lanes_of(member) - 1):
                            start(member, False)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
                stop.set()
                done.put((None, exc))

        threads: list[threading.Thread] = []
        lock = threading.Lock()

        def start(member, first):
            thread = threading.Thread(target=lane, args=(member, first), daemon=True, name="alcheck-engine")
            with lock:
                threads.append(thread)
            thread.start()

        def lanes_of(member) -> int:
            return 1 if member.mode == COUNTERS else self.cfg.concurrency

        for member in self.members:
            if member.mode is None:  # its first request goes alone (engine_client._first)
                start(member, True)
            else:
                for _ in range(lanes_of(member)):
                    start(member, False)
        tokens = received = 0
        try:
            while received < len(prompts):
                try:
                    i, counts = done.get(timeout=POLL_S)
                except queue.Empty:
                    with lock:
                        alive = any(t.is_alive() for t in threads)
                    if not alive and done.empty():  # every lane ended and nothing is left: a lost request
                        raise AlcheckError("the engine lanes stopped with requests unanswered") from None
                    continue
                if i is None:
                    raise counts  # the first failure, its own one line
                results[i] = counts
                received += 1
                tokens += counts.generated_tokens
                if on_progress:
                    on_progress(1, tokens)
        except KeyboardInterrupt:
            stop.set()
            self.members[0].note(
                "interrupted: waiting for the requests already sent to the servers to return (at most "
                f"{self.cfg.request_timeout:g} s, --request-timeout)"
            )
            raise
        finally:
            stop.set()  # lanes take no new request; those on the wire end by themselves (daemon threads)
        return BackendOutput(results, None)

    # -- what run.json records -------------------------------------------------------------------

    def describe(self) -> dict:
        env = self.members[0].describe()
        urls = [m.http.base_url if m.http else m.url for m in self.members]
        env["endpoints"] = urls
        env["servers"] = {
            k: {**record, "endpoints": urls} if k in self.members[0].servers else record
            for k, record in env.get("servers", {}).items()
        }
        return env


def _check_one(member: EngineBackend, cfg):
    """The single-server checks; a later server that is not the dialect at all is another kind of
    server than the first: say so, naming both."""
    try:
        member.check()
    except EngineAnswer as exc:
        if not member.peer:
            raise
        reason = re.sub(r": is this .*\?$", "", str(exc)).removeprefix(f"--endpoint {member.url}: ")
        what = member.dialect.what
        raise AlcheckError(
            f"--endpoint {member.url} is not {what} like --endpoint {member.peer} ({reason}): every "
            f"--endpoint must be a server of --engine {cfg.engine}: leave it out, or pass that node's "
            f"{cfg.engine} server"
        ) from None


def check_alike(first: EngineBackend, other: EngineBackend):
    """What two servers report (engine, version, model, context, head, tree) and how they count must
    agree: rows of both are pooled into one AL."""
    k = str(first.k)
    mine = {key: v for key, v in first.servers[k].items() if key not in SAME_EXCEPT}
    theirs = {key: v for key, v in other.servers[k].items() if key not in SAME_EXCEPT}
    mine["counting"], theirs["counting"] = first.mode, other.mode
    mine["draft head"], theirs["draft head"] = _head(first, k), _head(other, k)
    differ = [key for key in sorted(set(mine) | set(theirs)) if mine.get(key) != theirs.get(key)]
    if differ:
        said = "; ".join(f"{key} {mine.get(key)!r} there, {theirs.get(key)!r} here" for key in differ[:3])
        raise AlcheckError(
            f"--endpoint {other.url} is not the server --endpoint {first.url} is ({said}): the servers "
            "of one run must be alike (engine, version, model, draft head, K): restart it like the "
            "first, or leave it out"
        )


def _head(member: EngineBackend, k: str):
    head = member.heads.get(k) or {}
    return (head.get("reported_draft"), head.get("reported_method"))


def _once():
    """A note printer that says each text once (every server's client notes the same things)."""
    said: set[str] = set()
    lock = threading.Lock()

    def note(text: str):
        with lock:
            if text in said:
                return
            said.add(text)
        print(f"note: {text}", file=sys.stderr, flush=True)

    return note
