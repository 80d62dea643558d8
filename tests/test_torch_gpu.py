"""pyooc.torch on the GPU (marked gpu; skipped without one): CUDA tensors through the convolutions
(every op's: test_torch_cuda_tensors_gpu.py), pinned CPU tensors through the cuda backend, a small model trained on the cuda backend with torch's losses,
the saved-tensor offloader with streams and pinned memory, and a model under one budget with
pyooc.torch.policy against in-core torch on the same GPU. Needs a CUDA build of torch."""

import copy

import numpy as np
import pytest

from test_torch_modules import _small_net_for_training, train_losses
from torch_helpers import policy_budget, rand, torch

import pyooc.torch as pt  # noqa: E402
from pyooc.torch import policy  # noqa: E402
import pyooc  # noqa: E402
from conftest import needed_budget, rel_err  # noqa: E402

pytestmark = pytest.mark.gpu
nn = torch.nn


@pytest.fixture(autouse=True)
def fp32_torch():
    """torch in full FP32 (no TF32), deterministic cuDNN, as the references need."""
    assert torch.cuda.is_available(), "the GPU tests of pyooc.torch need a CUDA build of torch"
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
     torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark) = saved


def test_cuda_tensors_go_through_the_convolutions_in_place(rng):
    """A CUDA x and w: read in place, the result a CUDA tensor on their device, gradients too (on
    each parameter's device, with a CPU bias); split by a small budget."""
    x = rand(rng, (2, 8, 30, 31)).float().cuda().requires_grad_()
    w = rand(rng, (6, 8, 3, 3), 0.3).float().cuda().requires_grad_()
    b = rand(rng, (6,)).float().requires_grad_()  # on the CPU: a mix
    # A little above the smallest plans for device-resident tensors (planned as pinned), forward and
    # backward (the gradients run under the same limit): many chunks.
    y_shape = (2, 6, 30, 31)
    plans = (lambda m: pyooc.plan_conv_forward(x.shape, w.shape, bias=True, padding=1, memory_limit=m,
                                               backend="cuda", pinned=True),
             lambda m: pyooc.plan_conv_backward_data(y_shape, w.shape, x.shape, padding=1, memory_limit=m,
                                                     backend="cuda", pinned=True),
             lambda m: pyooc.plan_conv_backward_filter(x.shape, y_shape, w.shape, padding=1, memory_limit=m,
                                                       backend="cuda", pinned=True),
             # the three gradients of CUDA tensors in one pass (pyooc.torch's fused backward)
             lambda m: pyooc.plan_conv_backward_data_filter_bias(x.shape, y_shape, w.shape, padding=1,
                                                                 memory_limit=m, backend="cuda", pinned=True))
    limit = int(1.2 * max(needed_budget(plan) for plan in plans))
    y = pt.functional.conv2d(x, w, b, padding=1, memory_limit=limit, backend="cuda")
    assert y.device == x.device and pyooc.last_stats()["chunks"] > 1
    g = rand(rng, tuple(y.shape)).float().cuda()
    y.backward(g)
    xd, wd, bd = (t.detach().cpu().double().requires_grad_() for t in (x, w, b))
    ref = nn.functional.conv2d(xd, wd, bd, padding=1)
    ref.backward(g.cpu().double())
    assert rel_err(y.detach().cpu().numpy(), ref.detach().numpy()) < 1e-5
    assert x.grad.device == x.device and w.grad.device == w.device and b.grad.device.type == "cpu"
    for got, want in ((x.grad, xd.grad), (w.grad, wd.grad), (b.grad, bd.grad)):
        assert rel_err(got.cpu().numpy(), want.numpy()) < 1e-5


def test_devices_on_the_gpu_listed_twice(rng):
    """pyooc.torch's devices=[0, 0] with host tensors on the cuda backend: a small model's forward
    and backward (convolution, batch norm, ReLU) give the one-pipeline results."""
    def run(devices):
        torch.manual_seed(3)
        model = pt.convert(torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32),
                                               torch.nn.ReLU()), memory_limit="2MiB", backend="cuda",
                           devices=devices)
        x = torch.from_numpy(rng_x).requires_grad_()
        y = model(x)
        y.backward(torch.from_numpy(rng_dy))
        return [y.detach(), x.grad, model[0].weight.grad, model[1].weight.grad, model[1].running_var]

    rng_x = rng.standard_normal((8, 16, 64, 56), dtype=np.float32)
    rng_dy = rng.standard_normal((8, 32, 64, 56), dtype=np.float32)
    one, twice = run(None), run([0, 0])
    for name, ours, theirs in zip(("y", "dx", "dw", "dgamma", "running_var"), twice, one):
        assert rel_err(ours.numpy(), theirs.numpy()) < 1e-6, name


