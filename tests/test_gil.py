"""conv_forward releases the GIL while native code runs: a pure-Python loop in another thread keeps
making progress throughout a long call."""

import threading
import time

import numpy as np

import pyooc
from conftest import random_problem, reference_conv, rel_err

# The batch is sized at run time so that one call takes ~0.6 s on this machine (the host backend's
# speed scales with its cores; a 16-core GPU host ran a first estimate from one sample in 0.14 s).
C, K, HW = 32, 32, 48
TARGET_SECONDS = 0.6
MAX_BATCH = 4096  # 1.2 GB each for x and out


def seconds_for(rng, n):
    x, w, _ = random_problem(rng, (n, C, HW, HW), (K, C, 3, 3))
    start = time.perf_counter()
    pyooc.conv_forward(x, w, padding=1, memory_limit="256KiB", backend="host")
    return time.perf_counter() - start


def long_problem(rng):
    seconds_for(rng, 1)  # warm-up: thread pool, first-touch of the library
    n = 2
    seconds = seconds_for(rng, n)
    while seconds < TARGET_SECONDS / 4 and n < MAX_BATCH:  # time a batch long enough to extrapolate from
        n *= 2
        seconds = seconds_for(rng, n)
    n = int(min(MAX_BATCH, max(2, n * TARGET_SECONDS / max(seconds, 1e-4))))
    x, w, _ = random_problem(rng, (n, C, HW, HW), (K, C, 3, 3))
    return x, w


def test_python_thread_progresses_during_call(rng):
    x, w = long_problem(rng)
    out = np.empty((x.shape[0], K, HW, HW), dtype=np.float32)
    window = {}
    started = threading.Event()

    def worker():
        started.set()
        t0 = time.perf_counter()
        pyooc.conv_forward(x, w, padding=1, out=out, memory_limit="256KiB", backend="host")
        window["t0"], window["t1"] = t0, time.perf_counter()

    samples = []  # (time, counter) taken by this (main) thread, a pure-Python loop
    thread = threading.Thread(target=worker)
    thread.start()
    started.wait()
    counter = 0
    while thread.is_alive():
        counter += 1
        if counter % 200 == 0:
            samples.append((time.perf_counter(), counter))
    thread.join()

    t0, t1 = window["t0"], window["t1"]
    duration = t1 - t0
    assert duration > 0.2, f"call took only {duration:.3f} s: too short to tell"
    inside = [(t, c) for t, c in samples if t0 <= t <= t1]
    assert inside, "the counter never advanced while conv_forward ran: the GIL was held"
    # Progress spread over the whole call: every fifth of it saw the counter move.
    fifths = {min(int((t - t0) / duration * 5), 4) for t, _ in inside}
    assert fifths == set(range(5)), (
        f"counter advanced only in fifths {sorted(fifths)} of a {duration:.2f} s call: "
        "the GIL was held for long stretches")
    increments = inside[-1][1] - inside[0][1]
    assert increments > 1000, f"only {increments} increments during a {duration:.2f} s call"


def test_calls_from_several_threads_are_correct(rng):
    """Calls from threads at once (the library serialises per backend) each get their own result."""
    problems = [random_problem(rng, (2, 3, 12 + i, 11), (4, 3, 3, 3), bias=True) for i in range(4)]
    results, stats = [None] * 4, [None] * 4

    def run(i):
        x, w, b = problems[i]
        results[i] = pyooc.conv_forward(x, w, bias=b, padding=1, memory_limit="8KiB", backend="host")
        stats[i] = pyooc.last_stats()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (x, w, b) in enumerate(problems):
        assert rel_err(results[i], reference_conv(x, w, b, padding=1)) < 1e-5
        assert stats[i]["plan"].x_shape == x.shape
