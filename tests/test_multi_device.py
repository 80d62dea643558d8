"""devices= (and pyooc.set_devices) through the public API, on virtual host devices: a
convolution's chunks spread over several devices give the one-device result (forward and backward
data bit for bit, the reductions over every chunk within float32 rounding, beta applied once);
bad device lists are refused naming the argument. The GPU twins are in tests/test_gpu.py's
multi-device tests (the one GPU listed twice)."""

import numpy as np
import pytest

import pyooc
from conftest import BAD_DEVICE_LISTS, needed_budget, random_problem, rel_err

X, W = (4, 3, 18, 16), (5, 3, 3, 3)
DEVICE_LISTS = [[0, 1], [0, 1, 2], [1, 1], [5, 3, 0, 2]]


def _tight(plan_at, factor=1.3):
    return int(needed_budget(plan_at) * factor)


@pytest.mark.parametrize("devices", DEVICE_LISTS)
def test_forward_and_backward_data_equal_one_device_bit_for_bit(rng, devices):
    x, w, b = random_problem(rng, X, W, bias=True)
    limit = _tight(lambda m: pyooc.plan_conv_forward(X, W, bias=True, padding=1, memory_limit=m, backend="host"))
    one = pyooc.conv_forward(x, w, b, padding=1, memory_limit=limit, backend="host")
    chunks = pyooc.last_stats()["chunks"]
    assert chunks > len(devices)
    spread = pyooc.conv_forward(x, w, b, padding=1, memory_limit=limit, backend="host", devices=devices)
    np.testing.assert_array_equal(spread, one)
    assert pyooc.last_stats()["chunks"] == chunks
    dy = rng.standard_normal(one.shape, dtype=np.float32)
    limit = _tight(lambda m: pyooc.plan_conv_backward_data(dy.shape, W, X, padding=1, memory_limit=m,
                                                           backend="host"))
    np.testing.assert_array_equal(
        pyooc.conv_backward_data(dy, w, X, padding=1, memory_limit=limit, backend="host", devices=devices),
        pyooc.conv_backward_data(dy, w, X, padding=1, memory_limit=limit, backend="host"))


@pytest.mark.parametrize("devices", DEVICE_LISTS)
def test_reductions_split_into_partial_sums(rng, devices):
    """dw and db reduce over every chunk: split over the devices, summed once, beta applied once."""
    x_shape, w_shape = (8, 2, 30, 26), (3, 2, 3, 3)
    x, _, _ = random_problem(rng, x_shape, w_shape)
    dy = rng.standard_normal((8, 3, 28, 24), dtype=np.float32)
    dw_old = rng.standard_normal(w_shape, dtype=np.float32)
    limit = _tight(lambda m: pyooc.plan_conv_backward_filter(x_shape, dy.shape, w_shape, beta=0.5, memory_limit=m,
                                                             backend="host"), 6)
    one = dw_old.copy()
    pyooc.conv_backward_filter(x, dy, w_shape, alpha=0.75, beta=0.5, out=one, memory_limit=limit, backend="host")
    spread = dw_old.copy()
    pyooc.conv_backward_filter(x, dy, w_shape, alpha=0.75, beta=0.5, out=spread, memory_limit=limit, backend="host",
                               devices=devices)
    assert rel_err(spread, one) < 1e-6
    db_old = rng.standard_normal(3, dtype=np.float32)
    limit = _tight(lambda m: pyooc.plan_conv_backward_bias(dy.shape, beta=1.0, memory_limit=m, backend="host"), 6)
    one, spread = db_old.copy(), db_old.copy()
    pyooc.conv_backward_bias(dy, beta=1.0, out=one, memory_limit=limit, backend="host")
    pyooc.conv_backward_bias(dy, beta=1.0, out=spread, memory_limit=limit, backend="host", devices=devices)
    assert rel_err(spread, one) < 1e-6


def test_the_process_default(rng):
    x, w, _ = random_problem(rng, X, W)
    limit = _tight(lambda m: pyooc.plan_conv_forward(X, W, memory_limit=m, backend="host"))
    one = pyooc.conv_forward(x, w, memory_limit=limit, backend="host")
    try:
        pyooc.set_devices([0, 1, 2])
        assert pyooc.get_devices() == (0, 1, 2)
        np.testing.assert_array_equal(pyooc.conv_forward(x, w, memory_limit=limit, backend="host"), one)
        pyooc.set_devices("all")  # every CUDA device; without one, a single device
        np.testing.assert_array_equal(pyooc.conv_forward(x, w, memory_limit=limit, backend="host"), one)
    finally:
        pyooc.set_devices(None)
    assert pyooc.get_devices() is None


@pytest.mark.parametrize("devices,exc,pattern", BAD_DEVICE_LISTS + [
    ([0, 64], ValueError, r"device 64 is out of range for the host backend"),
])
def test_bad_devices_are_refused_naming_them(rng, devices, exc, pattern):
    x, w, _ = random_problem(rng, X, W)
    with pytest.raises(exc, match=pattern):
        pyooc.conv_forward(x, w, backend="host", devices=devices)
    with pytest.raises((ValueError, TypeError)):
        pyooc.set_devices("some")


