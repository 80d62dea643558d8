"""Where pyooc.torch's ops put their results and gradients, checked without a GPU: the CUDA
device a call runs on (CPU tensors may join CUDA ones; two CUDA devices are refused in torch's
words), every fake kernel's results on its input's device under FakeTensorMode with fake CUDA
tensors (what torch.compile traces with), gradients moved to their inputs' devices, tensors on
other devices refused by name, and a weight in another memory format than its input through the
fused convolution backward."""

import pytest

from torch_helpers import rand, torch

import pyooc.torch as pt  # noqa: E402
from conftest import rel_err  # noqa: E402
from pyooc.torch import _ops  # noqa: E402
from pyooc.torch._tensors import call_device  # noqa: E402
from test_torch_opcheck import samples  # noqa: E402

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

F = torch.nn.functional
P = pt.functional


def test_a_call_runs_on_its_cuda_tensors_device():
    with FakeTensorMode():
        x, w = torch.empty(2, 3, device="cuda:1"), torch.empty(3, device="cuda:1")
    cpu = torch.empty(3)
    assert call_device(input=cpu, weight=cpu, bias=None) is None
    assert call_device(input=x, weight=w, bias=None) == 1
    assert call_device(input=cpu, weight=w) == 1  # a CPU tensor may join CUDA ones


def test_cuda_tensors_on_two_devices_are_refused_in_torchs_words():
    with FakeTensorMode():
        x, w = torch.empty(2, 3, device="cuda:0"), torch.empty(3, device="cuda:1")
    with pytest.raises(RuntimeError, match=r"^Expected all tensors to be on the same device, but found at least two "
                                           r"devices, cuda:0 and cuda:1! \(input is on cuda:0, weight on cuda:1\)$"):
        call_device(input=x, bias=torch.empty(3), weight=w)


def test_a_tensor_on_another_device_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^weight is on meta: pyooc.torch takes CPU tensors \(pageable or pinned\) "
                                         r"and CUDA tensors"):
        P.linear(torch.randn(4, 5), torch.empty(3, 5, device="meta"), backend="host")


# The argument whose device and dtype an op's results take (the first tensor unless listed): the
# tensor the result has the shape of.
LIKE = {"add_tensor": 1, "pool_backward": 2, "activation_backward": 2}
# How many leading tensors take a half x's dtype where the op's others stay float32 (batch norm's
# per-channel tensors), and which results are those float32 per-channel ones.
HALF_LEADING = {"batchnorm_forward_training": 1, "batchnorm_forward_inference": 1, "batchnorm_backward": 2}
FLOAT32_RESULTS = {"batchnorm_forward_training": (1, 2, 3, 4), "batchnorm_backward": (1, 2)}


def _fake_args(name, args, mode, on_cuda):
    """An opcheck sample's arguments as fake tensors (no gradient: autograd on fake CUDA tensors
    needs a CUDA build) in float16 (batch norm's per-channel ones float32), on cuda:1 where
    on_cuda(i) says for the i-th argument, else on the CPU."""
    fake = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            dtype = torch.float16 if i < HALF_LEADING.get(name, len(args)) else a.dtype
            with mode:
                a = torch.empty(a.shape, dtype=dtype, device="cuda:1" if on_cuda(i) else "cpu")
        fake.append(a)
    return fake


@pytest.mark.parametrize("mixed", [False, True], ids=["all_cuda", "only_x_cuda"])
@pytest.mark.parametrize("name", sorted(samples()))
def test_fake_kernels_put_results_where_the_real_ops_do(name, mixed):
    """Every op's fake kernel, as torch.compile traces it: results on the device of x (the tensor
    they have the shape of: LIKE), cuda:1 with its index, the others on the CPU where mixed (batch
    norm's updated running statistics on theirs), in x's dtype (float16) where the op keeps it."""
    mode = FakeTensorMode()
    op = getattr(torch.ops.pyooc, name).default
    like = LIKE.get(name, 0)
    for args in samples()[name]:
        fake = _fake_args(name, args, mode, lambda i: i == like or not mixed)
        with mode:
            results = op(*fake)
        results = results if isinstance(results, tuple) else (results,)
        for i, r in enumerate(results):
            stats = fake[3] if name == "batchnorm_forward_training" and i >= 3 else None
            want = (fake[like] if stats is None else stats).device
            assert r.device == want, (name, i, r.device, want)
            dtype = torch.float32 if i in FLOAT32_RESULTS.get(name, ()) else torch.float16
            assert r.dtype == dtype, (name, i, r.dtype)


