"""Shared by the pyooc.torch tests: torch itself (required where scripts/test set
PYOOC_REQUIRE_TORCH=1, as CI does; elsewhere the torch tests skip when torch is absent), and the
comparison of a pyooc computation in float32 against torch's own ops in float64, forward and
backward, at a budget tight enough that pyooc splits the work into chunks."""

import math
import os

import pytest

if os.environ.get("PYOOC_REQUIRE_TORCH") == "1":
    import torch  # noqa: F401  (CI installs the torch extra: a missing torch fails here)
else:
    torch = pytest.importorskip("torch")

import pyooc  # noqa: E402
from conftest import rel_err  # noqa: E402

TOL = 1e-5


def rand(rng, shape, scale=1.0):
    """A float64 tensor of fresh normal values (the float64 reference's copy of an input)."""
    return torch.from_numpy(rng.standard_normal(shape) * scale)


def fresh_copies(inputs, dtype):
    """Leaf copies of inputs (tensors or other arguments) in dtype, requiring grad where the original did."""
    out = []
    for t in inputs:
        if isinstance(t, torch.Tensor):
            c = t.detach().to(dtype).clone()
            out.append(c.requires_grad_(t.requires_grad))
        else:
            out.append(t)
    return out


def forward_backward(fn, inputs, dy):
    """fn(*inputs), then its backward for dy: (output, [grad of each input requiring grad])."""
    y = fn(*inputs)
    grads = []
    if any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
        y.backward(dy.to(y.dtype))
        grads = [t.grad for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    return y, grads


def compare(rng, ours, theirs, inputs, *, tol=TOL, grad_tol=None, budget=True):
    """ours(*float32 inputs, memory_limit=...) against theirs(*float64 inputs): output and every
    input gradient within tol (relative, Frobenius), for a fresh random dy. With budget, pyooc runs
    at a quarter of the working set (doubled until a plan fits) and its forward must have run in
    more than one chunk. Returns pyooc's output."""
    ref_inputs = fresh_copies(inputs, torch.float64)
    ref_y = theirs(*ref_inputs)
    dy = torch.from_numpy(rng.standard_normal(tuple(ref_y.shape)))
    ref_grads = []
    if any(isinstance(t, torch.Tensor) and t.requires_grad for t in ref_inputs):
        ref_y.backward(dy)
        ref_grads = [t.grad for t in ref_inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    working = sum(t.numel() * 4 for t in inputs if isinstance(t, torch.Tensor)) + ref_y.numel() * 4
    limit = max(working // 4, 64) if budget else None
    forward_chunks = []

    def run(*a):
        y = ours(*a, memory_limit=limit)
        forward_chunks.append(pyooc.last_stats()["chunks"])
        return y

    while True:
        try:
            y, grads = forward_backward(run, fresh_copies(inputs, torch.float32), dy)
            break
        except MemoryError:
            if limit is None or limit > 64 * working:
                raise
            limit *= 2
    if budget:
        assert forward_chunks[-1] > 1, f"the forward ran in one chunk at memory_limit={limit}: no split tested"
    assert y.dtype == torch.float32 and y.device.type == "cpu"
    assert tuple(y.shape) == tuple(ref_y.shape), (tuple(y.shape), tuple(ref_y.shape))
    err = rel_err(y.detach().numpy(), ref_y.detach().numpy())
    assert err < tol, f"forward: relative error {err:.3e} >= {tol}"
    grad_tol = tol if grad_tol is None else grad_tol
    assert len(grads) == len(ref_grads)
    for i, (g, ref) in enumerate(zip(grads, ref_grads)):
        assert g is not None and g.dtype == torch.float32, f"gradient {i} missing or not float32"
        err = rel_err(g.numpy(), ref.numpy())
        assert err < grad_tol, f"gradient {i}: relative error {err:.3e} >= {grad_tol}"
    return y


__all__ = ["torch", "TOL", "rand", "compare", "fresh_copies", "forward_backward"]


def policy_budget(model, device, free):
    """A budget for pyooc.torch.policy.OutOfCore (compute_fraction 0.5) under which torch's share
    has `free` bytes free for an in-core layer at a step's start: it adds what torch holds now, the
    gradients the backward will allocate and the runner's margin (a sixteenth of torch's share)."""
    from pyooc.torch import policy
    held = policy.bytes_in_use(device) + policy.gradient_reserve(model, device)
    return 2 * (math.ceil((free + held) * 16 / 15) + 16)
