"""pyooc.torch with torch.channels_last(_3d) tensors (docs/layouts.md): the convolutions take them
zero-copy (pyooc reads the tensor's own memory) and return results in the input's memory format;
forward and every gradient match torch's own op in float64 (pyooc in float32 on the host backend,
chunked); a weight in another format than the input is converted (it is small); pooling, the
activations, softmax and batch norm take them too and keep the format; the ops that do not serve
channels-last yet refuse it naming the tensor; the custom ops pass torch's opcheck."""

import numpy as np
import pytest

from torch_helpers import compare, rand, torch

import pyooc  # noqa: E402
import pyooc.torch as pt  # noqa: E402

F = torch.nn.functional
P = pt.functional
CL = {4: torch.channels_last, 5: torch.channels_last_3d}

CONV = [  # (spatial, x shape, w shape, geometry, groups)
    (2, (2, 4, 13, 11), (6, 4, 3, 3), dict(padding=1), 1),
    (2, (2, 6, 12, 12), (4, 3, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2)), 2),
    (3, (2, 4, 7, 8, 6), (3, 4, 3, 3, 3), dict(padding=1), 1),
]


def channels_last(t):
    return t.contiguous(memory_format=CL[t.dim()])


def is_channels_last(t):
    return not t.is_contiguous() and t.is_contiguous(memory_format=CL[t.dim()])


@pytest.mark.parametrize("spatial,x_shape,w_shape,geometry,groups", CONV)
def test_conv_forward_and_gradients(rng, spatial, x_shape, w_shape, geometry, groups):
    x = channels_last(rand(rng, x_shape)).requires_grad_()
    w = channels_last(rand(rng, w_shape, 0.3)).requires_grad_()
    b = rand(rng, w_shape[0]).requires_grad_()
    ours, theirs = getattr(P, f"conv{spatial}d"), getattr(F, f"conv{spatial}d")
    y = compare(rng, lambda x, w, b, **kw: ours(x, w, b, groups=groups, **geometry, backend="host", **kw),
                lambda x, w, b: theirs(x, w, b, groups=groups, **geometry), [x, w, b])
    assert is_channels_last(y)


def test_input_goes_in_zero_copy_and_the_result_comes_back_channels_last(rng, monkeypatch):
    x = channels_last(rand(rng, (2, 4, 9, 9)).float())
    w = channels_last(rand(rng, (5, 4, 3, 3), 0.3).float())
    seen = {}
    original = pyooc.conv_forward

    def spy(x_array, *args, **kwargs):
        seen["x"] = x_array
        return original(x_array, *args, **kwargs)

    monkeypatch.setattr(pyooc, "conv_forward", spy)  # _ops looks it up at each call
    y = P.conv2d(x, w, padding=1, backend="host")
    assert np.shares_memory(seen["x"], x.numpy()), "x was copied"
    assert is_channels_last(y)
    ref = F.conv2d(x.double(), w.double(), padding=1)
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5)


def test_a_weight_in_another_format_is_converted(rng):
    x = channels_last(rand(rng, (2, 4, 9, 9)).float())
    w = rand(rng, (5, 4, 3, 3), 0.3).float()  # contiguous
    y = P.conv2d(x, w, padding=1, backend="host")
    assert is_channels_last(y)
    assert torch.allclose(y.double(), F.conv2d(x.double(), w.double(), padding=1), rtol=1e-5, atol=1e-5)
    y = P.conv2d(x.contiguous(), channels_last(w), padding=1, backend="host")  # the input's format wins
    assert y.is_contiguous()


def test_half_precision_channels_last(rng):
    x = channels_last(rand(rng, (2, 4, 9, 9))).to(torch.bfloat16)
    w = channels_last(rand(rng, (5, 4, 3, 3), 0.3)).to(torch.bfloat16)
    y = P.conv2d(x, w, padding=1, backend="host")
    assert y.dtype == torch.bfloat16 and is_channels_last(y)
    ref = F.conv2d(x.double(), w.double(), padding=1)
    assert (y.double() - ref).norm() / ref.norm() < 1.5e-2


LAYERS = {  # name -> (ours, theirs), each a function of the input alone
    "relu": (lambda x, **kw: P.relu(x, backend="host", **kw), F.relu),
    "tanh": (lambda x, **kw: P.tanh(x, backend="host", **kw), torch.tanh),
    "max_pool2d": (lambda x, **kw: P.max_pool2d(x, 3, stride=2, padding=1, backend="host", **kw),
                   lambda x: F.max_pool2d(x, 3, stride=2, padding=1)),
    "avg_pool3d": (lambda x, **kw: P.avg_pool3d(x, 2, backend="host", **kw), lambda x: F.avg_pool3d(x, 2)),
    "softmax_channels": (lambda x, **kw: P.softmax(x, 1, backend="host", **kw), lambda x: F.softmax(x, 1)),
    "log_softmax_last_dim": (lambda x, **kw: P.log_softmax(x, -1, backend="host", **kw),
                             lambda x: F.log_softmax(x, -1)),
    "softmax_height": (lambda x, **kw: P.softmax(x, 2, backend="host", **kw), lambda x: F.softmax(x, 2)),
}


@pytest.mark.parametrize("name", LAYERS)
def test_layers_take_channels_last_and_keep_it(rng, name):
    """pooling, the activations and softmax on channels-last tensors: zero-copy in (softmax over any
    dim runs on the tensor permuted to its memory order, a view), channels-last out, forward and
    gradient as torch's in float64; split by a budget."""
    ours, theirs = LAYERS[name]
    shape = (2, 5, 6, 7, 4) if name == "avg_pool3d" else (2, 5, 9, 8)
    x = channels_last(rand(rng, shape, 2.0)).requires_grad_()
    y = compare(rng, ours, theirs, [x])
    assert is_channels_last(y)


@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_batch_norm_takes_channels_last_and_keeps_it(rng, training):
    x = channels_last(rand(rng, (3, 6, 7, 5), 2.0) + 1).requires_grad_()
    weight, bias = rand(rng, 6).requires_grad_(), rand(rng, 6).requires_grad_()
    mean, var = rand(rng, 6).float(), (rand(rng, 6).abs() + 0.5).float()
    running = (mean.clone(), var.clone())
    y = compare(rng, lambda x, w, b, **kw: P.batch_norm(x, *running, w, b, training=training, backend="host", **kw),
                lambda x, w, b: F.batch_norm(x, mean.double(), var.double(), w, b, training=training),
                [x, weight, bias])
    assert is_channels_last(y)


def test_ops_not_serving_channels_last_refuse_it_naming_the_tensor(rng):
    x = channels_last(rand(rng, (2, 4, 6, 6)).float())
    with pytest.raises(NotImplementedError, match="^input is in memory_format=torch.channels_last"):
        P.conv_transpose2d(x, rand(rng, (4, 3, 3, 3)).float(), backend="host")


def test_opcheck_with_channels_last(rng):
    x = channels_last(rand(rng, (2, 4, 7, 7)).float())
    w = channels_last(rand(rng, (3, 4, 3, 3), 0.3).float())
    torch.library.opcheck(torch.ops.pyooc.conv_forward.default, (x, w, None, [1, 1], [1, 1], [1, 1], 1, 0, "host"),
                          test_utils=("test_schema", "test_faketensor"))