def test_pinned_tensors_through_the_cuda_backend(rng):
    x = rand(rng, (4, 16, 64, 64)).float().pin_memory()
    w = rand(rng, (16, 16, 3, 3), 0.3).float().pin_memory()
    assert x.is_pinned()
    # A little above the smallest plan the cuda backend has: many chunks.
    limit = int(1.2 * needed_budget(lambda limit: pyooc.plan_conv_forward(
        x.shape, w.shape, padding=1, memory_limit=limit, backend="cuda")))
    y = pt.functional.conv2d(x, w, padding=1, memory_limit=limit, backend="cuda")
    ref = nn.functional.conv2d(x.double(), w.double(), padding=1)
    assert y.device.type == "cpu"
    assert rel_err(y.numpy(), ref.numpy()) < 1e-5
    stats = pyooc.last_stats()
    assert stats["plan"].backend == "cuda" and stats["chunks"] > 1


def test_small_model_trains_on_the_cuda_backend(rng):
    ref = _small_net_for_training(rng)
    # The process default budget: the chunking on the cuda backend is the test above's (and the
    # repository's GPU tests'); this one is the front end's numerics through cuDNN and cuBLAS.
    model = pt.convert(copy.deepcopy(ref), backend="cuda")
    losses, ref_losses = train_losses(rng, model, ref.double(), require_chunks=False)
    for step, (a, b) in enumerate(zip(losses, ref_losses)):
        assert abs(a - b) <= 1e-4 * abs(b), f"step {step}: pyooc loss {a}, torch {b}"
    assert losses[-1] < losses[0]


def _net():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(16 * 16 * 16, 10))


def test_offloader_with_streams_and_pinned_memory(rng):
    torch.manual_seed(int(rng.integers(2**31)))
    model = _net().cuda()
    x = rand(rng, (8, 3, 64, 64)).float().cuda()

    def grads(hooks=None):
        model.zero_grad()
        if hooks is None:
            loss = model(x).square().sum()
        else:
            with hooks:
                loss = model(x).square().sum()
        loss.backward()
        torch.cuda.synchronize()
        return loss.item(), [p.grad.clone() for p in model.parameters()]

    loss, want = grads()
    off = policy.SavedTensorOffloader(0, "cuda", prefetch=2)
    loss2, got = grads(off.hooks())
    assert off.stats["offloaded"] > 0 and off.stats["prefetched"] > 0
    assert all(h.host.is_pinned() for h in off.offloaded)
    # Copies are exact; the tolerance only allows cuDNN to pick another kernel for new addresses.
    assert abs(loss2 - loss) <= 1e-6 * abs(loss)
    for a, b in zip(got, want):
        assert rel_err(a.cpu().numpy(), b.cpu().numpy()) < 1e-6, "an offloaded activation came back changed"


def test_model_under_one_budget_matches_in_core_torch(rng):
    """Layers too big for the compute share run through pyooc (cuda backend) on host tensors, the
    rest in core on the GPU; the loss and gradients are in-core torch's on the same GPU (FP32)."""
    torch.manual_seed(int(rng.integers(2**31)))
    ref = _net().cuda()
    model = copy.deepcopy(ref)
    x = rand(rng, (8, 3, 64, 64)).float().cuda()
    # Free for in-core layers: between layer 8's working set and the first conv's.
    free = (policy.device_bytes(model[4], (8, 16, 32, 32)) + policy.device_bytes(model[0], x.shape)) // 2
    runner = policy.OutOfCore(model, policy_budget(model, "cuda", free), device="cuda", backend="cuda")
    for _ in range(3):
        ref.zero_grad(), model.zero_grad()
        loss = ref(x).square().sum()
        loss.backward()
        loss2 = runner(x).square().sum()
        loss2.backward()
        assert rel_err(loss2.detach().cpu().numpy(), loss.detach().cpu().numpy()) < 1e-5
        for name, (p, q) in zip(dict(model.named_parameters()), zip(model.parameters(), ref.parameters())):
            assert p.grad.device.type == "cuda", f"{name}'s gradient is not on the device"
            assert rel_err(p.grad.cpu().numpy(), q.grad.cpu().numpy()) < 1e-4, name
        with torch.no_grad():
            for p, q in zip(model.parameters(), ref.parameters()):
                p -= 1e-4 * p.grad
                q -= 1e-4 * q.grad
    assert runner.decisions["0"] == "pyooc" and runner.decisions["8"] == "device", runner.decisions
    assert runner.offloader.stats["offloaded"] + runner.offloader.stats["kept"] > 0


