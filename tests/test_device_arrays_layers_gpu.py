"""Device-resident arrays in batch norm, matmul/linear and the fused functions (marked gpu; skipped
without one): torch CUDA tensors read and written in place, batch norm's per-channel vectors on
the device too (libooc copies them to the host and back), mixed with host arrays, whole and split
by small budgets, into NaN-poisoned device out= arrays, against float64 references; and the half
gradients reduced in float32 (dw, db) written into device arrays."""

import numpy as np
import pytest

import pyooc
from conftest import rel_err
from test_device_arrays_gpu import TOL, _ref, cuda_torch, host, on_device, poisoned_device  # noqa: F401

torch = pytest.importorskip("torch")
F = torch.nn.functional
pytestmark = pytest.mark.gpu

SHAPE = (4, 12, 40, 43)  # 330 KB of float32: budgets of 200 KiB split it


def _bn_data(rng):
    x = (rng.standard_normal(SHAPE) * 2 + 1).astype(np.float32)
    scale, bias = rng.standard_normal(12).astype(np.float32), rng.standard_normal(12).astype(np.float32)
    mean, var = rng.standard_normal(12).astype(np.float32), (rng.random(12) + 0.5).astype(np.float32)
    return x, scale, bias, mean, var


@pytest.mark.parametrize("vectors_on", ["device", "host"])
@pytest.mark.parametrize("memory_limit", [None, "200KiB"], ids=["whole", "split"])
def test_batch_norm_training_reads_and_updates_device_arrays(rng, vectors_on, memory_limit):
    x, scale, bias, mean, var = _bn_data(rng)
    put = on_device if vectors_on == "device" else (lambda a: a.copy())
    running_mean, running_var = put(mean), put(var)
    y = poisoned_device(SHAPE)
    got, saved_mean, saved_invstd = pyooc.batchnorm_forward_training(
        on_device(x), put(scale), put(bias), momentum=0.1, running_mean=running_mean, running_var=running_var,
        out=y, memory_limit=memory_limit)
    assert got is y
    ref_mean, ref_var = _ref(mean).clone(), _ref(var).clone()
    ref = F.batch_norm(_ref(x), ref_mean, ref_var, _ref(scale), _ref(bias), training=True, momentum=0.1)
    assert rel_err(host(y), ref.numpy()) < 1e-5
    assert rel_err(saved_mean, _ref(x).mean(dim=(0, 2, 3)).numpy()) < 1e-5
    ref_invstd = 1 / np.sqrt(_ref(x).var(dim=(0, 2, 3), unbiased=False).numpy() + 1e-5)
    assert rel_err(saved_invstd, ref_invstd) < 1e-5
    got_rm = host(running_mean) if vectors_on == "device" else running_mean
    got_rv = host(running_var) if vectors_on == "device" else running_var
    assert rel_err(got_rm, ref_mean.numpy()) < 1e-5 and rel_err(got_rv, ref_var.numpy()) < 1e-5


@pytest.mark.parametrize("memory_limit", [None, "200KiB"], ids=["whole", "split"])
def test_batch_norm_inference_and_backward_take_device_arrays(rng, memory_limit):
    x, scale, bias, mean, var = _bn_data(rng)
    xd = on_device(x)
    y = poisoned_device(SHAPE)
    pyooc.batchnorm_forward_inference(xd, on_device(scale), on_device(bias), on_device(mean), on_device(var), out=y,
                                      memory_limit=memory_limit)
    ref = F.batch_norm(_ref(x), _ref(mean), _ref(var), _ref(scale), _ref(bias), training=False)
    assert rel_err(host(y), ref.numpy()) < 1e-5

    dy = rng.standard_normal(SHAPE).astype(np.float32)
    _, saved_mean, saved_invstd = pyooc.batchnorm_forward_training(x, scale, bias)
    dx = poisoned_device(SHAPE)
    got_dx, dscale, dbias = pyooc.batchnorm_backward(xd, on_device(dy), on_device(scale), on_device(saved_mean),
                                                     on_device(saved_invstd), out=dx, memory_limit=memory_limit)
    assert got_dx is dx and isinstance(dscale, np.ndarray)
    xt, st, bt = (_ref(a).requires_grad_() for a in (x, scale, bias))
    F.batch_norm(xt, None, None, st, bt, training=True).backward(_ref(dy))
    assert rel_err(host(dx), xt.grad.numpy()) < 1e-4
    assert rel_err(dscale, st.grad.numpy()) < 1e-5 and rel_err(dbias, bt.grad.numpy()) < 1e-5
    assert np.array_equal(host(xd), x)  # inputs are never written


