"""torch.library.opcheck for every `pyooc::` op (schema, fake kernel against the real one, autograd
registration, AOT dispatch with dynamic shapes), and the ops under torch.compile as opaque calls."""

import pytest

from torch_helpers import torch

import pyooc.torch as pt  # noqa: E402
from conftest import rel_err  # noqa: E402

H = "host"


def t(*shape, grad=False, positive=False):
    v = torch.randn(*shape)
    v = v.abs() + 0.5 if positive else v
    return v.requires_grad_(grad)


def samples():
    """op name -> list of (args) for opcheck; gradients are asked for where the op has a formula."""
    conv = ([1, 1], [1, 1], [1, 1], 1, 0, H)
    x, w, b = t(2, 3, 6, 5, grad=True), t(4, 3, 3, 3, grad=True), t(4, grad=True)
    dy = t(2, 4, 6, 5)
    return {
        "conv_forward": [(x, w, b, *conv), (x, w, None, [2, 1], [0, 1], [1, 1], 1, 1 << 12, H),
                         (x, w, b, *conv, "reflect"), (x, w, None, [1, 2], [1, 2, 1, 1], [1, 1], 1, 0, H, "circular")],
        "conv_backward_data": [(t(2, 4, 6, 5, grad=True), w, [2, 3, 6, 5], *conv),
                               (t(2, 4, 6, 5, grad=True), w, [2, 3, 6, 5], *conv, "replicate")],
        "conv_backward_filter": [(x.detach(), dy, [4, 3, 3, 3], *conv), (x.detach(), dy, [4, 3, 3, 3], *conv, "reflect")],
        "conv_backward_bias": [(dy, 0, H)],
        "conv_backward_data_filter_bias": [(x.detach(), dy, w.detach(), *conv)],
        "conv_transpose_forward": [(t(2, 3, 4, 5, grad=True), t(3, 2, 3, 3, grad=True), t(2, grad=True), [2, 2],
                                    [1, 1], [1, 0], [1, 1], 1, 0, H)],
        "conv_bias_activation_forward": [(x, w, b, "relu", 0.0, *conv), (x, w, b, "gelu", 0.0, *conv)],
        "activation_conv_backward_data_filter_bias": [(x.detach(), dy, w.detach(), t(2, 4, 6, 5).relu(), None,
                                                       "relu", 0.0, *conv)],
        "conv_bias_activation_pooling_forward": [
            (x, w, b, "relu", 0.0, *conv[:4], [2, 2], [2, 2], [0, 0], "max", 0, H),
            (x, w, None, "tanh", 0.0, *conv[:4], [3, 3], [2, 2], [1, 1], "avg", 0, H)],
        "pooling_activation_conv_backward_data_filter_bias": [
            (x.detach(), t(2, 4, 3, 2), w.detach(), t(2, 4, 3, 2), t(2, 4, 6, 5).relu(), None, [2, 2], [2, 2], [0, 0],
             "avg", "relu", 0.0, *conv)],
        "pool_forward": [(t(2, 3, 6, 6, grad=True), [2, 2], [2, 2], [0, 0], "max", 0, H),
                         (t(2, 3, 7, 6, grad=True), [3, 3], [2, 2], [1, 1], "avg_exclude_pad", 0, H)],
        "pool_backward": [(t(2, 3, 3, 3), t(2, 3, 3, 3), t(2, 3, 6, 6), [2, 2], [2, 2], [0, 0], "avg", 0, H)],
        "activation_forward": [(t(3, 4, 5, grad=True), "elu", 1.5, 0, H), (t(7, grad=True), "relu", 0.0, 0, H)],
        "activation_backward": [(t(3, 4), t(3, 4), t(3, 4), "tanh", 0.0, 0, H)],
        "softmax_forward": [(t(3, 5, 4, grad=True), False, 0, H), (t(3, 5, 1, grad=True), True, 0, H)],
        "softmax_backward": [(t(3, 5, 4).softmax(1), t(3, 5, 4), False, 0, H)],
        "batchnorm_forward_training": [
            (t(4, 3, 5, grad=True), t(3, grad=True), t(3, grad=True), t(3), t(3, positive=True), 0.1, 1e-5, 0, H),
            (t(4, 3, 5, grad=True), t(3, grad=True), t(3, grad=True), None, None, 0.1, 1e-5, 0, H)],
        "batchnorm_backward": [(t(4, 3, 5), t(4, 3, 5), t(3), t(3), t(3, positive=True), 1e-5, 0, H)],
        "batchnorm_forward_inference": [(t(4, 3, 5, grad=True), t(3, grad=True), t(3, grad=True), t(3),
                                         t(3, positive=True), 1e-5, 0, H)],
        "linear_forward": [(t(5, 7, grad=True), t(3, 7, grad=True), t(3, grad=True), 0, H),
                           (t(5, 7, grad=True), t(3, 7, grad=True), None, 0, H)],
        "linear_backward": [(t(5, 7), t(3, 7), t(5, 3), True, 0, H), (t(5, 7), t(3, 7), t(5, 3), False, 0, H)],
        "matmul": [(t(5, 7, grad=True), t(7, 3, grad=True), 0, H)],
        "add_tensor": [(t(1, 3, 1, grad=True), t(2, 3, 4, grad=True), 0.5, 2.0, 0, H)],
    }


SAMPLES = samples()


def test_every_op_has_samples():
    assert set(SAMPLES) == set(pt.OPS), set(SAMPLES) ^ set(pt.OPS)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_opcheck(name):
    op = getattr(torch.ops.pyooc, name).default
    for args in SAMPLES[name]:
        torch.library.opcheck(op, args)


def test_torch_compile_runs_the_ops_opaquely(rng):
    """A small conv net compiled whole (fullgraph: the pyooc ops are leaves, not graph breaks),
    forward and backward, against eager."""
    import torch._dynamo

    torch._dynamo.reset()
    F = pt.functional

    def net(x, w, b, w2):
        y = F.relu(F.conv2d(x, w, b, padding=1, backend="host"), backend="host")
        y = F.max_pool2d(y, 2, backend="host")
        return F.linear(y.flatten(1), w2, backend="host")

    args = [torch.from_numpy(rng.standard_normal(s).astype("float32")).requires_grad_()
            for s in ((2, 3, 8, 8), (4, 3, 3, 3), (4,), (5, 64))]
    eager_out = net(*args)
    eager_grads = torch.autograd.grad(eager_out.sum(), args)
    compiled = torch.compile(net, fullgraph=True)
    out = compiled(*args)
    grads = torch.autograd.grad(out.sum(), args)
    # The outputs, not their sum: a sum of ten logits may cancel, and inductor may add in another
    # order (CI saw 6e-6 relative to such a sum).
    assert rel_err(out.detach().numpy(), eager_out.detach().numpy()) < 1e-6
    for g, ref in zip(grads, eager_grads):
        assert rel_err(g.numpy(), ref.numpy()) < 1e-6