class _TinyUNet(nn.Module):
    """One level of a 2D U-Net: the skip joins a big early layer's output (pyooc: on the host) and
    the upsampled path's (in core: on the device) with torch.cat, as a user writes it."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.down = nn.MaxPool2d(2)
        self.mid = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(16, 16, 2, stride=2)
        self.head = nn.Conv2d(32, 2, 1)

    def forward(self, x):
        skip = self.enc(x)
        return self.head(torch.cat([self.up(self.mid(self.down(skip))), skip], 1))


def _unet_runner(model, x, keep_fraction=0.5):
    """The U-Net under a budget whose torch share has room, at the step's start, between the
    upsampling's working set (in core) and the first conv's (pyooc). keep_fraction=0 offloads every
    saved activation, so that the room is still there when the upsampling decides (kept ones would
    take up to keep_fraction of it first, as the runner intends)."""
    free = (policy.device_bytes(model.up, (4, 16, 32, 32)) + policy.device_bytes(model.enc[0], x.shape)) // 2
    return policy.OutOfCore(model, policy_budget(model, "cuda", free), device="cuda", backend="cuda",
                            keep_fraction=keep_fraction)


def _sgd_losses(model, x, runner=None, steps=3):
    """The losses of `steps` plain SGD steps of model (run through `runner` when given) on x."""
    run = runner or model
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = run(x).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_model_with_a_skip_across_placements(rng):
    torch.manual_seed(int(rng.integers(2**31)))
    ref = _TinyUNet().cuda()
    model = copy.deepcopy(ref)
    x = rand(rng, (4, 16, 64, 64)).float().cuda()
    runner = _unet_runner(model, x, keep_fraction=0.0)
    loss = ref(x).square().mean()
    loss.backward()
    loss2 = runner(x).square().mean()
    loss2.backward()
    assert runner.decisions["enc.0"] == "pyooc" and runner.decisions["up"] == "device", runner.decisions
    assert rel_err(loss2.detach().cpu().numpy(), loss.detach().cpu().numpy()) < 1e-5
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert rel_err(p.grad.cpu().numpy(), q.grad.cpu().numpy()) < 1e-4, name


def test_training_stays_inside_torchs_share_of_the_budget(rng):
    """Three SGD steps of the U-Net under a budget whose torch share is enforced by torch's own
    allocator (set_per_process_memory_fraction, as bench/train_network.py does): the runner counts
    what torch holds (parameters, gradients, the live skip, saved activations, in-core working sets)
    and places layers so that no step runs out of memory, torch's peak stays inside its share, and
    the losses are in-core torch's. The budget leaves room for the small layers only."""
    torch.manual_seed(int(rng.integers(2**31)))
    ref = _TinyUNet().cuda()
    model = copy.deepcopy(ref)
    x = rand(rng, (4, 16, 64, 64)).float().cuda()
    ref_losses = _sgd_losses(ref, x)
    del ref
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    runner = _unet_runner(model, x)
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(runner.torch_budget / total)
    try:
        torch.cuda.reset_peak_memory_stats()
        losses = _sgd_losses(model, x, runner)
        peak = torch.cuda.max_memory_allocated()
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert peak <= runner.torch_budget, (peak, runner.torch_budget)
    assert "pyooc" in runner.decisions.values() and "device" in runner.decisions.values(), runner.decisions
    for step, (a, b) in enumerate(zip(losses, ref_losses)):
        assert abs(a - b) <= 1e-5 * abs(b), f"step {step}: {a} against in-core torch's {b}"
