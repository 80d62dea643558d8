"""Interruptible calls and progress (pyooc/progress.py, docs/interruptible_calls.md): Ctrl-C stops
a long host call within two chunks' time with KeyboardInterrupt, a CancelToken stops it from
another thread with CancelledError, out= is left partially written, nothing leaks and the next call
works; progress hooks see a monotone (done, total) ending at total; the tqdm bar appears when asked
and not otherwise."""

import ctypes
import inspect
import os
import signal
import threading
import time

import numpy as np
import pytest

import pyooc

C, K, HW = 64, 64, 64
TARGET_SECONDS = 3.0  # the long call's length, scaled on this machine


def conv(x, w, **kw):
    return pyooc.conv_forward(x, w, padding=1, memory_limit="32MiB", backend="host", **kw)


def long_problem():
    """x, w for a host convolution of about TARGET_SECONDS with tens of chunks."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((K, C, 3, 3), dtype=np.float32)
    x1 = rng.standard_normal((1, C, HW, HW), dtype=np.float32)
    conv(x1, w)  # warm-up
    start = time.perf_counter()
    conv(x1, w)
    per_sample = time.perf_counter() - start
    n = int(min(64, max(4, TARGET_SECONDS / max(per_sample, 1e-3))))
    return rng.standard_normal((n, C, HW, HW), dtype=np.float32), w


@pytest.fixture(scope="module")
def problem():
    x, w = long_problem()
    y = conv(x, w)  # the uninterrupted run: its result and its chunk time
    stats = pyooc.last_stats()
    assert stats["chunks"] >= 8, stats["plan"]
    return x, w, y, stats["seconds"] / stats["chunks"], stats["seconds"]


@pytest.fixture
def sigint_raises():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def interrupted(x, w, out, after, action):
    """Runs conv into out, doing action() from a timer thread `after` seconds in; returns the
    exception raised and the seconds from action() to the raise."""
    fired = []

    def fire():
        fired.append(time.perf_counter())
        action()

    timer = threading.Timer(after, fire)
    timer.start()
    try:
        conv(x, w, out=out)
    except BaseException as e:  # noqa: B036 - KeyboardInterrupt is the point
        raised = time.perf_counter()
        timer.join()
        return e, raised - fired[0]
    timer.join()
    pytest.fail("the call was not interrupted")


def check_partial(out, y):
    written = ~np.isnan(out)
    assert 0 < written.sum() < out.size, "out= is partially written"
    np.testing.assert_array_equal(out[written], y[written])


def test_sigint_stops_a_long_host_call_within_two_chunks(problem, sigint_raises):
    x, w, y, chunk_seconds, seconds = problem
    out = np.full_like(y, np.nan)
    error, latency = interrupted(x, w, out, 0.4 * seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    assert isinstance(error, KeyboardInterrupt), repr(error)
    assert latency < 2 * chunk_seconds, f"stopped {latency:.3f} s after SIGINT; a chunk takes {chunk_seconds:.3f} s"
    check_partial(out, y)
    again = np.full_like(y, np.nan)
    conv(x, w, out=again)
    np.testing.assert_array_equal(again, y)


def test_cancel_token_from_another_thread(problem):
    x, w, y, chunk_seconds, seconds = problem
    out = np.full_like(y, np.nan)
    token = pyooc.CancelToken()
    fired = []

    def cancel():
        fired.append(time.perf_counter())
        token.cancel()

    timer = threading.Timer(0.4 * seconds, cancel)
    timer.start()
    with pytest.raises(pyooc.CancelledError, match="cancelled"):
        conv(x, w, out=out, cancel=token)
    latency = time.perf_counter() - fired[0]
    timer.join()
    assert latency < 2 * chunk_seconds, f"stopped {latency:.3f} s after cancel(); a chunk takes {chunk_seconds:.3f} s"
    assert token.cancelled
    check_partial(out, y)
    with pytest.raises(pyooc.CancelledError):  # a token stays cancelled
        conv(x[:1], w, cancel=token)
    np.testing.assert_array_equal(conv(x[:2], w), y[:2])


def native_heap_bytes():
    """glibc's bytes in use (small blocks and mmapped ones): the host backend's arena and staging
    come from here, touched or not, which RSS would miss."""
    libc = ctypes.CDLL(None)

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")]

    libc.mallinfo2.restype = Mallinfo2
    m = libc.mallinfo2()
    return m.uordblks + m.hblkhd


def test_cancelled_calls_leak_nothing():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 8, 32, 32), dtype=np.float32)
    w = rng.standard_normal((8, 8, 3, 3), dtype=np.float32)
    out = np.empty((8, 8, 32, 32), dtype=np.float32)

    def cancelled_call():
        token = pyooc.CancelToken()

        def hook(done, total):
            if done >= 2:
                token.cancel()

        with pytest.raises(pyooc.CancelledError):
            pyooc.conv_forward(x, w, padding=1, out=out, memory_limit="64KiB", backend="host", progress=hook,
                               cancel=token)

    for _ in range(3):  # warm-up: the plan cache, the thread pools
        cancelled_call()
    before = native_heap_bytes()
    for _ in range(30):
        cancelled_call()
    grown = native_heap_bytes() - before
    assert grown < 1 << 20, f"30 cancelled calls kept {grown} bytes"


def test_progress_hook_sees_every_pass_monotone_to_the_end():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 3, 32, 32), dtype=np.float32)
    scale, bias = np.ones(3, np.float32), np.zeros(3, np.float32)
    seen = []
    pyooc.batchnorm_forward_training(x, scale, bias, memory_limit="16KiB", backend="host",
                                     progress=lambda done, total: seen.append((done, total)))
    plan = pyooc.last_stats()["plan"]
    total = plan.num_chunks * plan.passes
    assert plan.passes == 2 and total > 4
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert all(t == total for _, t in seen)
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))


def test_a_hook_that_raises_stops_the_call_with_its_exception():
    x = np.ones((4, 4, 64), np.float32)

    def hook(done, total):
        if done:
            raise ZeroDivisionError("from the hook")

    with pytest.raises(ZeroDivisionError, match="from the hook"):
        pyooc.activation_forward(x, "relu", memory_limit="2KiB", backend="host", progress=hook)
    np.testing.assert_array_equal(pyooc.activation_forward(x, "relu", backend="host"), x)


def test_tqdm_bar_when_forced_and_not_otherwise(capsys):
    x = np.ones((4, 4, 256), np.float32)
    run = lambda **kw: pyooc.activation_forward(x, "tanh", memory_limit="4KiB", backend="host", **kw)  # noqa: E731
    run(progress=True)
    err = capsys.readouterr().err
    assert "activation_forward" in err and "chunk" in err, err
    run()  # auto: stderr is not a terminal here, and the call is short
    run(progress=False)
    assert capsys.readouterr().err == ""
    try:
        pyooc.set_progress(True)
        run()
        assert "activation_forward" in capsys.readouterr().err
        run(progress=False)
        assert capsys.readouterr().err == ""
    finally:
        pyooc.set_progress(None)
    assert pyooc.get_progress() is None


def test_every_running_operation_takes_progress_and_cancel():
    running = [name for name in pyooc.__all__ if not name.startswith(("plan_", "get_", "set_", "measure_"))
               and inspect.isfunction(getattr(pyooc, name)) and "memory_limit" in
               inspect.signature(getattr(pyooc, name)).parameters]
    assert len(running) >= 20, running
    for name in running:
        parameters = inspect.signature(getattr(pyooc, name)).parameters
        assert "progress" in parameters and "cancel" in parameters, name


def test_bad_progress_and_cancel_arguments_name_themselves():
    x = np.ones((2, 2, 2), np.float32)
    with pytest.raises(TypeError, match="progress"):
        pyooc.activation_forward(x, "relu", backend="host", progress="yes")
    with pytest.raises(TypeError, match="cancel"):
        pyooc.activation_forward(x, "relu", backend="host", cancel=True)
    with pytest.raises(TypeError, match="progress"):
        pyooc.set_progress(3)


def test_a_call_in_another_thread_is_not_stopped_by_sigint_handling():
    """Signal handlers run on the main thread only: a worker thread's call never takes the GIL for
    them, and its result is complete."""
    x = np.ones((4, 4, 256), np.float32)
    result = []
    t = threading.Thread(target=lambda: result.append(
        pyooc.activation_forward(x, "relu", memory_limit="4KiB", backend="host")))
    t.start()
    t.join()
    np.testing.assert_array_equal(result[0], x)