def test_half_batch_norm_on_the_device(rng):
    x, scale, bias, mean, var = _bn_data(rng)
    xh = x.astype(np.float16)
    y = poisoned_device(SHAPE, torch.float16)
    pyooc.batchnorm_forward_training(on_device(xh), on_device(scale), on_device(bias), out=y, memory_limit="100KiB")
    ref = F.batch_norm(_ref(xh), None, None, _ref(scale), _ref(bias), training=True)
    assert rel_err(host(y), ref.numpy()) < TOL[np.float16]


def test_batch_norm_refuses_a_read_only_device_running_mean(rng):
    x, scale, bias, mean, var = _bn_data(rng)
    t = on_device(mean)

    class ReadOnly:
        __cuda_array_interface__ = dict(t.__cuda_array_interface__, data=(t.data_ptr(), True))

    with pytest.raises(TypeError, match="running_mean must be a writable C-contiguous float32 array"):
        pyooc.batchnorm_forward_training(x, scale, bias, running_mean=ReadOnly(), running_var=on_device(var))


@pytest.mark.parametrize("memory_limit", [None, "64KiB"], ids=["whole", "split"])
def test_matmul_and_linear_read_and_write_device_arrays(rng, memory_limit):
    a = rng.standard_normal((150, 90)).astype(np.float32)
    b = rng.standard_normal((90, 70)).astype(np.float32)
    out = poisoned_device((150, 70))
    assert pyooc.matmul(on_device(a), on_device(b), out=out, memory_limit=memory_limit) is out
    assert rel_err(host(out), _ref(a).numpy() @ _ref(b).numpy()) < TOL[np.float32]
    c = on_device(a[:, :70].copy())  # beta reads out on the device
    pyooc.matmul(on_device(a), b, alpha=0.5, beta=2.0, out=c, memory_limit=memory_limit)
    assert rel_err(host(c), 0.5 * (_ref(a) @ _ref(b)).numpy() + 2.0 * a[:, :70]) < TOL[np.float32]

    w = rng.standard_normal((70, 90)).astype(np.float32)
    bias = rng.standard_normal(70).astype(np.float32)
    y = pyooc.linear_forward(on_device(a), on_device(w), on_device(bias), memory_limit=memory_limit)
    assert isinstance(y, np.ndarray)  # a fresh result: a host array
    assert rel_err(y, F.linear(_ref(a), _ref(w), _ref(bias)).numpy()) < TOL[np.float32]
    dy = rng.standard_normal((150, 70)).astype(np.float32)
    dx, dw, db = pyooc.linear_backward(on_device(a), on_device(w), on_device(dy), memory_limit=memory_limit)
    xt, wt, bt = (_ref(v).requires_grad_() for v in (a, w, bias))
    F.linear(xt, wt, bt).backward(_ref(dy))
    for got, want in ((dx, xt.grad), (dw, wt.grad), (db, bt.grad)):
        assert rel_err(got, want.numpy()) < 1e-5


def _conv_data(rng):
    x = rng.standard_normal((4, 16, 40, 43)).astype(np.float32)
    w = (rng.standard_normal((12, 16, 3, 3)) / 12).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    return x, w, b


@pytest.mark.parametrize("memory_limit", [None, "400KiB"], ids=["whole", "split"])
def test_fused_forwards_read_and_write_device_arrays(rng, memory_limit):
    x, w, b = _conv_data(rng)
    z = rng.standard_normal((4, 12, 40, 43)).astype(np.float32)
    pre = F.conv2d(_ref(x), _ref(w), _ref(b), padding=1) + 0.5 * _ref(z)
    y = poisoned_device((4, 12, 40, 43))
    got = pyooc.conv_bias_activation_forward(on_device(x), on_device(w), on_device(b), activation="tanh",
                                             z=on_device(z), alpha2=0.5, padding=1, out=y, memory_limit=memory_limit)
    assert got is y and rel_err(host(y), torch.tanh(pre).numpy()) < TOL[np.float32]
    in_place = on_device(z)  # out= z itself: y replaces z on the device
    pyooc.conv_bias_activation_forward(on_device(x), w, b, activation="tanh", z=in_place, alpha2=0.5, padding=1,
                                       out=in_place, memory_limit=memory_limit)
    assert rel_err(host(in_place), torch.tanh(pre).numpy()) < TOL[np.float32]
    q = poisoned_device((4, 12, 20, 21))
    pyooc.conv_bias_activation_pooling_forward(on_device(x), on_device(w), on_device(b), pool_kernel=2,
                                               pool_mode="max", activation="relu", padding=1, out=q,
                                               memory_limit=memory_limit)
    ref_q = F.max_pool2d(torch.relu(F.conv2d(_ref(x), _ref(w), _ref(b), padding=1)), 2)
    assert rel_err(host(q), ref_q.numpy()) < TOL[np.float32]
    wt = (rng.standard_normal((16, 6, 3, 3)) / 12).astype(np.float32)
    d = pyooc.deconv_bias_activation_forward(on_device(x), on_device(wt), on_device(b[:6]), activation="identity",
                                             stride=2, padding=1, output_padding=1, memory_limit=memory_limit)
    ref_d = F.conv_transpose2d(_ref(x), _ref(wt), _ref(b[:6]), stride=2, padding=1, output_padding=1)
    assert rel_err(d, ref_d.numpy()) < TOL[np.float32]


