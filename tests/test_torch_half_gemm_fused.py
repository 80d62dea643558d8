"""pyooc.torch's linear, conv_transpose and fused ops on torch.float16 and torch.bfloat16 tensors:
results and gradients in the input's dtype against torch's own ops in float64 on the same rounded
values (fp16 1e-3, bf16 1e-2 of the norm, or twice torch's own error in that dtype), under budgets
that split the calls. The fused forwards run in half; their gradients go through the unfused ops (the fused backwards are float32 only).
Smooth activations and average pooling: a kink or a max would route a gradient by the sign or
order of a rounded intermediate, which half and float64 may not share."""

import pytest

from torch_helpers import rand, torch

import pyooc.torch as pt  # noqa: E402
from test_torch_half_layers import DTYPES, against_float64  # noqa: E402

F = torch.nn.functional
P = pt.functional
OPS = torch.ops.pyooc  # the custom ops, for the fused forms torch has no functional of


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_linear_and_its_gradient(rng, dtype, tol):
    x, w, b = rand(rng, (37, 301)), rand(rng, (29, 301), 0.1), rand(rng, 29)
    against_float64(rng, lambda x, w, b: P.linear(x, w, b, backend="host", memory_limit="8KiB"),
                    lambda x, w, b: F.linear(x, w, b), [x, w, b], dtype, tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_conv_transpose_and_its_gradient(rng, dtype, tol):
    x, w, b = rand(rng, (2, 6, 9, 7)), rand(rng, (6, 4, 3, 3), 0.2), rand(rng, 4)
    against_float64(rng, lambda x, w, b: P.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1,
                                                            backend="host", memory_limit="16KiB"),
                    lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1), [x, w, b],
                    dtype, tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_fused_forwards_and_their_gradients(rng, dtype, tol):
    x, w, b = rand(rng, (3, 5, 12, 10)), rand(rng, (6, 5, 3, 3), 0.2), rand(rng, 6)
    against_float64(rng, lambda x, w, b: OPS.conv_bias_activation_forward(
        x, w, b, "tanh", 0.0, [1, 1], [1, 1], [1, 1], 1, 16 << 10, "host"),
        lambda x, w, b: torch.tanh(F.conv2d(x, w, b, padding=1)), [x, w, b], dtype, tol)
    against_float64(rng, lambda x, w, b: OPS.conv_bias_activation_pooling_forward(
        x, w, b, "sigmoid", 0.0, [1, 1], [1, 1], [1, 1], 1, [2, 2], [2, 2], [0, 0], "avg", 16 << 10, "host"),
        lambda x, w, b: F.avg_pool2d(torch.sigmoid(F.conv2d(x, w, b, padding=1)), 2), [x, w, b], dtype, tol)