def _layer_calls(rng):
    """(name, call(memory_limit)) of every other operation, on inputs drawn once."""
    x = rng.standard_normal((4, 6, 40, 36), dtype=np.float32)
    y = pyooc.pool_forward(x, 2, backend="host")
    dy_pool = rng.standard_normal(y.shape, dtype=np.float32)
    a, b = rng.standard_normal((140, 90), dtype=np.float32), rng.standard_normal((90, 120), dtype=np.float32)
    w, bias = rng.standard_normal((5, 6, 3, 3), dtype=np.float32) / 8, rng.standard_normal(5, dtype=np.float32)
    wt = rng.standard_normal((6, 4, 3, 3), dtype=np.float32) / 8
    scale, shift = rng.standard_normal(6, dtype=np.float32), rng.standard_normal(6, dtype=np.float32)
    running = (rng.standard_normal(6, dtype=np.float32), 0.5 + rng.random(6, dtype=np.float32))
    h = dict(backend="host")

    def bn_training(m):
        """y, the saved statistics and the running averages it updated, as one array."""
        mean, var = running[0].copy(), running[1].copy()
        outs = pyooc.batchnorm_forward_training(x, scale, shift, running_mean=mean, running_var=var, memory_limit=m, **h)
        return np.concatenate([r.ravel() for r in (*outs, mean, var)])

    return [
        ("pool_forward", lambda m: pyooc.pool_forward(x, 3, stride=2, padding=1, memory_limit=m, **h)),
        ("pool_backward", lambda m: pyooc.pool_backward(y, dy_pool, x, 2, memory_limit=m, **h)),
        ("activation_forward", lambda m: pyooc.activation_forward(x, "gelu", memory_limit=m, **h)),
        ("activation_backward", lambda m: pyooc.activation_backward(x, x, x, "elu", coef=0.5, memory_limit=m, **h)),
        ("softmax_forward", lambda m: pyooc.softmax_forward(x, log=True, memory_limit=m, **h)),
        ("add_tensor", lambda m: pyooc.add_tensor(scale.reshape(1, 6, 1, 1), x, memory_limit=m, **h)),
        ("matmul", lambda m: pyooc.matmul(a, b, memory_limit=m, **h)),
        ("conv_bias_activation_forward", lambda m: pyooc.conv_bias_activation_forward(x, w, bias, padding=1,
                                                                                      memory_limit=m, **h)),
        ("deconv_bias_activation_forward", lambda m: pyooc.deconv_bias_activation_forward(
            x, wt, None, activation="identity", stride=2, memory_limit=m, **h)),
        # Batch norm: every device's statistics pass, one float64 merge, every device's apply pass.
        ("batchnorm_forward_training", bn_training),
        ("batchnorm_forward_inference", lambda m: pyooc.batchnorm_forward_inference(
            x, scale, shift, running[0], running[1], memory_limit=m, **h)),
        ("batchnorm_backward", lambda m: np.concatenate([r.ravel() for r in pyooc.batchnorm_backward(
            x, x[:, ::-1].copy(), scale, running[0], 1 / np.sqrt(running[1]), memory_limit=m, **h)])),
    ]


@pytest.mark.parametrize("index", range(12))
def test_every_other_operation_under_set_devices(rng, index):
    """Layers, matmul, batch norm and the fused forward forms spread too (their chunks write
    disjoint tiles; batch norm merges every device's statistics once): bit for bit the one-device
    result."""
    name, call = _layer_calls(rng)[index]
    limit = 64 << 10
    one = call(limit)
    chunks = pyooc.last_stats()["chunks"]
    assert chunks > 3, f"{name}: {chunks} chunks, nothing to spread"
    try:
        pyooc.set_devices([0, 1, 2])
        spread = call(limit)
    finally:
        pyooc.set_devices(None)
    np.testing.assert_array_equal(spread, one, err_msg=name)
    assert pyooc.last_stats()["chunks"] == chunks, name


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-6), (np.float16, 1e-3)])
def test_devices_with_groups_padding_and_half_precision(rng, dtype, tol):
    """The features combine: a grouped, 'same'-padded convolution in float32 and float16, spread
    over three virtual devices, gives the one-device result (dw: the float32 partial sums of each
    device, converted once)."""
    x = rng.standard_normal((6, 6, 24, 22)).astype(dtype)
    w = (rng.standard_normal((9, 2, 2, 3)) / 4).astype(dtype)
    geometry = dict(padding="same", groups=3, backend="host")
    limit = _tight(lambda m: pyooc.plan_conv_forward(x.shape, w.shape, dtype=np.dtype(dtype).name, memory_limit=m,
                                                     **geometry))
    one = pyooc.conv_forward(x, w, memory_limit=limit, **geometry)
    spread = pyooc.conv_forward(x, w, memory_limit=limit, devices=[0, 1, 2], **geometry)
    np.testing.assert_array_equal(spread, one)
    dy = rng.standard_normal(one.shape).astype(dtype)
    limit = 6 * _tight(lambda m: pyooc.plan_conv_backward_filter(x.shape, dy.shape, w.shape,
                                                                 dtype=np.dtype(dtype).name, memory_limit=m,
                                                                 **geometry), 1)
    dw_one = pyooc.conv_backward_filter(x, dy, w.shape, memory_limit=limit, **geometry)
    dw_spread = pyooc.conv_backward_filter(x, dy, w.shape, memory_limit=limit, devices=[0, 1, 2], **geometry)
    assert dw_spread.dtype == dtype
    assert rel_err(dw_spread.astype(np.float64), dw_one.astype(np.float64)) < tol