def test_fake_kernels_keep_a_cuda_inputs_memory_format():
    mode = FakeTensorMode()
    with mode:
        x = torch.empty(2, 3, 6, 5, device="cuda:0", memory_format=torch.channels_last)
        w = torch.empty(4, 3, 3, 3, device="cuda:0")
        y = torch.ops.pyooc.conv_forward(x, w, None, [1, 1], [1, 1], [1, 1], 1, 0, "cuda")
        dw = torch.ops.pyooc.conv_backward_filter(x, y, [4, 3, 3, 3], [1, 1], [1, 1], [1, 1], 1, 0, "cuda")
    assert y.device == dw.device == x.device
    assert y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()
    assert dw.is_contiguous(memory_format=torch.channels_last)


# An op whose backward returns its gradients on the CPU: a stand-in for a pyooc op whose results
# are on x's device while an input lives elsewhere (only the meta device is at hand without a GPU).
@torch.library.custom_op("pyooc_test::cpu_gradients", mutates_args=())
def _cpu_gradients(x: torch.Tensor, w: torch.Tensor, scale: float) -> torch.Tensor:
    raise AssertionError("only the fake kernel runs: the inputs are meta tensors")


@_cpu_gradients.register_fake
def _(x, w, scale):
    return x.new_empty(x.shape)


def _cpu_gradients_backward(ctx, g):
    return torch.full(ctx.x_shape, 2.0), torch.full(ctx.w_shape, 3.0), None


def _cpu_gradients_setup(ctx, inputs, output):
    x, w, scale = inputs
    ctx.x_shape, ctx.w_shape = x.shape, w.shape


_ops._register_autograd(_cpu_gradients, _cpu_gradients_backward, _cpu_gradients_setup)


def test_each_gradient_is_moved_to_its_inputs_device():
    """autograd refuses a gradient on another device than its input ("invalid gradient ...
    expected device meta but got cpu"); the ops' autograd formulas move each to its input's."""
    x = torch.empty(3, 4, device="meta", requires_grad=True)
    w = torch.zeros(5, requires_grad=True)
    _cpu_gradients(x, w, 1.0).backward(torch.empty(3, 4, device="meta"))
    assert x.grad.device.type == "meta" and x.grad.shape == x.shape
    assert w.grad.device.type == "cpu" and torch.equal(w.grad, torch.full((5,), 3.0))


def test_a_channels_last_weight_of_a_contiguous_input_through_the_fused_backward(rng):
    """The forward reads such a weight in its input's format (a copy of the weight), and so does
    the fused backward (dx and dw wanted), which takes contiguous tensors only."""
    x, w, b = rand(rng, (2, 3, 12, 11)), rand(rng, (4, 3, 3, 3), 0.3), rand(rng, 4)
    got = [t.float().requires_grad_() for t in (x, w, b)]
    got[1] = got[1].detach().contiguous(memory_format=torch.channels_last).requires_grad_()
    ref = [t.clone().requires_grad_() for t in (x, w, b)]
    y = P.conv2d(*got, padding=1, backend="host", memory_limit="8KiB")
    want = F.conv2d(*ref, padding=1)
    g = rand(rng, tuple(want.shape))
    y.backward(g.float())
    want.backward(g)
    assert rel_err(y.detach().numpy(), want.detach().numpy()) < 1e-5
    for t, r in zip(got, ref):
        assert rel_err(t.grad.numpy(), r.grad.numpy()) < 1e-5
