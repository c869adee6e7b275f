"""The load driver: one round of a workload sent by worker threads, closed or open loop.

Why threads and not asyncio: the per-request work is blocking socket reads in `ServerClient`,
already measured at ~16 µs of client CPU per chunk (benchmarks/client_overhead.py); threads keep
each stream's timing honest without an event loop that one slow parse could stall for all.
A watchdog ends the round when the server stops sending anything (`stall_timeout`).
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_specperf.config.workloads import Prompt, SamplingParams
from pytest_specperf.errors import StalledServer
from pytest_specperf.measure.http import ServerClient
from pytest_specperf.measure.records import RequestRecord

#: Seconds each worker gets to end after an interrupt cut its request short (a socket shut down ends it at once).
INTERRUPT_JOIN_S = 2.0


@dataclass(frozen=True, slots=True)
class RoundResult:
    """One pass over a list of prompts: records in prompt order, and the perf_counter span."""

    records: tuple[RequestRecord, ...]
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


def run_requests(
    client: ServerClient,
    prompts: Sequence[Prompt],
    sampling: SamplingParams,
    *,
    concurrency: int,
    request_rate: float | None = None,
    seed: int = 0,
    on_record: Callable[[RequestRecord], None] | None = None,
    stall_timeout: float | None = None,
) -> RoundResult:
    """Send every prompt once and wait for all answers.

    Closed loop (`request_rate` None): `concurrency` workers, each sending its next prompt as soon as
    its previous answer ends. Open loop: arrivals are a Poisson process at `request_rate` per second
    (exponential gaps from `random.Random(seed)`, first arrival at once), at most `concurrency` in
    flight; an arrival finding all workers busy waits, and its `sent` is when it really went out.
    Worker threads are started before the round's clock starts, so thread start-up (slow on a busy
    machine) never delays the first requests. `on_record` is called (serialised) as each request
    finishes. Each request is bounded by the client's `request_timeout`, so this returns in bounded time;
    with `stall_timeout`, a server that sends nothing for that long while requests are in flight ends
    the round at once with `StalledServer` (a hung server must not hold the night until the timeout).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if request_rate is not None and not request_rate > 0:
        raise ValueError(f"request_rate must be > 0, got {request_rate}")
    driver = _Driver(client, prompts, sampling, on_record, stall_timeout)
    threads = driver.start_workers(min(concurrency, len(prompts)))
    driver.start = time.perf_counter()
    try:
        if request_rate is None:
            driver.dispatch_all()
        else:
            driver.dispatch_poisson(request_rate, seed)
        driver.stop_workers(threads)
    except BaseException as exc:  # Ctrl-C, or SIGTERM made KeyboardInterrupt: the server is stopped next
        driver.interrupt(exc, threads)
        raise
    end = time.perf_counter()
    return RoundResult(driver.finished_records(), driver.start, end)


class _Driver:
    """Worker threads of one round pulling prompt indexes from a queue; records kept by index."""

    def __init__(
        self,
        client: ServerClient,
        prompts: Sequence[Prompt],
        sampling: SamplingParams,
        on_record: Callable[[RequestRecord], None] | None,
        stall_timeout: float | None = None,
    ) -> None:
        self.client, self.prompts, self.sampling, self.on_record = client, prompts, sampling, on_record
        self.stall_timeout = stall_timeout
        self.records: list[RequestRecord | None] = [None] * len(prompts)
        self.work: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.failure: BaseException | None = None
        self.start = 0.0  # set after the workers are up, before the first index is queued

    def start_workers(self, n: int) -> list[threading.Thread]:
        """Start `n` workers and return once every one of them is running."""
        ready = threading.Barrier(n + 1)
        threads = [
            threading.Thread(target=self._worker, args=(ready,), name=f"specperf-worker-{k}", daemon=True)
            for k in range(n)
        ]
        for thread in threads:
            thread.start()
        ready.wait()
        return threads

    def dispatch_all(self) -> None:
        for i in range(len(self.prompts)):
            self.work.put(i)

    def dispatch_poisson(self, rate: float, seed: int) -> None:
        rng = random.Random(seed)
        arrival = 0.0
        for i in range(len(self.prompts)):
            delay = self.start + arrival - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            if self.stall_timeout is not None:
                self._check_progress()
            if self.failure is not None:
                return
            self.work.put(i)
            arrival += rng.expovariate(rate)

    def stop_workers(self, threads: list[threading.Thread]) -> None:
        """Wait for the workers; watch the server's progress meanwhile (the stall watchdog)."""
        for _ in threads:
            self.work.put(None)
        poll = None if self.stall_timeout is None else min(1.0, self.stall_timeout / 4)
        for thread in threads:
            thread.join(poll)
            while thread.is_alive():
                self._check_progress()
                thread.join(poll)

    def interrupt(self, cause: BaseException, threads: list[threading.Thread]) -> None:
        """Send nothing more and cut the requests in flight short, then let the workers end.

        A server being stopped drains every request it receives (SGLang does, after its SIGTERM):
        a worker still sending the rest of the round would hold the teardown for as many answers."""
        self.failure = self.failure or cause
        self.client.abort()
        for thread in threads:
            thread.join(INTERRUPT_JOIN_S)

    def _check_progress(self) -> None:
        assert self.stall_timeout is not None
        silent = self.client.stalled_for()
        if silent > self.stall_timeout and self.failure is None:
            self.failure = StalledServer(
                f"server at {self.client.shown_url} made no progress for {silent:.0f} s (stall_timeout "
                f"{self.stall_timeout:g} s) with requests in flight: no byte of any answer arrived; it is "
                "hung (stopped, deadlocked, or a GPU fault)"
            )
            self.client.abort()

    def _worker(self, ready: threading.Barrier) -> None:
        ready.wait()
        try:
            while (i := self.work.get()) is not None:
                if self.failure is not None:
                    continue  # drain: a callback failed, stop sending
                record = self.client.generate(self.prompts[i], self.sampling, i, self.start)
                self.records[i] = record
                if self.on_record is not None:
                    self._callback(record)
        finally:
            self.client.release_connection()

    def _callback(self, record: RequestRecord) -> None:
        assert self.on_record is not None
        with self.lock:
            if self.failure is not None:
                return
            try:
                self.on_record(record)
            except BaseException as exc:  # re-raised in the caller's thread by finished_records
                self.failure = exc

    def finished_records(self) -> tuple[RequestRecord, ...]:
        """All records in prompt order; re-raises an `on_record` failure in the caller's thread."""
        if self.failure is not None:
            raise self.failure
        done = [r for r in self.records if r is not None]
        assert len(done) == len(self.records), "a worker ended without answering its prompt"
        return tuple(done)
