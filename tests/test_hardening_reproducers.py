"""Every reproducer of the hardening issue (13, "Why") as a named regression test. Each runs in a
child process with a time limit and a memory limit, since each once killed Python (SIGFPE), hung
the planner, blew memory past 4 GiB or returned a wrong result: the test fails, rather than the
suite, if one comes back. The child prints the outcome's kind and message; the test judges them."""

import json
import resource
import subprocess
import sys
import textwrap
import time

import pytest

LIMIT_BYTES = 4 << 30
LIMIT_SECONDS = 30


def outcome(code):
    """(kind, message, seconds) of running `code` (its last expression's value is the result) in a
    child process; kind is "result", an exception's name, "crash <rc>" or "hang"."""
    program = textwrap.dedent("""
        import json, sys, time
        import numpy as np
        import pyooc
        t = time.monotonic()
        try:
            r = eval(compile(sys.argv[1], "<case>", "eval"))
            out = ("result", repr(r)[:2000])
        except BaseException as e:
            out = (type(e).__name__, str(e))
        print(json.dumps(out + (time.monotonic() - t,)))
    """)

    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))

    try:
        p = subprocess.run([sys.executable, "-c", program, code], capture_output=True, text=True,
                           timeout=LIMIT_SECONDS, preexec_fn=limits, cwd="/")
    except subprocess.TimeoutExpired:
        return "hang", "", LIMIT_SECONDS
    if p.returncode != 0 or not p.stdout.strip():
        return f"crash {p.returncode}", p.stderr[-2000:], 0.0
    kind, message, seconds = json.loads(p.stdout.strip().splitlines()[-1])
    return kind, message, seconds


def expect(code, kind, *fragments, seconds=2.0):
    got_kind, message, took = outcome(code)
    assert got_kind == kind, f"{code}: {got_kind}: {message}"
    for f in fragments:
        assert f in message, f"{code}: {message!r} lacks {f!r}"
    assert took < seconds, f"{code} took {took:.2f} s"
    return message


MAX = "2**63-1"

# SIGFPE in the planners of activation, batch norm, linear/matmul, add, conv, pooling backward and
# deconv for a dimension of 2^63 - 1.
SIGFPE = {
    "batchnorm": f"pyooc.plan_batchnorm_forward_training((2, 3, 4, {MAX}))",
    "activation": f"pyooc.plan_activation_forward((2, 3, 4, {MAX}))",
    "linear": f"pyooc.plan_linear_forward((2, {MAX}), (3, {MAX}))",
    "matmul": f"pyooc.plan_matmul((2, {MAX}), ({MAX}, 3))",
    "add": f"pyooc.plan_add_tensor((1, 3, 1, 1), (2, 3, 4, {MAX}))",
    "conv": f"pyooc.plan_conv_forward((2, 3, 4, {MAX}), (4, 3, 1, 1))",
    "pool_backward": f"pyooc.plan_pool_backward((2, 3, 4, {MAX}), 2)",
    "deconv": f"pyooc.plan_deconv_bias_activation_forward((2, 3, 4, {MAX}), (3, 4, 1, 1))",
}


@pytest.mark.parametrize("name", sorted(SIGFPE))
def test_issue13_dimension_2_63_minus_1_is_refused_not_a_crash(name):
    expect(SIGFPE[name], "ValueError", "is too large", "2^60 bytes")


def test_issue13_conv_padding_2_31_plans_fast():
    expect("pyooc.plan_conv_forward((2, 3, 6, 7), (4, 3, 3, 2), padding=2**31)", "ValueError", "output",
           "is too large")


def test_issue13_backward_bias_2_62_plans_fast():
    expect("pyooc.plan_conv_backward_bias((2, 4, 2**62), memory_limit='64 KiB')", "ValueError", "dy", "is too large")


# Extents of 2^31 to 2^40 that fit the 2^60-byte limit: planned (or refused) in seconds, never by
# walking every tile of the extent.
LONG_EXTENTS = {
    "conv_forward": "pyooc.plan_conv_forward((2, 3, 2**40), (4, 3, 3), memory_limit='1 GiB')",
    "conv_forward_padding": "pyooc.plan_conv_forward((2, 3, 7), (4, 3, 3), padding=2**40, memory_limit='1 GiB')",
    # the largest dilation the kernels take (2^38, the issue's, is refused at once: past an int)
    "conv_forward_dilation": "pyooc.plan_conv_forward((2, 3, 2**40), (4, 3, 3), dilation=2**31 - 1, "
                             "memory_limit='1 GiB')",
    "backward_bias": "pyooc.plan_conv_backward_bias((2, 4, 2**40), memory_limit='1 GiB')",
    "backward_data": "pyooc.plan_conv_backward_data((2, 4, 2**40 - 2), (4, 3, 3), (2, 3, 2**40), memory_limit='1 GiB')",
    "backward_filter": "pyooc.plan_conv_backward_filter((2, 3, 2**40), (2, 4, 2**40 - 2), (4, 3, 3), "
                       "memory_limit='1 GiB')",
    "fused_forward": "pyooc.plan_conv_bias_activation_forward((2, 3, 2**40), (4, 3, 3), memory_limit='1 GiB')",
    "fused_pooling": "pyooc.plan_conv_bias_activation_pooling_forward((2, 3, 2**40), (4, 3, 3), pool_kernel=2, "
                     "memory_limit='1 GiB')",
    "deconv": "pyooc.plan_deconv_bias_activation_forward((2, 3, 2**40), (3, 4, 3), memory_limit='1 GiB')",
    "fused_backward": "pyooc.plan_conv_backward_data_filter_bias((2, 3, 2**40), (2, 4, 2**40 - 2), (4, 3, 3), "
                      "memory_limit='1 GiB')",
    "pool_long": "pyooc.plan_pool_forward((1, 1, 2**40), 2, memory_limit='1 GiB')",
    "softmax": "pyooc.plan_softmax_forward((2**20, 2**20, 4), memory_limit=1 << 30)",
}


