"""pyooc.torch's drop-in modules and convert(): the same constructor arguments, Parameters and
state_dict keys as torch.nn's; the same outputs and gradients as the torch module (in float64)
given the same state_dict; convert() swapping a model in place without copying; and a small model
trained a few steps on the host backend with torch's losses."""

import copy
import subprocess
import sys

import pytest

from torch_helpers import TOL, rand, torch

import pyooc.torch as pt  # noqa: E402
from conftest import rel_err  # noqa: E402

nn = torch.nn

MODULES = [  # (class name, constructor args, input shape)
    ("Conv1d", (4, 5, 3), dict(stride=2, padding=1), (3, 4, 19)),
    ("Conv2d", (3, 4, 3), dict(padding=1, bias=False), (2, 3, 9, 8)),
    ("Conv2d", (3, 4, (3, 2)), dict(stride=(2, 1), dilation=(1, 2)), (2, 3, 11, 10)),
    ("Conv3d", (2, 3, 3), dict(padding=1), (2, 2, 6, 5, 6)),
    ("Conv2d", (4, 6, 3), dict(padding=1, groups=2), (2, 4, 9, 8)),
    ("Conv3d", (3, 6, 3), dict(padding=1, groups=3), (1, 3, 5, 6, 4)),  # depthwise, two filters per channel
    ("ConvTranspose2d", (4, 6, 3), dict(stride=2, groups=2), (2, 4, 5, 6)),
    ("ConvTranspose1d", (4, 3, 3), dict(stride=2, padding=1, output_padding=1), (3, 4, 19)),
    ("ConvTranspose2d", (3, 4, 3), dict(stride=2), (2, 3, 5, 6)),
    ("ConvTranspose3d", (2, 3, 2), dict(stride=2, bias=False), (2, 2, 3, 4, 3)),
    ("BatchNorm1d", (5,), {}, (16, 5)),
    ("BatchNorm2d", (3,), dict(momentum=0.3), (4, 3, 5, 6)),
    ("BatchNorm3d", (2,), dict(affine=False), (2, 2, 4, 5, 3)),
    ("MaxPool1d", (3,), dict(stride=2, padding=1), (3, 4, 19)),
    ("MaxPool2d", (2,), {}, (2, 3, 10, 8)),
    ("MaxPool3d", ((2, 2, 1),), {}, (2, 2, 6, 4, 5)),
    ("AvgPool1d", (3,), dict(stride=2, padding=1, count_include_pad=False), (3, 4, 19)),
    ("AvgPool2d", (3,), dict(stride=2, padding=1), (2, 3, 10, 8)),
    ("AvgPool3d", (2,), {}, (2, 2, 6, 4, 6)),
    ("ReLU", (), {}, (3, 4, 7, 5)),
    ("ReLU", (), dict(inplace=True), (3, 4, 7, 5)),
    ("ReLU6", (), {}, (3, 4, 7, 5)),
    ("Sigmoid", (), {}, (3, 4, 7, 5)),
    ("Tanh", (), {}, (3, 4, 7, 5)),
    ("ELU", (0.5,), {}, (3, 4, 7, 5)),
    ("GELU", (), {}, (3, 4, 7, 5)),
    ("LeakyReLU", (0.3,), {}, (3, 4, 7, 5)),
    ("SiLU", (), {}, (3, 4, 7, 5)),
    ("Linear", (9, 6), {}, (4, 5, 9)),
    ("Linear", (9, 6), dict(bias=False), (31, 9)),
    ("Softmax", (1,), {}, (5, 7, 3)),
    ("LogSoftmax", (-1,), {}, (5, 7, 3)),
]


def _pair(name, args, kwargs):
    """(torch's module, pyooc's with torch's state_dict loaded) on the host backend."""
    theirs = getattr(nn, name)(*args, **kwargs)
    ours = getattr(pt, name)(*args, **kwargs, backend="host")
    assert isinstance(ours, type(theirs)), "a drop-in is a subclass of torch's module"
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for p in theirs.parameters():  # away from torch's default initialisation, which is easy to match
        with torch.no_grad():
            p.normal_()
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("name,args,kwargs,shape", MODULES)
def test_drop_in_matches_torch(rng, name, args, kwargs, shape, train):
    """pyooc's module in float32 against torch's (same state_dict) in float64: the output, the
    input's and every Parameter's gradient, and the buffers after the step (batch norm's running
    statistics and its batch count)."""
    theirs, ours = _pair(name, args, kwargs)
    if name.startswith("BatchNorm"):
        with torch.no_grad():
            theirs.running_mean.normal_(), theirs.running_var.uniform_(0.5, 1.5)
        ours.load_state_dict(theirs.state_dict())
    ref = copy.deepcopy(theirs).double()
    ours.train(train), ref.train(train)
    x = rand(rng, shape)
    x_ours, x_ref = x.float().requires_grad_(), x.clone().requires_grad_()
    # torch's in-place ReLU may not write a leaf: it gets a copy (its gradient reaches x_ref).
    y, y_ref = ours(x_ours), ref(x_ref.clone() if kwargs.get("inplace") else x_ref)
    assert y.dtype == torch.float32 and y.shape == y_ref.shape
    assert rel_err(y.detach().numpy(), y_ref.detach().numpy()) < TOL, "output"
    dy = rand(rng, tuple(y_ref.shape))
    y.backward(dy.float())
    y_ref.backward(dy)
    assert rel_err(x_ours.grad.numpy(), x_ref.grad.numpy()) < TOL, "input gradient"
    ref_params = dict(ref.named_parameters())
    for pname, p in ours.named_parameters():
        assert p.grad is not None, f"{pname} has no gradient"
        assert rel_err(p.grad.numpy(), ref_params[pname].grad.numpy()) < TOL, f"{pname} gradient"
    ref_buffers = dict(ref.named_buffers())
    for bname, b in ours.named_buffers():
        assert torch.allclose(b.double(), ref_buffers[bname].double(), rtol=1e-5, atol=1e-6), bname
    if name == "ReLU" and kwargs.get("inplace"):
        assert torch.equal(x_ours.detach(), x.float()), "inplace=True computes out of place (documented)"


