"""pyooc.torch.policy on the CPU: the placement decisions and the shapes they rest on, the
saved-tensor offloader's round trip (bitwise the same gradients, every offloaded tensor fetched
back once, most of them ahead of need), and a whole model run under one budget (some layers in
core, some through pyooc on the host backend) with torch's loss and gradients. The CUDA twins
(streams, pinned memory, the cuda backend) are in test_torch_gpu.py."""

import copy

import pytest

from test_torch_modules import MODULES
from torch_helpers import policy_budget, rand, torch

import pyooc.torch as pt  # noqa: E402
from pyooc.torch import policy  # noqa: E402
from conftest import rel_err  # noqa: E402

nn = torch.nn


@pytest.mark.parametrize("name,args,kwargs,shape", MODULES)
def test_output_shape_is_torchs(name, args, kwargs, shape):
    module = getattr(nn, name)(*args, **kwargs)
    with torch.no_grad():
        want = module(torch.zeros(shape)).shape
    assert policy.output_shape(module, shape) == list(want)


def test_decide_by_the_layers_device_bytes():
    conv = nn.Conv2d(8, 16, 3, padding=1)
    x_shape = (4, 8, 32, 32)
    need = 4 * (2 * (4 * 8 * 32 * 32 + 4 * 16 * 32 * 32) + 2 * (16 * 8 * 9 + 16))
    assert policy.device_bytes(conv, x_shape) == need
    assert policy.decide(conv, x_shape, need) == "device"
    assert policy.decide(conv, x_shape, need - 1) == "pyooc"