@pytest.mark.parametrize("name", sorted(LONG_EXTENTS))
def test_issue13_long_extents_plan_in_seconds(name):
    kind, message, took = outcome(f"{LONG_EXTENTS[name]}.num_chunks")
    assert kind in ("result", "MemoryError"), f"{kind}: {message}"
    if kind == "result":
        assert 1 <= int(message) <= 2**18
    assert took < 10, f"{took:.1f} s"


def test_issue13_pool_forward_2_40_channels_no_memory_blowup():
    expect("pyooc.plan_pool_forward((2, 2**40, 6, 6), 2, memory_limit=1 << 16)", "MemoryError", "memory_limit")


@pytest.mark.parametrize("mode", ["max", "avg", "avg_exclude_pad"])
def test_issue13_pool_padding_2_63_minus_1_is_refused_not_a_wrong_result(mode):
    expect(f"pyooc.pool_forward(np.ones((1, 1, 4, 4), np.float32), 2, padding={MAX}, mode={mode!r}, backend='host')",
           "ValueError", "padding", "at most half")


def test_issue13_softmax_sizes_do_not_wrap():
    expect("pyooc.plan_softmax_forward((2**32, 2**32, 4))", "ValueError", "is too large")


def test_issue13_matmul_sizes_do_not_wrap():
    expect("pyooc.plan_matmul((5, 4), (4, 2**62))", "ValueError", "mat2", "is too large")


@pytest.mark.parametrize("code,kind,fragment", [
    ("pyooc.activation_forward(np.ones((1, 1, 2), np.float32), 'relu', device=2**31, backend='host')", "ValueError",
     "device"),
    ("pyooc.plan_activation_forward((2**63, 1, 1))", "ValueError", "shape"),
    ("pyooc.plan_conv_forward((2, 3, 2**64), (4, 3, 3))", "ValueError", "x_shape"),
    ("pyooc.plan_activation_forward((2, 1, 1), memory_limit=2**64)", "ValueError", "memory_limit"),
    ("pyooc.plan_activation_forward((2, 1, 1), memory_limit='1e400')", "ValueError", "memory_limit"),
    ("pyooc.linear_forward(np.ones((2, 3), np.float32), np.array(1, np.float32), np.ones(3, np.float32), "
     "backend='host')", "ValueError", "weight"),
    ("pyooc.plan_activation_forward((2, 3, -4, 2**62))", "ValueError", "every dimension must be positive"),
])
def test_issue13_conversions_raise_value_errors_not_overflow_or_index_errors(code, kind, fragment):
    expect(code, kind, fragment)


def test_issue13_measure_link_bandwidth_refuses_a_float_nbytes():
    expect("pyooc.measure_link_bandwidth(nbytes=1.5)", "TypeError", "nbytes")


def test_issue13_pinned_empty_refuses_dtype_none():
    expect("pyooc.pinned_empty((2,), dtype=None)", "TypeError", "dtype")


def test_issue13_numpy_str_mode_names_work_like_str():
    code = ("[np.array_equal(pyooc.activation_forward(x, np.str_('tanh'), backend='host'), "
            "pyooc.activation_forward(x, 'tanh', backend='host')) for x in "
            "[np.linspace(-2, 2, 24, dtype=np.float32).reshape(2, 3, 4)]]")
    assert expect(code, "result") == "[True]"
    code = ("np.array_equal(pyooc.softmax_forward(np.ones((2, 3, 4), np.float32), mode=np.str_('instance'), "
            "backend='host'), pyooc.softmax_forward(np.ones((2, 3, 4), np.float32), mode='instance', backend='host'))")
    assert expect(code, "result") == "True"


def test_issue13_too_many_chunks_is_a_clear_error():
    message = expect("pyooc.plan_matmul((2**30, 4), (4, 2**20), memory_limit=2**20)", "MemoryError", "memory_limit")
    assert "the plan would need" in message and "chunks, more than the limit of 262144; raise memory_limit" in message


def test_issue13_planning_a_2_40_extent_takes_little_memory():
    # The chunk list is capped: the largest plan of a long extent stays far below the child's 4 GiB.
    kind, message, _ = outcome("[pyooc.plan_conv_forward((2, 3, 7), (4, 3, 3), padding=2**40, "
                               "memory_limit='1 GiB').num_chunks, __import__('resource').getrusage("
                               "__import__('resource').RUSAGE_SELF).ru_maxrss]")
    assert kind == "result", message
    chunks, rss_kib = json.loads(message)
    assert chunks <= 2**18 and rss_kib < 1 << 20, message
