"""pyooc.torch's devices=: the functional forms, the drop-in modules and convert() spread their
calls over (here virtual host) devices, forward and backward alike, with the one-device results
(the convolution's output and dx, batch norm's every output bit for bit; dw within float32
rounding of its partial sums); devices=None takes pyooc's process default when the layer runs;
bad lists are refused naming the argument. The numpy-level spreading itself:
tests/test_multi_device.py."""

import numpy as np
import pytest

from torch_helpers import torch

import pyooc  # noqa: E402
import pyooc._call_args  # noqa: E402
import pyooc.torch as pt  # noqa: E402
import pyooc.torch.functional as F  # noqa: E402
from conftest import BAD_DEVICE_LISTS, rel_err  # noqa: E402

LIMIT = 64 << 10  # splits every call below into many chunks
HOST = dict(memory_limit=LIMIT, backend="host")


@pytest.fixture
def resolved(monkeypatch):
    """The devices each pyooc call of the test resolved (pyooc's CallOptions.devices), in order."""
    seen = []
    original = pyooc._call_args.call_devices

    def recording(devices):
        chosen = original(devices)
        seen.append(chosen)
        return chosen

    monkeypatch.setattr(pyooc._call_args, "call_devices", recording)
    return seen


def _leaf(rng, shape, scale=1.0):
    return torch.from_numpy((rng.standard_normal(shape) * scale).astype(np.float32)).requires_grad_()


def _conv_and_grads(x, w, b, dy, **kw):
    x, w, b = (t.detach().clone().requires_grad_() for t in (x, w, b))
    y = F.conv2d(x, w, b, padding=1, **kw)
    chunks = pyooc.last_stats()["chunks"]
    y.backward(dy)
    return (y.detach(), x.grad, w.grad, b.grad), chunks


@pytest.mark.parametrize("devices", [[0, 1], [0, 1, 2], [2, 2]])
def test_conv2d_forward_and_backward_spread(rng, resolved, devices):
    x, w, b = _leaf(rng, (4, 6, 40, 36)), _leaf(rng, (8, 6, 3, 3), 0.2), _leaf(rng, (8,))
    dy = torch.from_numpy(rng.standard_normal((4, 8, 40, 36)).astype(np.float32))
    one, chunks = _conv_and_grads(x, w, b, dy, **HOST)
    assert chunks > 2 * len(devices)
    del resolved[:]
    spread, _ = _conv_and_grads(x, w, b, dy, devices=devices, **HOST)
    # The forward and the one fused backward call (dx, dw, db) that the autograd formula makes.
    assert len(resolved) == 2 and all(r == tuple(devices) for r in resolved), \
        f"forward and gradients given {devices}: {resolved}"
    torch.testing.assert_close(spread[0], one[0], rtol=0, atol=0)
    torch.testing.assert_close(spread[1], one[1], rtol=0, atol=0)
    assert rel_err(spread[2].numpy(), one[2].numpy()) < 1e-6
    assert rel_err(spread[3].numpy(), one[3].numpy()) < 1e-6


def _batch_norm_run(x, weight, bias, dy, **kw):
    x, weight, bias = (t.detach().clone().requires_grad_() for t in (x, weight, bias))
    mean, var = torch.full((5,), 0.25), torch.full((5,), 2.0)
    y = F.batch_norm(x, mean, var, weight, bias, training=True, momentum=0.2, **kw)
    y.backward(dy)
    return [y.detach(), mean, var, x.grad, weight.grad, bias.grad]


def test_batch_norm_training_spreads_bit_for_bit(rng, resolved):
    x, weight, bias = _leaf(rng, (6, 5, 40, 36), 2.0), _leaf(rng, (5,)), _leaf(rng, (5,))
    dy = torch.from_numpy(rng.standard_normal((6, 5, 40, 36)).astype(np.float32))
    one = _batch_norm_run(x, weight, bias, dy, **HOST)
    assert pyooc.last_stats()["chunks"] > 6, "the backward's two passes over many chunks"
    del resolved[:]
    spread = _batch_norm_run(x, weight, bias, dy, devices=[1, 0, 2], **HOST)
    assert resolved and all(r == (1, 0, 2) for r in resolved), resolved
    for ours, theirs in zip(spread, one):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_modules_and_convert_carry_devices(rng, resolved):
    def model():
        torch.manual_seed(5)
        return torch.nn.Sequential(torch.nn.Conv2d(6, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU())

    x = torch.from_numpy(rng.standard_normal((4, 6, 40, 36)).astype(np.float32))
    one_model, spread_model = pt.convert(model(), **HOST), pt.convert(model(), devices=[0, 1], **HOST)
    assert all(m.devices is None for m in one_model)
    assert all(m.devices == [0, 1] for m in spread_model)
    assert "devices=[0, 1]" in repr(spread_model[0])
    one = one_model(x)
    del resolved[:]
    spread = spread_model(x)
    assert len(resolved) == 3 and all(r == (0, 1) for r in resolved), resolved
    torch.testing.assert_close(spread, one, rtol=0, atol=0)
    for name, value in one_model.state_dict().items():
        torch.testing.assert_close(spread_model.state_dict()[name], value, rtol=0, atol=0, msg=name)
    pt.set_options(spread_model, devices="all")  # without a GPU: one device
    assert all(m.devices == [0] for m in spread_model)
    pt.set_options(spread_model, devices=None)
    assert all(m.devices is None for m in spread_model)
    conv = pt.Conv2d(6, 8, 3, padding=1, devices=[1, 2], **HOST)
    assert conv.devices == [1, 2]
    del resolved[:]
    conv(x)
    assert resolved == [(1, 2)]


def test_devices_none_takes_the_process_default_when_the_layer_runs(rng, resolved):
    x, w = _leaf(rng, (2, 3, 12, 10)), _leaf(rng, (4, 3, 3, 3))
    conv = pt.Conv2d(3, 4, 3, **HOST)
    assert conv.devices is None
    try:
        pyooc.set_devices([0, 2])
        del resolved[:]
        F.conv2d(x, w, **HOST)
        conv(x)
    finally:
        pyooc.set_devices(None)
    assert resolved == [(0, 2), (0, 2)]
    del resolved[:]
    F.conv2d(x, w, **HOST)
    assert resolved == [()]


@pytest.mark.parametrize("devices,exc,pattern", BAD_DEVICE_LISTS)
def test_bad_devices_are_refused_naming_them(rng, devices, exc, pattern):
    x, w = _leaf(rng, (2, 3, 8, 8)), _leaf(rng, (4, 3, 3, 3))
    with pytest.raises(exc, match=pattern):
        F.conv2d(x, w, devices=devices, **HOST)
    with pytest.raises(exc, match=pattern):
        pt.Conv2d(3, 4, 3, devices=devices)
    with pytest.raises(exc, match=pattern):
        pt.convert(torch.nn.Sequential(torch.nn.ReLU()), devices=devices)
    with pytest.raises(ValueError, match=r"device 64 is out of range for the host backend"):
        F.relu(x, devices=[0, 64], **HOST)


def test_devices_appear_in_the_signatures():
    import inspect
    for name in F.__all__:
        parameter = inspect.signature(getattr(F, name)).parameters["devices"]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.default is None, name


@pytest.mark.parametrize("backend", [None, "gpu", "host@x", "@0,1"])
def test_a_backend_that_carries_no_known_name_is_refused(rng, backend):
    """The devices ride in the backend string: a malformed one is still refused naming backend."""
    with pytest.raises(ValueError, match=r"backend must be one of"):
        F.relu(_leaf(rng, (2, 3, 4, 4)), backend=backend)
