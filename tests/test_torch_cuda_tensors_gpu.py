"""pyooc.torch's ops on CUDA tensors (marked gpu; skipped without one): every op family reads its
CUDA inputs in place and returns CUDA results on their device, in the input's dtype and memory
format, against torch's own op in float64 on the CPU (values within 1e-5 of the norm, gradients
1e-4) under budgets small enough to split the call; batch norm's running statistics updated in
place on the device; float16; CPU tensors mixed in (results on x's device, each gradient on its
input's); the fake kernels against the real ops on the device (opcheck). Needs a CUDA build of
torch."""

import math

import pytest

from torch_helpers import fresh_copies, rand, torch

import pyooc  # noqa: E402
import pyooc.torch as pt  # noqa: E402
from conftest import rel_err  # noqa: E402
from test_torch_opcheck import samples  # noqa: E402

pytestmark = pytest.mark.gpu
F = torch.nn.functional
P = pt.functional
OPS = torch.ops.pyooc
TOL, GRAD_TOL = 1e-5, 1e-4
# How near relu's kink a computed value (a convolution's), or two in a max-pooling window each
# other, may lie for float32 rounding to change the gradient's path: far above that rounding for
# O(1) values, far below their spread.
EPS = 1e-5


@pytest.fixture(autouse=True)
def fp32_torch():
    """torch in full FP32 (no TF32): pyooc follows its switches, and the references need it."""
    assert torch.cuda.is_available(), "the CUDA tensor tests of pyooc.torch need a CUDA build of torch"
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def leaf(t):
    return t.requires_grad_()


