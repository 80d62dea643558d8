"""pyooc.torch.functional against torch.nn.functional: every functional form's output and input
gradients (pyooc in float32 on the host backend, chunked by a tight budget) against torch's own op in
float64, on fresh random inputs; and the arguments pyooc refuses, by name."""

import numpy as np
import pytest

from torch_helpers import compare, rand, torch

import pyooc.torch as pt  # noqa: E402

F = torch.nn.functional
P = pt.functional
OPS = torch.ops.pyooc  # the custom ops, for the fused forms torch has no functional of


def leaf(t):
    return t.requires_grad_()


CONV = [  # (spatial, x shape, w shape, geometry)
    (1, (3, 4, 29), (5, 4, 3), dict(stride=2, padding=1)),
    (2, (2, 3, 13, 11), (4, 3, 3, 3), dict(padding=1)),
    (2, (2, 3, 12, 12), (5, 3, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
    (3, (2, 2, 7, 8, 6), (3, 2, 3, 3, 3), dict(padding=1)),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("spatial,x_shape,w_shape,geometry", CONV)
def test_conv(rng, spatial, x_shape, w_shape, geometry, bias):
    x, w = leaf(rand(rng, x_shape)), leaf(rand(rng, w_shape, 0.3))
    b = leaf(rand(rng, w_shape[0])) if bias else None
    ours, theirs = getattr(P, f"conv{spatial}d"), getattr(F, f"conv{spatial}d")
    compare(rng, lambda x, w, b, **kw: ours(x, w, b, **geometry, backend="host", **kw),
            lambda x, w, b: theirs(x, w, b, **geometry), [x, w, b])


@pytest.mark.parametrize("wants", ["input", "weight", "bias"])
def test_conv_one_gradient(rng, wants):
    """Only one gradient wanted: the unfused backward ops run (the fused one needs dx and dw)."""
    x, w, b = rand(rng, (2, 3, 10, 9)), rand(rng, (4, 3, 3, 3), 0.3), rand(rng, 4)
    dict(input=x, weight=w, bias=b)[wants].requires_grad_()
    compare(rng, lambda x, w, b, **kw: P.conv2d(x, w, b, 1, 1, backend="host", **kw),
            lambda x, w, b: F.conv2d(x, w, b, 1, 1), [x, w, b])


GROUPED = [  # (spatial, x shape, w shape, groups, geometry): grouped, depthwise, depthwise with a multiplier
    (1, (3, 4, 21), (6, 2, 3), 2, dict(padding=1)),
    (2, (2, 6, 11, 10), (6, 1, 3, 3), 6, dict(padding=1, stride=2)),
    (3, (1, 4, 6, 5, 7), (8, 1, 3, 3, 3), 4, dict(padding=1)),
]


@pytest.mark.parametrize("spatial,x_shape,w_shape,groups,geometry", GROUPED)
def test_grouped_conv_and_its_gradients(rng, spatial, x_shape, w_shape, groups, geometry):
    """groups > 1: the forward, and dx, dw, db through the separate gradient ops (the fused
    backward has no group dimension)."""
    x, w, b = leaf(rand(rng, x_shape)), leaf(rand(rng, w_shape, 0.3)), leaf(rand(rng, w_shape[0]))
    ours, theirs = getattr(P, f"conv{spatial}d"), getattr(F, f"conv{spatial}d")
    compare(rng, lambda x, w, b, **kw: ours(x, w, b, groups=groups, **geometry, backend="host", **kw),
            lambda x, w, b: theirs(x, w, b, groups=groups, **geometry), [x, w, b])


def test_grouped_conv_transpose(rng):
    x, w, b = leaf(rand(rng, (2, 6, 5, 6))), leaf(rand(rng, (6, 2, 3, 3), 0.3)), leaf(rand(rng, 6))
    compare(rng, lambda x, w, b, **kw: P.conv_transpose2d(x, w, b, stride=2, padding=1, groups=3, backend="host", **kw),
            lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, groups=3), [x, w, b])


def test_grouped_conv_bias_activation(rng):
    """The fused forward with groups, and its gradient through the activation's and the
    convolution's own backward ops."""
    x, w, b = leaf(rand(rng, (2, 4, 9, 10))), leaf(rand(rng, (4, 2, 3, 3), 0.3)), leaf(rand(rng, 4))
    compare(rng, lambda x, w, b, memory_limit: OPS.conv_bias_activation_forward(
        x, w, b, "gelu", 0.0, [1, 1], [1, 1], [1, 1], 2, memory_limit, "host"),
        lambda x, w, b: F.gelu(F.conv2d(x, w, b, padding=1, groups=2)), [x, w, b])


@pytest.mark.parametrize("w_shape,dilation", [((4, 3, 3, 5), 1), ((4, 3, 2, 4), 1), ((4, 3, 2, 3), (3, 2))])
def test_conv_padding_strings(rng, w_shape, dilation):
    """"same" with odd and even (dilated) kernels: an even one pads one more after, as torch."""
    x, w = leaf(rand(rng, (2, 3, 9, 10))), leaf(rand(rng, w_shape, 0.3))
    for padding in ("same", "valid"):
        compare(rng, lambda x, w, **kw: P.conv2d(x, w, padding=padding, dilation=dilation, backend="host", **kw),
                lambda x, w: F.conv2d(x, w, padding=padding, dilation=dilation), [x, w])


def test_conv3d_same_even_kernel_module(rng):
    conv = torch.nn.Conv3d(2, 3, (2, 3, 4), padding="same")
    ours = pt.Conv3d(2, 3, (2, 3, 4), padding="same", backend="host")
    ours.load_state_dict(conv.state_dict())
    x = rand(rng, (1, 2, 5, 6, 7)).float()
    want, got = conv(x), ours(x)
    assert got.shape == want.shape == (1, 3, 5, 6, 7)
    assert np.abs(got.detach().numpy() - want.detach().numpy()).max() < 1e-4


CONV_T = [  # (spatial, x shape, w shape [C_in, C_out, k...], geometry)
    (1, (3, 4, 23), (4, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    (2, (2, 3, 6, 7), (3, 5, 3, 3), dict(stride=2, padding=1, output_padding=(1, 0))),
    (2, (2, 3, 6, 5), (3, 2, 2, 2), dict(stride=2)),
    (3, (1, 2, 4, 5, 3), (2, 3, 3, 3, 3), dict(stride=(2, 1, 2), padding=1, dilation=(1, 2, 1))),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("spatial,x_shape,w_shape,geometry", CONV_T)
def test_conv_transpose(rng, spatial, x_shape, w_shape, geometry, bias):
    x, w = leaf(rand(rng, x_shape)), leaf(rand(rng, w_shape, 0.3))
    b = leaf(rand(rng, w_shape[1])) if bias else None
    ours, theirs = getattr(P, f"conv_transpose{spatial}d"), getattr(F, f"conv_transpose{spatial}d")
    compare(rng, lambda x, w, b, **kw: ours(x, w, b, **geometry, backend="host", **kw),
            lambda x, w, b: theirs(x, w, b, **geometry), [x, w, b])


@pytest.mark.parametrize("shape", [(16, 5), (4, 3, 17), (3, 4, 6, 7), (2, 3, 4, 5, 6)])
def test_batch_norm_training(rng, shape):
    c = shape[1]
    x, weight, bias = leaf(rand(rng, shape, 2.0) + 0.5), leaf(rand(rng, c)), leaf(rand(rng, c))
    mean0, var0 = rand(rng, c), rand(rng, c).abs() + 0.5
    ours_stats = [mean0.float().clone(), var0.float().clone()]
    theirs_stats = [mean0.clone(), var0.clone()]

    def ours(x, w, b, **kw):  # from the initial statistics on every try (compare retries on MemoryError)
        ours_stats[0].copy_(mean0), ours_stats[1].copy_(var0)
        return P.batch_norm(x, *ours_stats, w, b, True, 0.2, 1e-3, backend="host", **kw)

    compare(rng, ours,
            lambda x, w, b: F.batch_norm(x, *[s.clone() for s in theirs_stats], w, b, True, 0.2, 1e-3),
            [x, weight, bias])
    F.batch_norm(x.detach(), *theirs_stats, None, None, True, 0.2, 1e-3)  # the running update, once
    for ours, theirs in zip(ours_stats, theirs_stats):
        assert torch.allclose(ours.double(), theirs, rtol=1e-5, atol=1e-6), (ours, theirs)


def test_batch_norm_training_without_affine_or_running_stats(rng):
    x = leaf(rand(rng, (3, 4, 5, 6)))
    compare(rng, lambda x, **kw: P.batch_norm(x, None, None, training=True, backend="host", **kw),
            lambda x: F.batch_norm(x, None, None, training=True), [x])


@pytest.mark.parametrize("shape", [(64, 4), (3, 4, 6, 7), (2, 3, 4, 5, 3)])
def test_batch_norm_inference(rng, shape):
    c = shape[1]
    x, weight, bias = leaf(rand(rng, shape)), leaf(rand(rng, c)), leaf(rand(rng, c))
    mean, var = rand(rng, c), rand(rng, c).abs() + 0.5
    compare(rng, lambda x, w, b, **kw: P.batch_norm(x, mean.float(), var.float(), w, b, False, eps=1e-3,
                                                    backend="host", **kw),
            lambda x, w, b: F.batch_norm(x, mean, var, w, b, False, eps=1e-3), [x, weight, bias])


POOLS = [  # (function name, x shape, arguments)
    ("max_pool1d", (3, 4, 21), dict(kernel_size=3, stride=2, padding=1)),
    ("max_pool2d", (2, 3, 12, 11), dict(kernel_size=2)),
    ("max_pool2d", (2, 3, 12, 11), dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 1))),
    ("max_pool3d", (2, 2, 6, 8, 7), dict(kernel_size=2, stride=2)),
    ("avg_pool1d", (3, 4, 21), dict(kernel_size=4, stride=3, padding=2, count_include_pad=False)),
    ("avg_pool2d", (2, 3, 12, 11), dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool2d", (2, 3, 12, 11), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ("avg_pool3d", (2, 2, 6, 8, 7), dict(kernel_size=(2, 3, 2), stride=(2, 1, 2), padding=(1, 1, 0))),
]


@pytest.mark.parametrize("name,shape,args", POOLS)
def test_pooling(rng, name, shape, args):
    x = leaf(rand(rng, shape))
    compare(rng, lambda x, **kw: getattr(P, name)(x, **args, backend="host", **kw),
            lambda x: getattr(F, name)(x, **args), [x])


ACTIVATIONS = [  # (name, arguments)
    ("relu", {}), ("relu6", {}), ("sigmoid", {}), ("tanh", {}), ("elu", dict(alpha=1.3)), ("gelu", {}),
    ("leaky_relu", dict(negative_slope=0.2)), ("silu", {}),
]


@pytest.mark.parametrize("name,args", ACTIVATIONS)
def test_activation(rng, name, args):
    x = leaf(rand(rng, (3, 5, 7, 9), 3.0))
    compare(rng, lambda x, **kw: getattr(P, name)(x, **args, backend="host", **kw),
            lambda x: getattr(F, name)(x, **args), [x])


@pytest.mark.parametrize("x_shape", [(37, 19), (3, 11, 19), (19,)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(rng, x_shape, bias):
    x, w = leaf(rand(rng, x_shape)), leaf(rand(rng, (13, 19), 0.3))
    b = leaf(rand(rng, 13)) if bias else None
    # A single row (1-D input) is one GEMM row: no budget splits it, so it runs unbudgeted.
    compare(rng, lambda x, w, b, **kw: P.linear(x, w, b, backend="host", **kw), F.linear, [x, w, b],
            budget=len(x_shape) > 1)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape,dim", [((7, 10), 1), ((7, 10), -1), ((3, 6, 5, 4), 1), ((4, 5, 6), -1),
                                       ((4, 5, 6), 0)])
def test_softmax(rng, shape, dim, log):
    x = leaf(rand(rng, shape, 2.0))
    name = "log_softmax" if log else "softmax"
    compare(rng, lambda x, **kw: getattr(P, name)(x, dim, backend="host", **kw),
            lambda x: getattr(F, name)(x, dim), [x])


# ------------------------------------------------------------------------------------------------
# the ops with no functional form of torch's: fused conv + bias + activation, matmul, add_tensor



@pytest.mark.parametrize("activation,coef", [("relu", 0.0), ("identity", 0.0), ("gelu", 0.0), ("elu", 0.7)])
def test_conv_bias_activation(rng, activation, coef):
    """The fused forward and its fused gradient (gelu and elu recompute the activation's input)."""
    x, w, b = leaf(rand(rng, (2, 3, 9, 10))), leaf(rand(rng, (4, 3, 3, 3), 0.3)), leaf(rand(rng, 4))
    act = {"relu": F.relu, "identity": lambda v: v, "gelu": F.gelu, "elu": lambda v: F.elu(v, coef)}[activation]
    compare(rng, lambda x, w, b, memory_limit: OPS.conv_bias_activation_forward(
        x, w, b, activation, coef, [1, 1], [1, 1], [1, 1], 1, memory_limit, "host"),
        lambda x, w, b: act(F.conv2d(x, w, b, padding=1)), [x, w, b])


@pytest.mark.parametrize("activation,pool_mode", [("relu", "max"), ("gelu", "avg"), ("identity", "max")])
def test_conv_bias_activation_pooling(rng, activation, pool_mode):
    """The pooled fused forward, and its gradient (y recomputed, then the fused pooled backward)."""
    x, w, b = leaf(rand(rng, (2, 3, 12, 10))), leaf(rand(rng, (4, 3, 3, 3), 0.3)), leaf(rand(rng, 4))
    act = {"relu": F.relu, "identity": lambda v: v, "gelu": F.gelu}[activation]
    pool = F.max_pool2d if pool_mode == "max" else F.avg_pool2d
    compare(rng, lambda x, w, b, memory_limit: OPS.conv_bias_activation_pooling_forward(
        x, w, b, activation, 0.0, [1, 1], [1, 1], [1, 1], 1, [2, 2], [2, 2], [0, 0], pool_mode, memory_limit, "host"),
        lambda x, w, b: pool(act(F.conv2d(x, w, b, padding=1)), 2), [x, w, b])


def test_matmul(rng):
    a, b = leaf(rand(rng, (23, 17))), leaf(rand(rng, (17, 29)))
    compare(rng, lambda a, b, memory_limit: OPS.matmul(a, b, memory_limit, "host"), torch.matmul, [a, b])


def test_add_tensor(rng):
    a, c = leaf(rand(rng, (1, 4, 1, 1))), leaf(rand(rng, (3, 4, 5, 6)))
    compare(rng, lambda a, c, memory_limit: OPS.add_tensor(a, c, 0.5, 2.0, memory_limit or 0, "host"),
            lambda a, c: 0.5 * a + 2.0 * c, [a, c], budget=False)


def test_conv_double_backward_through_backward_data(rng):
    """conv_backward_data's own gradient (a gradient of a gradient) through pyooc's ops."""
    dy, w = leaf(rand(rng, (2, 4, 8, 8))), leaf(rand(rng, (4, 3, 3, 3), 0.3))
    compare(rng, lambda dy, w, memory_limit: OPS.conv_backward_data(dy, w, [2, 3, 8, 8], [1, 1], [1, 1], [1, 1], 1,
                                                                    memory_limit, "host"),
            lambda dy, w: torch.nn.grad.conv2d_input((2, 3, 8, 8), w, dy, padding=1), [dy, w])


# ------------------------------------------------------------------------------------------------
# what pyooc refuses, by name


def test_unsupported_dtype_names_the_argument():
    x, w = torch.randn(1, 2, 5, 5, dtype=torch.float64), torch.randn(3, 2, 3, 3)
    with pytest.raises(NotImplementedError, match="input.*float32.*float64"):
        P.conv2d(x, w, backend="host")
    with pytest.raises(TypeError, match=r"weight \(torch.float16\) must have the dtype of input \(torch.float32\)"):
        P.conv2d(x.float(), w.half(), backend="host")
    with pytest.raises(NotImplementedError, match=r"input: pyooc supports dtype torch.float32, torch.float16, "
                                                  r"torch.bfloat16 only here, got torch.float64"):
        P.linear(torch.randn(2, 5).double(), torch.randn(3, 5).double(), backend="host")
    with pytest.raises(TypeError, match=r"weight \(torch.float32\) must have the dtype of input \(torch.float16\)"):
        P.linear(torch.randn(2, 5).half(), torch.randn(3, 5), backend="host")


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 1e-3), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("name", ["relu", "sigmoid", "gelu"])
def test_half_precision_activations_and_their_gradients(rng, dtype, tol, name):
    x64 = rand(rng, (3, 4, 9, 10))
    x = x64.to(dtype).requires_grad_()
    y = getattr(P, name)(x, backend="host", memory_limit="4KiB")
    ref_x = x.detach().double().requires_grad_()
    ref = getattr(F, name)(ref_x)
    g = torch.from_numpy(rng.standard_normal(ref.shape))
    y.backward(g.to(dtype))
    ref.backward(g)
    assert y.dtype == x.grad.dtype == dtype
    for got, want in ((y, ref), (x.grad, ref_x.grad)):
        assert float((got.double() - want).norm() / want.norm()) < tol


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 1e-3), (torch.bfloat16, 1e-2)])
def test_half_precision_conv_and_its_gradients(rng, dtype, tol):
    """float16 and bfloat16 tensors in, results and gradients in their dtype (computed in float32),
    against torch's float64 op on the same rounded values."""
    x64, w64, b64 = rand(rng, (2, 4, 11, 10)), rand(rng, (6, 4, 3, 3), 0.3), rand(rng, 6)
    x, w, b = (t.to(dtype).requires_grad_() for t in (x64, w64, b64))
    y = P.conv2d(x, w, b, padding=1, backend="host", memory_limit="16KiB")
    assert y.dtype == dtype
    ref_inputs = [t.detach().double().requires_grad_() for t in (x, w, b)]
    ref = F.conv2d(*ref_inputs, padding=1)
    g = torch.from_numpy(rng.standard_normal(ref.shape))
    y.backward(g.to(dtype))
    ref.backward(g)
    for got, want in [(y, ref)] + [(a.grad, r.grad) for a, r in zip((x, w, b), ref_inputs)]:
        assert got.dtype == dtype
        err = float((got.double() - want).norm() / want.norm())
        assert err < tol, err


