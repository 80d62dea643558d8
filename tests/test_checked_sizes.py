"""Shapes too large to index are refused at validation, naming the argument, at once: each of these
crashed the process (SIGFPE), hung the planner or planned sizes that wrapped around int64 at
07dea28 (the hardening issue's reproducers)."""

import numpy as np
import pytest

import pyooc

HUGE = 2**63 - 1
TOO_LARGE = "is too large: pyooc indexes tensors of up to 2\\^60 bytes"


@pytest.mark.parametrize("call, names", [
    (lambda: pyooc.plan_batchnorm_forward_training((2, 3, 4, HUGE)), "x of size"),
    (lambda: pyooc.plan_conv_forward((2, 3, 6, 7), (4, 3, 3, 2), padding=2**31, backend="host"), "the output"),
    (lambda: pyooc.plan_conv_forward((2, 3, 6, HUGE), (4, 3, 3, 2), backend="host"), "x of size"),
    (lambda: pyooc.plan_conv_backward_bias((2, 4, 2**62), memory_limit="64 KiB", backend="host"), "dy of size"),
    (lambda: pyooc.plan_softmax_forward((2**32, 2**32, 4), backend="host"), "the tensor of size"),
    (lambda: pyooc.plan_matmul((5, 4), (4, 2**62), backend="host"), "mat2 of size"),
    (lambda: pyooc.plan_matmul((2**31, 4), (4, 2**31), backend="host"), "the product of mat1 and mat2"),
], ids=["batchnorm", "conv-padding", "conv-x", "bias", "softmax", "matmul-b", "matmul-c"])
# (A dilation of 2^62 is refused earlier now, as past the kernels' int: test_argument_ranges.py.)
def test_too_large_is_refused_naming_the_argument(call, names):
    with pytest.raises(ValueError, match=f"{names}.* {TOO_LARGE}"):
        call()


def test_pool_padding_check_does_not_overflow():
    # 2 * padding wrapped around: the check passed and max pooling returned -inf.
    x = np.ones((1, 1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="pad should be at most half of effective kernel size"):
        pyooc.pool_forward(x, 2, padding=HUGE, backend="host")