def distinct(rng, shape):
    """A float64 tensor of distinct values in random order, odd multiples of a power of two (exact
    in float32; none 0 or 6, relu's and relu6's kinks; none tied in a max-pooling window), spread
    over [-m, m] with 8 < m <= 16."""
    n = math.prod(shape)
    step = 2.0 ** -max(0, math.ceil(math.log2(n / 16)))
    return torch.from_numpy((2 * (rng.permutation(n) - n // 2) + 1) * step).reshape(shape)


def near_relu_kink(pre):
    return pre.abs() < EPS


def ambiguous_max_pool(pre, act):
    """The 2x2 max-pooling windows of act(pre) whose gradient path float32 rounding of pre may
    change: their top two values within EPS, or their largest pre-activation near relu's kink."""
    n, c, h, w = pre.shape

    def windows(t):
        return t.reshape(n, c, h // 2, 2, w // 2, 2).transpose(3, 4).reshape(n, c, h // 2, w // 2, 4)

    top = windows(act(pre)).topk(2, dim=-1).values
    return (top[..., 0] - top[..., 1] < EPS) | near_relu_kink(windows(pre).amax(dim=-1))


def on_cuda(inputs):
    """float32 leaf copies of inputs (tensors or other arguments) on the GPU, requiring grad where
    the original does."""
    return [t.detach().to("cuda", torch.float32).requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor)
            else t for t in inputs]


def split_run(run, working):
    """run(memory_limit)'s result at the first budget, from a sixteenth of `working` bytes up by
    half, at which pyooc has room for the forward and the gradients (a MemoryError retries the
    whole step, so run makes fresh leaves and state each time)."""
    limit = max(working // 16, 4096)
    while True:
        try:
            return run(limit)
        except MemoryError:
            assert limit < 8 * working, f"no memory_limit up to {limit} bytes fits"
            limit = int(limit * 1.5)


def check(rng, ours, theirs, inputs, *, memory_format=torch.contiguous_format, ambiguous=None):
    """ours(*CUDA float32 copies of inputs, memory_limit=...) against theirs(*float64 CPU copies of
    the same float32 values): a float32 CUDA result on the first input's device in `memory_format`,
    the forward split into chunks, within TOL of the reference, and each input gradient a float32
    tensor on its input's device within GRAD_TOL, for a fresh random dy, zero where
    ambiguous(*the float64 inputs) says rounding may choose the gradient's path."""
    inputs = [t.detach().float().double().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
              for t in inputs]
    ref_inputs = fresh_copies(inputs, torch.float64)
    ref = theirs(*ref_inputs)
    dy = torch.from_numpy(rng.standard_normal(tuple(ref.shape)))
    if ambiguous is not None:
        with torch.no_grad():
            dy[ambiguous(*ref_inputs)] = 0
    ref_leaves = [t for t in ref_inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    ref_grads = torch.autograd.grad(ref, ref_leaves, dy)
    working = 4 * (sum(t.numel() for t in inputs if isinstance(t, torch.Tensor)) + ref.numel())

    def run(limit):
        args = on_cuda(inputs)
        y = ours(*args, memory_limit=limit)
        chunks = pyooc.last_stats()["chunks"]
        leaves = [t for t in args if isinstance(t, torch.Tensor) and t.requires_grad]
        grads = torch.autograd.grad(y, leaves, dy.to(y.device, y.dtype))
        return y, args, leaves, grads, chunks

    y, args, leaves, grads, chunks = split_run(run, working)
    assert chunks > 1, "the forward ran in one chunk: no split tested"
    assert y.device == args[0].device and y.dtype == torch.float32, (y.device, y.dtype)
    assert y.is_contiguous(memory_format=memory_format)
    err = rel_err(y.detach().cpu().numpy(), ref.detach().numpy())
    assert err < TOL, f"forward: relative error {err:.3e} >= {TOL}"
    assert len(grads) == len(ref_grads)
    for i, (t, g, want) in enumerate(zip(leaves, grads, ref_grads)):
        assert g.device == t.device and g.dtype == torch.float32, f"gradient {i}: {g.device}, {g.dtype}"
        err = rel_err(g.cpu().numpy(), want.numpy())
        assert err < GRAD_TOL, f"gradient {i}: relative error {err:.3e} >= {GRAD_TOL}"


# ------------------------------------------------------------------------------------------------
# pooling, activations, softmax, add_tensor


POOLS = [  # (function name, x shape, arguments)
    ("max_pool1d", (4, 16, 301), dict(kernel_size=4, stride=3, padding=1)),
    ("max_pool2d", (4, 16, 40, 43), dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool2d", (4, 16, 40, 43), dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool2d", (4, 16, 40, 43), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ("max_pool3d", (2, 8, 12, 13, 14), dict(kernel_size=2)),
    ("avg_pool3d", (2, 8, 12, 13, 14), dict(kernel_size=(2, 3, 2), stride=(2, 1, 2), padding=(1, 1, 0))),
]


@pytest.mark.parametrize("name,shape,args", POOLS)
def test_pooling(rng, name, shape, args):
    check(rng, lambda x, memory_limit: getattr(P, name)(x, **args, memory_limit=memory_limit, backend="cuda"),
          lambda x: getattr(F, name)(x, **args), [leaf(distinct(rng, shape))])


ACTIVATIONS = [  # (name, arguments)
    ("relu", {}), ("relu6", {}), ("sigmoid", {}), ("tanh", {}), ("elu", dict(alpha=1.3)), ("gelu", {}),
    ("leaky_relu", dict(negative_slope=0.2)), ("silu", {}),
]


@pytest.mark.parametrize("name,args", ACTIVATIONS)
def test_activation(rng, name, args):
    check(rng, lambda x, memory_limit: getattr(P, name)(x, **args, memory_limit=memory_limit, backend="cuda"),
          lambda x: getattr(F, name)(x, **args), [leaf(distinct(rng, (4, 16, 40, 43)))])


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape,dim", [((8, 10, 40, 43), 1), ((40, 43, 100), -1)])
def test_softmax(rng, shape, dim, log):
    name = "log_softmax" if log else "softmax"
    check(rng, lambda x, memory_limit: getattr(P, name)(x, dim, memory_limit=memory_limit, backend="cuda"),
          lambda x: getattr(F, name)(x, dim), [leaf(rand(rng, shape, 2.0))])


def test_add_tensor(rng):
    a, c = leaf(rand(rng, (1, 16, 1, 1))), leaf(rand(rng, (4, 16, 40, 43)))
    check(rng, lambda a, c, memory_limit: OPS.add_tensor(a, c, 0.5, 2.0, memory_limit, "cuda"),
          lambda a, c: 0.5 * a + 2.0 * c, [a, c])


# ------------------------------------------------------------------------------------------------
# batch norm


def test_batch_norm_training_updates_cuda_running_stats_in_place(rng):
    shape, c = (4, 16, 40, 43), 16
    x, weight, bias = leaf(rand(rng, shape, 2.0) + 0.5), leaf(rand(rng, c)), leaf(rand(rng, c))
    mean0, var0 = rand(rng, c), rand(rng, c).abs() + 0.5
    stats = [mean0.float().cuda(), var0.float().cuda()]
    addresses = [s.data_ptr() for s in stats]

    def ours(x, w, b, memory_limit):  # from the initial statistics on every try (split_run retries)
        stats[0].copy_(mean0), stats[1].copy_(var0)
        return P.batch_norm(x, *stats, w, b, True, 0.2, 1e-3, memory_limit=memory_limit, backend="cuda")

    ref_stats = [mean0.clone(), var0.clone()]
    check(rng, ours, lambda x, w, b: F.batch_norm(x, *[s.clone() for s in ref_stats], w, b, True, 0.2, 1e-3),
          [x, weight, bias])
    F.batch_norm(x.detach(), *ref_stats, None, None, True, 0.2, 1e-3)  # the running update, once
    for got, address, want in zip(stats, addresses, ref_stats):
        assert got.device.type == "cuda" and got.data_ptr() == address, "a running statistic was replaced"
        assert rel_err(got.cpu().numpy(), want.numpy()) < TOL


def test_batch_norm_training_op_returns_float32_cuda_statistics(rng):
    """The op's saved statistics and the batch norm gradient's dweight and dbias: float32 CUDA
    tensors on x's device (pyooc returns them on the host), for a float16 x too."""
    c = 16
    for dtype in (torch.float32, torch.float16):
        x = rand(rng, (4, c, 20, 21)).to("cuda", dtype).requires_grad_()
        weight, bias = (rand(rng, c).float().cuda().requires_grad_() for _ in range(2))
        mean, var = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
        outputs = OPS.batchnorm_forward_training(x, weight, bias, mean, var, 0.1, 1e-5, 0, "cuda")
        assert [(t.device, t.dtype) for t in outputs] == [(x.device, dtype)] + [(x.device, torch.float32)] * 4
        assert torch.equal(mean, torch.zeros(c, device="cuda")), "the op changed the caller's running_mean"
        y = outputs[0]
        y.backward(torch.ones_like(y))
        assert x.grad.dtype == dtype and weight.grad.dtype == bias.grad.dtype == torch.float32
        assert all(g.device == x.device for g in (x.grad, weight.grad, bias.grad))


def test_batch_norm_eval(rng):
    shape, c = (4, 16, 40, 43), 16
    x, weight, bias = leaf(rand(rng, shape)), leaf(rand(rng, c)), leaf(rand(rng, c))
    mean, var = rand(rng, c), rand(rng, c).abs() + 0.5
    check(rng, lambda x, w, b, memory_limit: P.batch_norm(x, mean.float().cuda(), var.float().cuda(), w, b, False,
                                                          eps=1e-3, memory_limit=memory_limit, backend="cuda"),
          lambda x, w, b: F.batch_norm(x, mean, var, w, b, False, eps=1e-3), [x, weight, bias])


def test_batch_norm_module_on_the_gpu(rng):
    """The drop-in BatchNorm2d moved to the GPU: its buffers updated in place there, as torch's."""
    ref = torch.nn.BatchNorm2d(16).double()
    x = rand(rng, (4, 16, 40, 43), 2.0) + 0.5
    for _ in range(2):
        want = ref(x)

    def run(limit):  # two training steps of a fresh module
        ours = pt.BatchNorm2d(16, memory_limit=limit, backend="cuda").cuda()
        buffers = {name: b.data_ptr() for name, b in ours.named_buffers()}
        for _ in range(2):
            y = ours(x.float().cuda())
        return ours, buffers, y, pyooc.last_stats()["chunks"]

    ours, buffers, y, chunks = split_run(run, 8 * x.numel())
    assert y.device.type == "cuda" and chunks > 1
    assert rel_err(y.detach().cpu().numpy(), want.detach().numpy()) < TOL
    for name, b in ours.named_buffers():
        assert b.device.type == "cuda" and b.data_ptr() == buffers[name], f"{name} left the device"
        assert rel_err(b.cpu().double().numpy(), getattr(ref, name).numpy()) < TOL, name


# ------------------------------------------------------------------------------------------------
# linear and matmul


@pytest.mark.parametrize("bias", [True, False])
def test_linear(rng, bias):
    x, w = leaf(rand(rng, (8, 300, 96))), leaf(rand(rng, (80, 96), 0.3))
    b = leaf(rand(rng, 80)) if bias else None
    check(rng, lambda x, w, b, memory_limit: P.linear(x, w, b, memory_limit=memory_limit, backend="cuda"),
          F.linear, [x, w, b])


def test_matmul(rng):
    a, b = leaf(rand(rng, (600, 170))), leaf(rand(rng, (170, 290)))
    check(rng, lambda a, b, memory_limit: OPS.matmul(a, b, memory_limit, "cuda"), torch.matmul, [a, b])


# ------------------------------------------------------------------------------------------------
# convolutions and the fused ops, with their gradients through autograd


@pytest.mark.parametrize("channels_last", [False, True])
def test_conv_and_its_fused_gradient(rng, monkeypatch, channels_last):
    """dx and dw wanted: contiguous tensors take the fused backward (one pass over dy) on the
    device, channels-last ones the three separate gradients."""
    x, w, b = leaf(rand(rng, (4, 16, 40, 43))), leaf(rand(rng, (12, 16, 3, 3), 0.1)), leaf(rand(rng, 12))
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    fused, calls = pyooc.conv_backward_data_filter_bias, []
    monkeypatch.setattr(pyooc, "conv_backward_data_filter_bias", lambda *a, **kw: calls.append(a) or fused(*a, **kw))
    check(rng, lambda x, w, b, memory_limit: P.conv2d(x.contiguous(memory_format=fmt), w, b, padding=1,
                                                      memory_limit=memory_limit, backend="cuda"),
          lambda x, w, b: F.conv2d(x, w, b, padding=1), [x, w, b], memory_format=fmt)
    assert bool(calls) == (not channels_last)


def test_conv_transpose(rng):
    x, w, b = leaf(rand(rng, (4, 16, 20, 21))), leaf(rand(rng, (16, 8, 3, 3), 0.1)), leaf(rand(rng, 8))
    geometry = dict(stride=2, padding=1, output_padding=1)
    check(rng, lambda x, w, b, memory_limit: P.conv_transpose2d(x, w, b, **geometry, memory_limit=memory_limit,
                                                                backend="cuda"),
          lambda x, w, b: F.conv_transpose2d(x, w, b, **geometry), [x, w, b])


@pytest.mark.parametrize("activation,coef", [("relu", 0.0), ("identity", 0.0), ("gelu", 0.0), ("elu", 0.7)])
def test_conv_bias_activation(rng, activation, coef):
    """The fused forward and its fused gradient (gelu and elu recompute the activation's input)."""
    x, w, b = leaf(rand(rng, (4, 16, 40, 43))), leaf(rand(rng, (12, 16, 3, 3), 0.1)), leaf(rand(rng, 12))
    act = {"relu": F.relu, "identity": lambda v: v, "gelu": F.gelu, "elu": lambda v: F.elu(v, coef)}[activation]
    kinked = activation in ("relu", "elu")  # elu with alpha != 1: its derivative jumps at 0 too
    check(rng, lambda x, w, b, memory_limit: OPS.conv_bias_activation_forward(
        x, w, b, activation, coef, [1, 1], [1, 1], [1, 1], 1, memory_limit, "cuda"),
        lambda x, w, b: act(F.conv2d(x, w, b, padding=1)), [x, w, b],
        ambiguous=(lambda x, w, b: near_relu_kink(F.conv2d(x, w, b, padding=1))) if kinked else None)


def test_grouped_conv_bias_activation(rng):
    """groups: the gradient through the activation's and the convolution's own backward ops."""
    x, w, b = leaf(rand(rng, (4, 16, 40, 43))), leaf(rand(rng, (12, 8, 3, 3), 0.1)), leaf(rand(rng, 12))
    check(rng, lambda x, w, b, memory_limit: OPS.conv_bias_activation_forward(
        x, w, b, "gelu", 0.0, [1, 1], [1, 1], [1, 1], 2, memory_limit, "cuda"),
        lambda x, w, b: F.gelu(F.conv2d(x, w, b, padding=1, groups=2)), [x, w, b])


@pytest.mark.parametrize("activation,pool_mode", [("relu", "max"), ("gelu", "avg"), ("identity", "max")])
def test_conv_bias_activation_pooling(rng, activation, pool_mode):
    """The pooled fused forward, and its gradient (y recomputed, then the fused pooled backward)."""
    x, w, b = leaf(rand(rng, (4, 16, 40, 42))), leaf(rand(rng, (12, 16, 3, 3), 0.1)), leaf(rand(rng, 12))
    act = {"relu": F.relu, "identity": lambda v: v, "gelu": F.gelu}[activation]
    pool = F.max_pool2d if pool_mode == "max" else F.avg_pool2d
    check(rng, lambda x, w, b, memory_limit: OPS.conv_bias_activation_pooling_forward(
        x, w, b, activation, 0.0, [1, 1], [1, 1], [1, 1], 1, [2, 2], [2, 2], [0, 0], pool_mode, memory_limit,
        "cuda"), lambda x, w, b: pool(act(F.conv2d(x, w, b, padding=1)), 2), [x, w, b],
        ambiguous=(lambda x, w, b: ambiguous_max_pool(F.conv2d(x, w, b, padding=1), act)) if pool_mode == "max"
        else None)


# ------------------------------------------------------------------------------------------------
# float16


@pytest.mark.parametrize("name,call", [
    # avg, not max: half values tie often enough that which maximum takes dy would be a coin toss
    ("avg_pool2d", lambda f, x, **kw: f.avg_pool2d(x, 3, stride=2, padding=1, **kw)),
    ("sigmoid", lambda f, x, **kw: f.sigmoid(x, **kw)),
    ("softmax", lambda f, x, **kw: f.softmax(x, 1, **kw)),
    ("conv_bias", lambda f, x, w, b, **kw: f.conv2d(x, w, b, padding=1, **kw)),
])
def test_float16(rng, name, call):
    """float16 CUDA tensors in, float16 CUDA results and gradients out, against float64 within 1e-3
    of the norm or twice the error of torch's own ops on the GPU in float16."""
    inputs = [rand(rng, (4, 16, 40, 43))]
    if name == "conv_bias":
        inputs += [rand(rng, (12, 16, 3, 3), 0.1), rand(rng, 12)]
    half = [t.to("cuda", torch.float16) for t in inputs]
    ref_in = [t.cpu().double().requires_grad_() for t in half]
    torch_in = [t.clone().requires_grad_() for t in half]
    ref, torch_y = call(F, *ref_in), call(F, *torch_in)
    g = torch.from_numpy(rng.standard_normal(tuple(ref.shape)))
    ref.backward(g)
    torch_y.backward(g.to("cuda", torch.float16))

    def run(limit):
        got_in = [t.clone().requires_grad_() for t in half]
        y = call(P, *got_in, memory_limit=limit, backend="cuda")
        chunks = pyooc.last_stats()["chunks"]
        y.backward(g.to("cuda", torch.float16))
        return got_in, y, chunks

    got_in, y, chunks = split_run(run, 2 * (sum(t.numel() for t in half) + ref.numel()))
    assert chunks > 1
    results = [(y, ref, torch_y)] + [(a.grad, r.grad, t.grad) for a, r, t in zip(got_in, ref_in, torch_in)]
    for got, want, torch_got in results:
        assert got.device == half[0].device and got.dtype == torch.float16
        err = rel_err(got.detach().cpu().double().numpy(), want.detach().numpy())
        torch_err = rel_err(torch_got.detach().cpu().double().numpy(), want.detach().numpy())
        assert err < max(1e-3, 2 * torch_err), (err, torch_err)


# ------------------------------------------------------------------------------------------------
# CPU tensors mixed in, several GPUs, refusals


def test_cpu_parameters_with_a_cuda_input(rng):
    """A CUDA x with CPU parameters (as the convolutions took them first): the results on x's
    device, each parameter's gradient on the CPU, as torch's autograd wants them."""
    x64, lw64 = rand(rng, (4, 16, 40, 43)), rand(rng, (30, 43), 0.3)
    params64 = [rand(rng, 16), rand(rng, 16), lw64, rand(rng, 30)]  # batch norm's weight, bias; linear's
    x = x64.float().cuda().requires_grad_()
    params = [t.float().requires_grad_() for t in params64]

    def net(f, x, weight, bias, lw, lb, **kw):
        return f.linear(f.batch_norm(x, None, None, weight, bias, training=True, **kw), lw, lb, **kw)

    y = net(P, x, *params, backend="cuda")
    ref_in = [t.detach().cpu().double().requires_grad_() for t in [x, *params]]
    ref = net(F, *ref_in)
    g = torch.from_numpy(rng.standard_normal(tuple(ref.shape)))
    y.backward(g.float().cuda())
    ref.backward(g)
    assert y.device == x.device and rel_err(y.detach().cpu().numpy(), ref.detach().numpy()) < TOL
    for got, leaf_in, want in zip([x.grad] + [p.grad for p in params], [x, *params], ref_in):
        assert got.device == leaf_in.device
        assert rel_err(got.cpu().numpy(), want.grad.numpy()) < GRAD_TOL


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_a_second_gpu_run_there_and_two_gpus_are_refused(rng):
    x = rand(rng, (4, 16, 40, 43)).float().to("cuda:1")
    y = P.relu(x, backend="cuda")
    assert y.device == x.device and torch.equal(y, x.clamp(min=0))
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device, but found at least "
                                           r"two devices, cuda:1 and cuda:0! \(input is on cuda:1, weight on cuda:0\)"):
        P.linear(x, torch.ones(5, 43, device="cuda:0"), backend="cuda")


def test_a_geometry_pyooc_refuses_is_its_value_error_on_the_gpu():
    """A CUDA input whose result shape would be negative: pyooc's check names the argument (no
    torch.empty of that shape first)."""
    with pytest.raises(ValueError, match="kernel"):
        P.max_pool2d(torch.ones(1, 2, 3, 3, device="cuda"), 5, stride=1, backend="cuda")


def test_cuda_tensors_with_the_host_backend_are_refused_by_name():
    with pytest.raises(TypeError, match="backend='host'"):
        P.relu(torch.ones(2, 3, device="cuda"), backend="host")


def _to_cuda(arg):
    """An opcheck sample's argument for the device: tensors moved, the host backend made the cuda
    one (device tensors need it), and the one 4 KiB memory_limit (fitting the host backend's
    smallest plan) made the process default."""
    if isinstance(arg, torch.Tensor):
        return arg.detach().cuda().requires_grad_(arg.requires_grad)
    return {"host": "cuda", 1 << 12: 0}.get(arg, arg) if isinstance(arg, (str, int)) else arg


@pytest.mark.parametrize("name", sorted(samples()))
def test_opcheck_on_cuda_tensors(name):
    """torch.library.opcheck on the device: each fake kernel's results (device, dtype, strides)
    against the real op's, the schema (no input mutated), autograd and AOT dispatch."""
    op = getattr(OPS, name).default
    for args in samples()[name]:
        torch.library.opcheck(op, tuple(_to_cuda(a) for a in args))
