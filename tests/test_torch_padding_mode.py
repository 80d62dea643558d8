"""pyooc.torch's Conv1d/2d/3d with padding_mode: drop-in equivalence with torch's modules (the
same state_dict; output and the gradients of input, weight and bias against torch's module in
float64) under a budget that splits the work, and the functional forms' padding_mode keyword
against torch's F.pad + convolution."""

import pytest

from torch_helpers import compare, rand, torch

import pyooc  # noqa: E402
import pyooc.torch as pt  # noqa: E402
from conftest import rel_err  # noqa: E402
from padding_mode_helpers import MODES  # noqa: E402

nn = torch.nn
F = torch.nn.functional

MODULES = [  # (class name, constructor args, keyword arguments, input shape)
    ("Conv1d", (3, 4, 3), dict(stride=2, padding=2), (2, 3, 21)),
    ("Conv2d", (4, 6, (3, 2)), dict(padding=(2, 1), dilation=(1, 2), groups=2), (2, 4, 10, 9)),
    ("Conv2d", (3, 4, 4), dict(padding="same", bias=False), (2, 3, 9, 8)),
    ("Conv3d", (2, 3, 3), dict(padding=1), (1, 2, 5, 6, 4)),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,args,kwargs,shape", MODULES)
def test_module_matches_torchs(rng, mode, name, args, kwargs, shape):
    torch.manual_seed(int(rng.integers(2**31)))
    theirs = getattr(nn, name)(*args, padding_mode=mode, **kwargs)
    ours = getattr(pt, name)(*args, padding_mode=mode, backend="host", **kwargs)
    ours.load_state_dict(theirs.state_dict())
    theirs = theirs.double()
    x = rand(rng, shape)
    x64, x32 = x.clone().requires_grad_(), x.float().requires_grad_()
    ref = theirs(x64)
    dy = rand(rng, tuple(ref.shape))
    ref.backward(dy)
    working = 4 * (x.numel() + ref.numel() + sum(p.numel() for p in ours.parameters()))
    ours.memory_limit = working // 4
    while True:
        try:
            y = ours(x32)
            break
        except MemoryError:
            ours.memory_limit *= 2
    assert pyooc.last_stats()["chunks"] > 1, "the forward ran in one chunk: no split tested"
    y.backward(dy.float())
    assert rel_err(y.detach().numpy(), ref.detach().numpy()) < 1e-5
    assert rel_err(x32.grad.numpy(), x64.grad.numpy()) < 1e-5, "input gradient"
    for (pname, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert rel_err(p.grad.numpy(), q.grad.numpy()) < 1e-5, pname


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_functional_padding_mode(rng, mode, spatial):
    shape = {1: (2, 3, 17), 2: (2, 3, 9, 7), 3: (1, 3, 5, 6, 4)}[spatial]
    w_shape = (4, 3) + (3,) * spatial
    x, w, b = rand(rng, shape).requires_grad_(), rand(rng, w_shape, 0.3).requires_grad_(), rand(rng, (4,))
    b.requires_grad_()
    ours_fn, theirs_fn = getattr(pt.functional, f"conv{spatial}d"), getattr(F, f"conv{spatial}d")
    padding = (2, 1, 2)[:spatial]
    pads = tuple(p for d in reversed(range(spatial)) for p in (padding[d], padding[d]))  # F.pad: last dim first
    compare(rng, lambda x, w, b, memory_limit: ours_fn(x, w, b, 1, padding, padding_mode=mode,
                                                       memory_limit=memory_limit, backend="host"),
            lambda x, w, b: theirs_fn(F.pad(x, pads, mode=mode), w, b), [x, w, b])


def test_functional_refuses_a_bad_padding_mode(rng):
    x, w = rand(rng, (1, 2, 6, 5)).float(), rand(rng, (3, 2, 3, 3)).float()
    with pytest.raises(ValueError, match=r"padding_mode must be one of .* but got padding_mode='symmetric'"):
        pt.functional.conv2d(x, w, padding=1, padding_mode="symmetric", backend="host")
    with pytest.raises(ValueError, match="padding_mode='reflect': Padding size should be less than"):
        pt.functional.conv2d(x, w, padding=5, padding_mode="reflect", backend="host")