@pytest.mark.parametrize("call,name", [
    (lambda x, w: P.max_pool2d(x, 2, ceil_mode=True), "ceil_mode"),
    (lambda x, w: P.max_pool2d(x, 2, dilation=2), "dilation"),
    (lambda x, w: P.max_pool2d(x, 2, return_indices=True), "return_indices"),
    (lambda x, w: P.avg_pool2d(x, 2, divisor_override=3), "divisor_override"),
    (lambda x, w: P.gelu(x, approximate="tanh"), "approximate"),
    (lambda x, w: P.batch_norm(x, None, None, training=True, momentum=None), "momentum"),
    (lambda x, w: P.softmax(x, 1, dtype=torch.float64), "dtype"),
])
def test_unsupported_arguments_raise(call, name):
    x, w = torch.randn(2, 4, 6, 6), torch.randn(4, 2, 3, 3)
    with pytest.raises(NotImplementedError, match=name):
        call(x, w)


def test_non_contiguous_input_is_refused():
    x = torch.randn(2, 3, 8, 8).transpose(2, 3)
    with pytest.raises(ValueError, match="input must be contiguous"):
        P.relu(x, backend="host")


def test_bad_geometry_is_pyoocs_value_error():
    with pytest.raises(ValueError, match="padding"):
        P.conv2d(torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3), padding=-1, backend="host")


def test_inputs_go_in_zero_copy_and_results_share_memory():
    """A CPU tensor is read in place and a result array comes back as a tensor over its memory."""
    x = torch.randn(2, 3, 4, 4)
    assert pt._tensors.as_array(x, "x").ctypes.data == x.data_ptr()
    result = np.empty((2, 3), np.float32)
    assert pt._tensors.as_tensor(result).data_ptr() == result.ctypes.data
    y = P.relu(x, backend="host")
    assert y.data_ptr() != x.data_ptr() and torch.equal(y, x.clamp(min=0))
