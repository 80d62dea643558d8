"""GPU twins of tests/test_padding_mode.py (marker gpu; skipped without a device): padding_mode on
the cuda backend, every mode x spatial rank x dtype for the forward, backward data and backward
filter against torch's F.pad + convolution in float64, under split budgets; pinned x (the pipeline
gathers it on the host to compute its halo, while w still goes by DMA); and x in device memory
refused, naming padding_mode."""

import numpy as np
import pytest

import pyooc
from conftest import needed_budget
from padding_mode_helpers import CASES, DTYPES, MODES, check_close, random_inputs, torch_reference

pytestmark = pytest.mark.gpu


def _pinned(a):
    p = pyooc.pinned_empty(a.shape, a.dtype)
    p[...] = a
    return p


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned"])
def test_cuda_every_op(rng, mode, case, dtype_name, pinned):
    x_shape, w_shape, geometry = CASES[case]
    dtype, tol = DTYPES[dtype_name]
    x, w, dy = random_inputs(rng, x_shape, w_shape, geometry, dtype)
    if pinned:
        x, w, dy = _pinned(x), _pinned(w), _pinned(dy)
    y_ref, dx_ref, dw_ref = torch_reference(x, w, dy, x_shape, w_shape, geometry, mode)
    common = dict(backend="cuda", padding_mode=mode, **geometry)
    plans = {
        "forward": lambda m: pyooc.plan_conv_forward(x_shape, w_shape, dtype=dtype_name, memory_limit=m,
                                                     pinned=pinned, **common),
        "backward data": lambda m: pyooc.plan_conv_backward_data(dy.shape, w_shape, x_shape, dtype=dtype_name,
                                                                 memory_limit=m, pinned=pinned, **common),
        "backward filter": lambda m: pyooc.plan_conv_backward_filter(x_shape, dy.shape, w_shape, dtype=dtype_name,
                                                                     memory_limit=m, pinned=pinned, **common),
    }
    calls = {
        "forward": (y_ref, lambda m, out: pyooc.conv_forward(x, w, out=out, memory_limit=m, **common)),
        "backward data": (dx_ref, lambda m, out: pyooc.conv_backward_data(dy, w, x_shape, out=out, memory_limit=m,
                                                                          **common)),
        "backward filter": (dw_ref, lambda m, out: pyooc.conv_backward_filter(x, dy, w_shape, out=out,
                                                                              memory_limit=m, **common)),
    }
    for what, (ref, call) in calls.items():
        for limit in (needed_budget(plans[what]), None):
            out = np.full(ref.shape, np.nan, dtype)
            check_close(call(limit, out), ref, tol, f"{mode} {what} on cuda at memory_limit={limit}")
            if pinned and what != "backward data":  # pinned x still takes the host gather (its halo)
                assert pyooc.last_stats()["gather_seconds"] > 0.0, what


@pytest.mark.parametrize("mode", MODES)
def test_cuda_device_x_is_refused(rng, mode):
    torch = pytest.importorskip("torch")
    x, w, _ = random_inputs(rng, (1, 2, 6, 5), (3, 2, 3, 3), dict(padding=1), np.float32)
    xd = torch.from_numpy(x).cuda()
    with pytest.raises(ValueError, match=f"padding_mode='{mode}' needs x in host memory"):
        pyooc.conv_forward(xd, w, padding=1, backend="cuda", padding_mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_cuda_device_arrays_are_refused_by_the_gradients(rng, mode):
    torch = pytest.importorskip("torch")
    x, w, dy = random_inputs(rng, (1, 2, 6, 5), (3, 2, 3, 3), dict(padding=1), np.float32)
    dyd, xd = torch.from_numpy(dy).cuda(), torch.from_numpy(x).cuda()
    with pytest.raises(ValueError, match=f"padding_mode='{mode}' needs dy in host memory"):
        pyooc.conv_backward_data(dyd, w, x.shape, padding=1, backend="cuda", padding_mode=mode)
    with pytest.raises(ValueError, match=f"padding_mode='{mode}' needs x in host memory"):
        pyooc.conv_backward_filter(xd, dy, w.shape, padding=1, backend="cuda", padding_mode=mode)
