"""Every argument the bindings convert is range-checked first: a ValueError or TypeError naming it,
never the binding's OverflowError, an IndexError or a refused str subclass (the hardening issue's
reproducers at 07dea28). Runs without a GPU: each is refused before anything reaches the device."""

import numpy as np
import pytest

import pyooc

X = np.ones((2, 3, 8, 8), np.float32)
W = np.ones((4, 3, 3, 3), np.float32)


@pytest.mark.parametrize("call, error, match", [
    (lambda: pyooc.conv_forward(X, W, device=2**31, backend="host"), ValueError, "device must be between"),
    (lambda: pyooc.plan_conv_forward((2, 3, 8, 2**63), (4, 3, 3, 3), backend="host"), ValueError,
     "x_shape must be between"),
    (lambda: pyooc.plan_conv_forward((2, 3, 8, 8), (4, 3, 3, 3), stride=2**63, backend="host"), ValueError,
     "stride must be between"),
    (lambda: pyooc.conv_forward(X, W, memory_limit=2**64, backend="host"), ValueError,
     "memory_limit must be at most"),
    (lambda: pyooc.conv_forward(X, W, memory_limit="1e400", backend="host"), ValueError,
     "memory_limit must be finite"),
    (lambda: pyooc.set_memory_limit(2**64), ValueError, "memory_limit must be at most"),
    (lambda: pyooc.conv_forward(X, np.array(1.0, np.float32), bias=np.ones(4, np.float32), backend="host"),
     ValueError, "w must be 3D, 4D or 5D"),
    (lambda: pyooc.measure_link_bandwidth(nbytes=1.5), TypeError, "nbytes must be an int"),
    (lambda: pyooc.measure_link_bandwidth(device=2**40), ValueError, "device must be between"),
    (lambda: pyooc.pinned_empty((2, 3), dtype=None), TypeError, "dtype must be a numpy dtype"),
    (lambda: pyooc.pinned_empty((2**62, 8)), ValueError, "needs more than"),
], ids=["device", "shape", "stride", "memory_limit", "memory_limit-inf", "set_memory_limit", "0d-w-bias",
        "nbytes-float", "bandwidth-device", "pinned-dtype-None", "pinned-huge"])
def test_out_of_range_arguments_are_refused_by_name(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_str_subclasses_name_modes_like_str():
    # numpy.str_ (what np.array(["relu"])[0] gives) was refused where a str is accepted.
    mode = np.array(["relu", "max"])
    np.testing.assert_array_equal(pyooc.activation_forward(X, mode[0], backend="host"), np.maximum(X, 0))
    assert pyooc.pool_forward(X, 2, mode=mode[1], backend="host").shape == (2, 3, 4, 4)
    with pytest.raises(TypeError, match="mode must be a str, got int"):
        pyooc.activation_forward(X, 3, backend="host")


# Found by the fuzz suite on the H200: window parameters past 2^31 - 1 planned (the host backend
# ran them) but the cuda backend refused them mid-run with a RuntimeError. They are now refused at
# validation on every backend, naming the argument.
@pytest.mark.parametrize("call, name", [
    (lambda: pyooc.plan_conv_forward((3, 3, 7, 4), (5, 3, 2, 1), stride=2**60, padding=1), "stride"),
    (lambda: pyooc.plan_conv_backward_filter((3, 4, 3), (3, 5, 5), (5, 4, 1), padding=1, dilation=2**40), "dilation"),
    (lambda: pyooc.plan_conv_bias_activation_forward((4, 1, 8), (4, 1, 1), stride=2**31, dilation=2), "stride"),
    (lambda: pyooc.plan_pool_forward((1, 5, 3, 3, 3), 3, stride=2**56), "stride"),
])
def test_window_parameters_past_int_are_refused_naming_them(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_window_parameters_at_the_int_limit_plan():
    plan = pyooc.plan_conv_forward((1, 1, 8), (1, 1, 3), stride=2**31 - 1, padding=1, backend="host")
    assert plan.num_chunks >= 1