@pytest.mark.parametrize("memory_limit", [None, "400KiB"], ids=["whole", "split"])
def test_fused_backwards_read_and_write_device_arrays(rng, memory_limit):
    x, w, b = _conv_data(rng)
    dy = rng.standard_normal((4, 12, 40, 43)).astype(np.float32)
    xt, wt, bt = (_ref(v).requires_grad_() for v in (x, w, b))
    y = torch.tanh(F.conv2d(xt, wt, bt, padding=1))
    y.backward(_ref(dy))
    out = (poisoned_device(x.shape), poisoned_device(w.shape), poisoned_device((12,)))
    got = pyooc.activation_conv_backward_data_filter_bias(
        on_device(x), on_device(dy), on_device(w), on_device(y.detach().float().numpy()), activation="tanh",
        padding=1, out=out, memory_limit=memory_limit)
    assert all(g is o for g, o in zip(got, out))
    for g, want in zip(out, (xt.grad, wt.grad, bt.grad)):
        assert rel_err(host(g), want.numpy()) < 1e-4
    dx, dw, db = pyooc.conv_backward_data_filter_bias(on_device(x), on_device(dy), on_device(w), padding=1,
                                                      memory_limit=memory_limit)
    x2, w2 = _ref(x).requires_grad_(), _ref(w).requires_grad_()
    b2 = torch.zeros(12, dtype=torch.float64, requires_grad=True)
    F.conv2d(x2, w2, b2, padding=1).backward(_ref(dy))
    for g, want in ((dx, x2.grad), (dw, w2.grad), (db, b2.grad)):
        assert rel_err(g, want.numpy()) < 1e-4


@pytest.mark.parametrize("memory_limit", [None, "400KiB"], ids=["whole", "split"])
def test_half_gradients_reduced_in_float32_land_in_device_arrays(rng, memory_limit):
    """dw and db of half calls accumulate in a float32 host array that libooc converts at the end:
    into device memory through a copy (api/float32_output.hpp), with beta reading it back first."""
    x, w, _ = _conv_data(rng)
    xh, dyh = x.astype(np.float16), rng.standard_normal((4, 12, 40, 43)).astype(np.float16)
    xt, wt = _ref(xh).requires_grad_(), _ref(w.astype(np.float16)).requires_grad_()
    F.conv2d(xt, wt, padding=1).backward(_ref(dyh))
    dw = poisoned_device(w.shape, torch.float16)
    pyooc.conv_backward_filter(on_device(xh), on_device(dyh), w.shape, padding=1, out=dw, memory_limit=memory_limit)
    assert rel_err(host(dw), wt.grad.numpy()) < TOL[np.float16]
    prior = rng.standard_normal(12).astype(np.float16)
    db = on_device(prior)
    pyooc.conv_backward_bias(on_device(dyh), beta=1.0, out=db, memory_limit=memory_limit)
    want = _ref(dyh).sum(dim=(0, 2, 3)).numpy() + prior
    assert rel_err(host(db), want) < TOL[np.float16]
    out = (poisoned_device(x.shape, torch.float16), poisoned_device(w.shape, torch.float16),
           poisoned_device((12,), torch.float16))
    pyooc.conv_backward_data_filter_bias(on_device(xh), on_device(dyh), on_device(w.astype(np.float16)), padding=1,
                                         out=out, memory_limit=memory_limit)
    assert rel_err(host(out[0]), xt.grad.numpy()) < TOL[np.float16]
    assert rel_err(host(out[1]), wt.grad.numpy()) < TOL[np.float16]
    assert rel_err(host(out[2]), _ref(dyh).sum(dim=(0, 2, 3)).numpy()) < TOL[np.float16]
