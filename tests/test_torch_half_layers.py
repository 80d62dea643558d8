"""pyooc.torch's pooling, softmax, add_tensor and batch_norm on torch.float16 and torch.bfloat16
tensors: results and gradients in the input's dtype (batch norm's weight, bias and running
statistics float32, as cuDNN takes them) against torch's own ops in float64 on the same rounded
values (fp16 1e-3, bf16 1e-2 of the norm, or twice torch's own error in that dtype where a
reduction's cancellation makes it larger), under budgets that split the calls; a softmax dtype=
other than the input's, and mixed dtypes, are refused naming the argument."""

import pytest

from torch_helpers import rand, torch

import pyooc.torch as pt  # noqa: E402

F = torch.nn.functional
P = pt.functional
DTYPES = [(torch.float16, 1e-3), (torch.bfloat16, 1e-2)]


def against_float64(rng, ours, theirs, inputs, dtype, tol):
    """ours(*inputs in dtype) and its gradients against theirs(*the same values in float64).

    The bar for each result is tol of the norm, or twice the error of torch's own ops run in the
    same dtype, whichever is larger: a reduction with cancellation (a bias gradient summing
    dy * f'(z) over every pixel) magnifies the rounding of its half-precision terms beyond any
    fixed fraction of the result, for torch as for pyooc, and a user can ask no more of pyooc than
    of the framework it replaces."""
    got_in = [t.to(dtype).requires_grad_() for t in inputs]
    ref_in = [t.detach().double().requires_grad_() for t in got_in]
    torch_in = [t.detach().clone().requires_grad_() for t in got_in]
    y, ref, torch_y = ours(*got_in), theirs(*ref_in), theirs(*torch_in)
    g = torch.from_numpy(rng.standard_normal(ref.shape))
    y.backward(g.to(dtype))
    ref.backward(g)
    torch_y.backward(g.to(dtype))
    assert y.dtype == dtype
    results = [(y, ref, torch_y)] + list(zip([a.grad for a in got_in], [r.grad for r in ref_in],
                                             [t.grad for t in torch_in]))
    for got, want, torch_got in results:
        assert got.dtype == dtype
        err = float((got.detach().double() - want).norm() / want.norm())
        torch_err = float((torch_got.detach().double() - want).norm() / want.norm())
        assert err < max(tol, 2 * torch_err), (err, torch_err)


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("pool", ["max", "avg", "avg_exclude_pad"])
def test_pooling_and_its_gradient(rng, dtype, tol, pool):
    x = rand(rng, (3, 4, 13, 11))
    if pool == "max":
        ours = lambda x: P.max_pool2d(x, 3, stride=2, padding=1, backend="host", memory_limit="4KiB")
        theirs = lambda x: F.max_pool2d(x, 3, stride=2, padding=1)
    else:
        include = pool == "avg"
        ours = lambda x: P.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=include, backend="host",
                                      memory_limit="4KiB")
        theirs = lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=include)
    against_float64(rng, ours, theirs, [x], dtype, tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_and_its_gradient(rng, dtype, tol, name):
    x = rand(rng, (4, 7, 6, 5), 3.0)
    against_float64(rng, lambda x: getattr(P, name)(x, 1, backend="host", memory_limit="2KiB"),
                    lambda x: getattr(F, name)(x, 1), [x], dtype, tol)
    same = getattr(P, name)(x.to(dtype), -1, dtype=dtype, backend="host")  # dtype= the input's: no cast
    assert same.dtype == dtype


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_add_tensor_and_its_gradient(rng, dtype, tol):
    a, c = rand(rng, (1, 4, 1, 1)), rand(rng, (3, 4, 5, 6))
    against_float64(rng, lambda a, c: pt.OPS["add_tensor"](a, c, 0.5, 2.0, 1024, "host"),
                    lambda a, c: 0.5 * a + 2.0 * c, [a, c], dtype, tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_batch_norm_and_its_gradient(rng, dtype, tol, training):
    x = rand(rng, (4, 3, 7, 6), 2.0) + 1
    weight, bias = rand(rng, 3).float().requires_grad_(), rand(rng, 3).float().requires_grad_()
    mean, var = rand(rng, 3).float(), (rand(rng, 3).abs() + 0.5).float()
    got_x = x.to(dtype).requires_grad_()
    ref_x, ref_w, ref_b = (t.detach().double().requires_grad_() for t in (got_x, weight, bias))
    rm, rv = mean.clone(), var.clone()
    y = P.batch_norm(got_x, rm, rv, weight, bias, training=training, backend="host", memory_limit="2KiB")
    ref = F.batch_norm(ref_x, mean.double(), var.double(), ref_w, ref_b, training=training)
    g = torch.from_numpy(rng.standard_normal(ref.shape)).to(dtype)
    y.backward(g)
    ref.backward(g.double())  # the same rounded gradient
    assert y.dtype == got_x.grad.dtype == dtype and weight.grad.dtype == bias.grad.dtype == torch.float32
    # The parameter gradients are reductions into float32 from the half x and dy, in training and in
    # eval alike (as torch computes them): only their float32 rounding separates them from float64.
    for got, want, t in [(y, ref, tol), (got_x.grad, ref_x.grad, tol), (weight.grad, ref_w.grad, 1e-4),
                         (bias.grad, ref_b.grad, 1e-4)]:
        err = float((got.detach().double() - want).norm() / want.norm())
        assert err < t, err
    if training:  # the running statistics, float32, updated in place as torch updates them
        ref_rm, ref_rv = mean.double().clone(), var.double().clone()
        F.batch_norm(got_x.detach().double(), ref_rm, ref_rv, training=True)
        assert float((rm.double() - ref_rm).norm() / ref_rm.norm()) < 1e-5
        assert float((rv.double() - ref_rv).norm() / ref_rv.norm()) < 1e-5


def test_refusals_name_the_argument():
    x = torch.randn(2, 3, 4, 4, dtype=torch.float16)
    with pytest.raises(NotImplementedError, match=r"dtype=torch.float32 is not supported by pyooc \(supported: "
                                                  r"None or the input's dtype, torch.float16\)"):
        P.softmax(x, 1, dtype=torch.float32, backend="host")
    with pytest.raises(NotImplementedError, match=r"input: pyooc supports dtype .* only here, got torch.float64"):
        P.max_pool2d(x.double(), 2, backend="host")
    with pytest.raises(TypeError, match=r"c must have the dtype of a \(float16\), got bfloat16"):
        pt.OPS["add_tensor"](x[:1, :, :1, :1].contiguous(), x.bfloat16(), 1.0, 1.0, 0, "host")
    with pytest.raises(NotImplementedError, match=r"weight: pyooc supports dtype torch.float32 only here, got "
                                                  r"torch.float16"):
        P.batch_norm(x, None, None, torch.ones(3, dtype=torch.float16), training=True, backend="host")
