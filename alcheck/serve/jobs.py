"""How concurrent HTTP requests reach the runner: a queue and ONE worker thread that owns it.

Requests never share a runner call unless they are allowed to: a request at temperature > 0
always runs alone (its `seed` seeds the runner's generator, so it is reproducible), and with
`max_batch_size` 1 (the default) every request runs alone. With `max_batch_size` N > 1, greedy
requests that wait at the same time and ask for the same max_tokens share one runner call, as
in a real engine's continuous batching. Counters are updated (`on_finish`) before a request's
future resolves, so a client that reads /metrics after its response sees its counts.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from alcheck.runner.request import GenerationResult


@dataclass(slots=True)
class Job:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 0.0
    seed: int = 0
    future: Future = field(default_factory=Future)

    def batches_with(self, other: Job) -> bool:
        # greedy only: a sampled request's draws would depend on its batch neighbours
        return self.temperature == 0 and other.temperature == 0 and self.max_tokens == other.max_tokens


class ServerStopping(RuntimeError):
    """The server shut down before this request ran."""


class JobQueue:
    def __init__(self, pair, on_finish: Callable[[Job, GenerationResult], None] | None = None):
        self.pair = pair
        self.on_finish = on_finish
        self._queue: deque[Job] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="alcheck-serve-runner", daemon=True)

    def start(self) -> JobQueue:
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 5.0):
        """Finish the running batch, fail the waiting ones, and join the worker."""
        with self._cond:
            self._stopping = True
            waiting, self._queue = list(self._queue), deque()
            self._cond.notify_all()
        for job in waiting:
            job.future.set_exception(ServerStopping("the server is shutting down"))
        if self._thread.is_alive():
            self._thread.join(timeout)

    def submit(self, job: Job) -> Future:
        with self._cond:
            if self._stopping:
                raise ServerStopping("the server is shutting down")
            self._queue.append(job)
            self._cond.notify()
        return job.future

    async def run(self, job: Job) -> GenerationResult:
        """Submit from the event loop and wait without blocking it."""
        return await asyncio.wrap_future(self.submit(job))

    def _next_batch(self) -> list[Job] | None:
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            first = self._queue.popleft()
            batch, rest = [first], deque()
            while self._queue:
                job = self._queue.popleft()
                if len(batch) < self.pair.max_batch_size and first.batches_with(job):
                    batch.append(job)
                else:
                    rest.append(job)  # keeps its place in line
            self._queue = rest
            return batch

    def _loop(self):
        while (batch := self._next_batch()) is not None:
            first = batch[0]
            try:
                results = self.pair.generate(
                    [j.prompt_ids for j in batch], first.max_tokens, first.temperature, first.seed
                )
            except BaseException as exc:  # noqa: BLE001 - the request gets the error, the server lives on
                for job in batch:
                    job.future.set_exception(exc)
                continue
            for job, result in zip(batch, results):
                try:
                    if self.on_finish is not None:
                        self.on_finish(job, result)
                except BaseException as exc:  # noqa: BLE001
                    job.future.set_exception(exc)
                    continue
                job.future.set_result(result)