def _net():
    # No bias before the batch norm: its gradient is zero, and a relative error of rounding noise.
    return nn.Sequential(nn.Conv2d(2, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(6, 6, 3, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(6 * 8 * 8, 3))


def _grads(model, x, hooks=None):
    model.zero_grad()
    if hooks is None:
        loss = model(x).square().sum()
    else:
        with hooks:
            loss = model(x).square().sum()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("budget,prefetch", [(0, 2), (0, 0), (20_000, 1)])
def test_offloader_round_trip_is_exact(rng, budget, prefetch):
    torch.manual_seed(int(rng.integers(2**31)))
    model = _net()
    x = rand(rng, (4, 2, 16, 16)).float()
    loss, grads = _grads(model, x)
    off = policy.SavedTensorOffloader(budget, "cpu", prefetch=prefetch)
    loss2, grads2 = _grads(model, x, off.hooks())
    assert torch.equal(loss, loss2)
    assert all(torch.equal(a, b) for a, b in zip(grads, grads2)), "the offloaded tensors came back changed"
    s = off.stats
    assert s["offloaded"] > 0
    assert s["prefetched"] + s["fetched_on_demand"] >= s["offloaded"], "an offloaded tensor never came back"
    if budget:
        assert s["kept"] > 0 and off.resident <= budget
    if prefetch:
        assert s["prefetched"] > s["fetched_on_demand"], f"most tensors should arrive ahead of need: {dict(s)}"
    else:
        assert s["prefetched"] == 0
    assert s["deduplicated"] > 0, "a layer's output saved again as the next layer's input is packed once"


def test_out_of_core_runs_the_model_under_one_budget(rng):
    """A budget between the layers' sizes: the big early layers go through pyooc (host backend),
    the small late ones run in core; losses and gradients are torch's; the model object, its
    Parameters and its state_dict are unchanged, and release() restores torch's classes."""
    torch.manual_seed(int(rng.integers(2**31)))
    ref = _net()
    model = copy.deepcopy(ref)
    x = rand(rng, (4, 2, 16, 16)).float()
    params = list(model.parameters())
    keys = list(model.state_dict())
    # conv 2 fits what torch's share has free, conv 1 does not
    runner = policy.OutOfCore(model, policy_budget(model, "cpu", policy.device_bytes(model[4], (4, 6, 8, 8))),
                              device="cpu", backend="host")
    assert list(model.parameters()) == params and list(model.state_dict()) == keys
    for step in range(3):
        loss, grads = _grads(ref, x)
        model.zero_grad()
        loss2 = runner(x).square().sum()
        loss2.backward()
        # The ReLU's kink and the max pool's near-ties route a gradient by the sign or order of a
        # rounded activation, and pyooc's float32 rounds differently from torch's: over 300 seeds
        # (3 steps each) the parameter gradients differed by up to 3.2e-5 of their norm, where
        # torch's own float32 differs from float64 by up to 1.2e-3, and the losses of later steps,
        # taken after SGD steps on those gradients, by up to 1.3e-5. A misplaced or lost gradient
        # is off by O(1).
        assert rel_err(loss2.detach().numpy(), loss.numpy()) < (1e-5 if step == 0 else 1e-4)
        for p, g in zip(model.parameters(), grads):
            assert rel_err(p.grad.numpy(), g.numpy()) < 1e-4
        with torch.no_grad():  # one SGD step on both, so the next step starts from new weights
            for a, b in zip(model.parameters(), ref.parameters()):
                a -= 0.01 * a.grad
                b -= 0.01 * b.grad
    assert runner.decisions["0"] == "pyooc" and runner.decisions["4"] == "device", runner.decisions
    assert set(runner.decisions.values()) == {"device", "pyooc"}
    for (name, a), b in zip(model.named_buffers(), ref.buffers()):  # the Parameters' drift is bounded above
        assert torch.allclose(a.double(), b.double(), rtol=1e-4, atol=1e-6), f"running statistics copied back: {name}"
    runner.release()
    assert type(model[0]) is nn.Conv2d and type(model[1]) is nn.BatchNorm2d


def test_out_of_core_refuses_a_bad_budget():
    with pytest.raises(ValueError, match="budget"):
        policy.OutOfCore(_net(), 0, device="cpu")
    for name, values in (("compute_fraction", (0.0, 1.0)), ("keep_fraction", (-0.1, 1.0))):
        for value in values:
            with pytest.raises(ValueError, match=name):
                policy.OutOfCore(_net(), "1MiB", device="cpu", **{name: value})
    policy.OutOfCore(_net(), "1MiB", device="cpu", keep_fraction=0.0)  # every saved activation offloaded


def _free_for_conv_2(model):
    return policy_budget(model, "cpu", policy.device_bytes(model[4], (4, 6, 8, 8)))


def test_placement_counts_what_torch_holds_now(rng, monkeypatch):
    """The same budget and input: conv 2 runs in core while torch's share is empty, through pyooc
    once torch holds part of its share (live activations, another model's tensors)."""
    model = _net()
    x = rand(rng, (4, 2, 16, 16)).float()
    runner = policy.OutOfCore(model, _free_for_conv_2(model), device="cpu", backend="host")
    runner(x).sum().backward()
    assert runner.decisions["4"] == "device", runner.decisions
    model.zero_grad()
    # Held: enough that conv 2 (27,216 bytes) no longer fits, the linear layer (21,624) still does.
    held = policy.device_bytes(model[4], (4, 6, 8, 8)) - 24_000
    monkeypatch.setattr(policy, "bytes_in_use", lambda device: held)
    runner(x).sum().backward()
    assert runner.decisions["4"] == "pyooc" and runner.decisions["7"] == "device", runner.decisions


def test_keep_budget_is_what_torch_share_leaves(rng, monkeypatch):
    """Saved activations stay on the device up to keep_fraction of the room torch's share has at
    the step's start, after what it holds, the gradients to come and the margin; none when full."""
    model = _net()
    x = rand(rng, (4, 2, 16, 16)).float()
    runner = policy.OutOfCore(model, "1MiB", device="cpu", backend="host", keep_fraction=0.25)
    held = 100_000
    monkeypatch.setattr(policy, "bytes_in_use", lambda device: held)
    grads = sum(p.numel() * 4 for p in model.parameters())
    assert policy.gradient_reserve(model, "cpu") == grads
    runner(x).sum().backward()
    room = runner.torch_budget - held - grads - runner.margin
    assert runner.offloader.budget == int(room * 0.25)
    assert runner.offloader.resident <= runner.offloader.budget
    assert policy.gradient_reserve(model, "cpu") == 0, "the backward made every gradient"
    held = runner.torch_budget
    runner(x).sum().backward()
    assert runner.offloader.budget == 0 and runner.offloader.stats["kept"] == 0


def test_in_core_out_of_memory_runs_the_layer_through_pyooc(rng, monkeypatch):
    """A layer placed in core whose torch forward still runs out of device memory runs through
    pyooc instead, with torch's result and gradients."""
    torch.manual_seed(int(rng.integers(2**31)))
    ref = _net()
    model = copy.deepcopy(ref)
    x = rand(rng, (4, 2, 16, 16)).float()
    runner = policy.OutOfCore(model, "64MiB", device="cpu", backend="host")

    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(nn.Conv2d, "forward", out_of_memory)
    loss2 = runner(x).square().sum()
    loss2.backward()
    monkeypatch.undo()
    loss, grads = _grads(ref, x)
    assert runner.decisions["0"] == runner.decisions["4"] == "pyooc (in core ran out of memory)", runner.decisions
    assert runner.decisions["7"] == "device"
    assert rel_err(loss2.detach().numpy(), loss.numpy()) < 1e-5
    for p, g in zip(model.parameters(), grads):
        assert rel_err(p.grad.numpy(), g.numpy()) < 1e-5
