"""The one options object every binding takes (pyooc._native.CallOptions), as pyooc/_call_args.py
builds it from a call's memory_limit, backend, device and pinned."""

import pytest

import pyooc
from pyooc._call_args import call_options


def test_call_options_carry_the_parsed_arguments():
    o = call_options("2KiB", "host", 0)
    assert (o.memory_limit, o.backend, o.device, o.assume_pinned) == (2048, "host", 0, False)
    o = call_options(None, "auto", 1, pinned=True)
    assert (o.memory_limit, o.backend, o.device, o.assume_pinned) == (0, "auto", 1, True)
    assert isinstance(o, pyooc._native.CallOptions)


def test_bindings_take_only_call_options():
    with pytest.raises(TypeError, match="CallOptions"):
        pyooc._native.plan_batchnorm("batchnorm_forward_inference", (2, 3, 4), None)
    with pytest.raises(TypeError, match="CallOptions"):
        pyooc._native.plan_batchnorm("batchnorm_forward_inference", (2, 3, 4), (0, "host", 0))


def test_memory_limit_reaches_the_plan():
    plan = pyooc.plan_conv_forward((2, 3, 9, 9), (4, 3, 3, 3), memory_limit="64KiB", backend="host")
    assert plan.memory_limit == 64 * 1024 and plan.backend == "host"