def test_conv_transpose_output_size(rng):
    theirs, ours = _pair("ConvTranspose2d", (3, 2, 3), dict(stride=2, padding=1))
    x = rand(rng, (1, 3, 5, 5)).float()
    want = theirs(x, output_size=[10, 10])
    got = ours(x, output_size=[10, 10])
    assert got.shape == want.shape == (1, 2, 10, 10)
    assert rel_err(got.detach().numpy(), want.detach().numpy()) < 1e-5


@pytest.mark.parametrize("name,args,kwargs,argument", [
    ("BatchNorm2d", (4,), dict(momentum=None), "momentum"),
    ("MaxPool2d", (2,), dict(ceil_mode=True), "ceil_mode"),
    ("AvgPool2d", (2,), dict(divisor_override=2), "divisor_override"),
    ("GELU", (), dict(approximate="tanh"), "approximate"),
])
def test_unsupported_configuration_raises_at_construction(name, args, kwargs, argument):
    with pytest.raises(NotImplementedError, match=argument):
        getattr(pt, name)(*args, **kwargs)


def _small_net():
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect"),  # padding modes are pyooc's too
        nn.ConvTranspose2d(4, 3, 2, stride=2), nn.Tanh(),
        nn.AvgPool2d(2, ceil_mode=True),  # convert() leaves it torch's
        nn.Flatten(),
        nn.Linear(3 * 4 * 4, 4), nn.LogSoftmax(dim=1))


def test_convert_swaps_in_place_without_copying():
    model = _small_net()
    params = {name: p for name, p in model.named_parameters()}
    buffers = {name: b.data_ptr() for name, b in model.named_buffers()}
    keys = list(model.state_dict())
    modules = dict(model.named_modules())
    assert pt.convert(model, memory_limit="1MiB", backend="host") is model
    assert dict(model.named_modules()) == modules, "the same module objects"
    assert {name: p for name, p in model.named_parameters()} == params
    assert all(a is params[n] for n, a in model.named_parameters()), "the same Parameters"
    assert {name: b.data_ptr() for name, b in model.named_buffers()} == buffers
    assert list(model.state_dict()) == keys
    swapped = {name for name, m in model.named_modules() if isinstance(m, pt.modules._PyoocModule)}
    assert swapped == {"0", "1", "2", "3", "4", "5", "6", "9", "10"}
    assert set(model.pyooc_skipped) == {"7"} and "ceil_mode" in model.pyooc_skipped["7"]
    assert model[0].memory_limit == "1MiB" and model[0].backend == "host"
    pt.set_options(model, memory_limit=None)
    assert model[0].memory_limit is None


def _small_net_for_training(rng):
    torch.manual_seed(int(rng.integers(2**31)))
    return nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(6, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8 * 4 * 4, 4), nn.LogSoftmax(dim=1))


def train_losses(rng, model, ref, steps=6, require_chunks=True):
    """The losses of `steps` SGD steps of model (float32) and ref (float64) on the same synthetic
    batch (the class marks a pixel, so the loss can fall)."""
    x = torch.from_numpy(rng.standard_normal((16, 1, 16, 16)).astype("float32"))
    labels = torch.from_numpy(rng.integers(0, 4, 16))
    x[torch.arange(16), 0, labels * 4, labels * 4] += 4.0
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, ref_losses = [], []
    for _ in range(steps):
        for net, opt_, data, out in ((model, opt, x, losses), (ref, opt_ref, x.double(), ref_losses)):
            opt_.zero_grad()
            loss = nn.functional.nll_loss(net(data), labels)
            loss.backward()
            opt_.step()
            out.append(loss.item())
    if require_chunks:
        assert pyooc_ran_chunked(model, x)
    return losses, ref_losses


def test_small_model_trains_with_torchs_losses(rng):
    """The same network (same seed and data) trained 6 SGD steps in torch float64 and through pyooc
    (float32, host backend, a budget that chunks the layers): the losses agree step by step and the
    loss falls."""
    ref = _small_net_for_training(rng)
    model = pt.convert(copy.deepcopy(ref), memory_limit="64KiB", backend="host")
    losses, ref_losses = train_losses(rng, model, ref.double())
    for step, (a, b) in enumerate(zip(losses, ref_losses)):
        assert abs(a - b) <= 1e-4 * abs(b), f"step {step}: pyooc loss {a}, torch {b}"
    assert losses[-1] < losses[0]


def pyooc_ran_chunked(model, x):
    import pyooc

    with torch.no_grad():
        model[0](x)
    return pyooc.last_stats()["chunks"] > 1


def test_import_pyooc_does_not_import_torch():
    code = "import sys, pyooc; assert 'torch' not in sys.modules, 'import pyooc imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd="/")
