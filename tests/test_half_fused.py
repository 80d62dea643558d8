"""Half precision (numpy's float16, ml_dtypes' bfloat16) for the fused forwards
(conv_bias_activation_forward, its pooling form, deconv_bias_activation_forward) on the host
backend: results in the input dtype against float64 references of the same (exactly upcast)
inputs, within fp16 1e-3 / bf16 1e-2 of the norm, NaN-poisoned outputs, budgets that split; plans
stream two bytes an element; mixed dtypes are a TypeError naming the argument. The same for the
fused backwards (conv_backward_data_filter_bias and its activation and pooling forms), whose dw and
db stay on the device in float32 under budgets that split H (carried dx rows) and N. The cuda
backend's twins, and the GPU's conv_backward_bias of half dy, are marked gpu."""

import ml_dtypes
import numpy as np
import pytest

import pyooc
from conftest import rel_err
from backward_helpers import reference_backward_data, reference_backward_filter
from fused_helpers import activation_err, coef_of, ref_pool_backward, reference_bias_activation
from layers_helpers import poisoned
from test_fused_deconv import deconv_shape, reference as reference_deconv
from test_layers_pool import ref_pool

DTYPES = {"float16": (np.float16, 1e-3), "bfloat16": (ml_dtypes.bfloat16, 1e-2)}
X, W, GEOMETRY = (3, 5, 19, 13), (6, 5, 3, 3), dict(padding=1)
POOL = dict(pool_kernel=(2, 2), pool_stride=(2, 2), pool_padding=(0, 0))


def up(a):
    return None if a is None else np.asarray(a).astype(np.float64)


def random_half(rng, dtype, x_shape, w_shape, y_shape, bias_channels):
    x = rng.standard_normal(x_shape).astype(dtype)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(dtype)
    return x, w, rng.standard_normal(bias_channels).astype(dtype), rng.standard_normal(y_shape).astype(dtype)


def y_shape_of(x_shape, w_shape):
    """y's shape under GEOMETRY (3x3 kernels padded by 1 keep the spatial size)."""
    return (x_shape[0], w_shape[0]) + tuple(x_shape[2:])


def splitting_budget(plan_fn):
    """The largest budget (halving from 4 MiB) whose plan has several chunks."""
    budget = 4 << 20
    while budget > 256:
        if plan_fn(budget).num_chunks > 2:
            return budget
        budget //= 2
    raise AssertionError("no budget splits")


def check(got, dtype, ref, pre, tol):
    assert got.dtype == dtype and not np.isnan(up(got)).any()
    err = activation_err(up(got), ref, pre)
    assert err < tol, err


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("activation", ["relu", "tanh", "gelu", "identity"])
def test_conv_bias_activation_forward(rng, name, activation):
    dtype, tol = DTYPES[name]
    x, w, b, z = random_half(rng, dtype, X, W, y_shape_of(X, W), W[0])
    budget = splitting_budget(lambda m: pyooc.plan_conv_bias_activation_forward(
        X, W, z=True, alpha2=0.5, dtype=name, memory_limit=m, backend="host", **GEOMETRY))
    out = poisoned(z.shape, dtype)
    y = pyooc.conv_bias_activation_forward(x, w, b, z=z, alpha1=0.75, alpha2=0.5, activation=activation,
                                           coef=coef_of(activation), out=out, memory_limit=budget, backend="host",
                                           **GEOMETRY)
    assert y is out and pyooc.last_stats()["plan"].num_chunks > 2
    ref, pre = reference_bias_activation(up(x), up(w), up(b), up(z), activation, 0.75, 0.5, **GEOMETRY)
    check(y, dtype, ref, pre, tol)


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("mode", ["max", "avg"])
def test_conv_bias_activation_pooling_forward(rng, name, mode):
    dtype, tol = DTYPES[name]
    x, w, b, _ = random_half(rng, dtype, X, W, y_shape_of(X, W), W[0])
    budget = splitting_budget(lambda m: pyooc.plan_conv_bias_activation_pooling_forward(
        X, W, dtype=name, memory_limit=m, backend="host", **POOL, **GEOMETRY))
    y_ref, pre = reference_bias_activation(up(x), up(w), up(b), None, "relu", **GEOMETRY)
    ref = ref_pool(y_ref, POOL["pool_kernel"], POOL["pool_stride"], POOL["pool_padding"], mode)
    out = pyooc.conv_bias_activation_pooling_forward(x, w, b, activation="relu", pool_mode=mode,
                                                     out=poisoned(ref.shape, dtype), memory_limit=budget,
                                                     backend="host", **POOL, **GEOMETRY)
    assert pyooc.last_stats()["plan"].num_chunks > 2
    check(out, dtype, ref, ref_pool(pre, POOL["pool_kernel"], POOL["pool_stride"], POOL["pool_padding"], mode), tol)


@pytest.mark.parametrize("name", DTYPES)
def test_deconv_bias_activation_forward(rng, name):
    dtype, tol = DTYPES[name]
    x_shape, w_shape, geometry = (2, 6, 9, 7), (6, 4, 3, 3), dict(stride=2, padding=1, output_padding=1)
    y_shape = deconv_shape(x_shape, w_shape, **geometry)
    x, w, b, z = random_half(rng, dtype, x_shape, w_shape, y_shape, w_shape[1])
    budget = splitting_budget(lambda m: pyooc.plan_deconv_bias_activation_forward(
        x_shape, w_shape, z=True, alpha2=-0.5, dtype=name, memory_limit=m, backend="host", **geometry))
    y = pyooc.deconv_bias_activation_forward(x, w, b, z=z, alpha2=-0.5, activation="sigmoid",
                                             out=poisoned(y_shape, dtype), memory_limit=budget, backend="host",
                                             **geometry)
    assert pyooc.last_stats()["plan"].num_chunks > 2
    ref, pre = reference_deconv(up(x), up(w), up(b), up(z), "sigmoid", 1.0, -0.5, **geometry)
    check(y, dtype, ref, pre, tol)


@pytest.mark.parametrize("name", DTYPES)
def test_fused_forward_plans_count_two_bytes_an_element(name):
    big = 64 << 20
    for plan_fn in (pyooc.plan_conv_bias_activation_forward, pyooc.plan_deconv_bias_activation_forward):
        f32 = plan_fn(X, (5, 5, 3, 3), memory_limit=big, backend="host", padding=1)
        h = plan_fn(X, (5, 5, 3, 3), dtype=name, memory_limit=big, backend="host", padding=1)
        assert 2 * h.bytes_h2d == f32.bytes_h2d and 2 * h.bytes_d2h == f32.bytes_d2h, plan_fn.__name__
    f32 = pyooc.plan_conv_bias_activation_pooling_forward(X, W, memory_limit=big, backend="host", **POOL, **GEOMETRY)
    h = pyooc.plan_conv_bias_activation_pooling_forward(X, W, dtype=name, memory_limit=big, backend="host", **POOL,
                                                        **GEOMETRY)
    assert 2 * h.bytes_h2d == f32.bytes_h2d and 2 * h.bytes_d2h == f32.bytes_d2h


def test_mixed_dtypes_are_refused_by_name(rng):
    x, w, b, z = random_half(rng, np.float16, X, W, y_shape_of(X, W), W[0])
    with pytest.raises(TypeError, match=r"w must have the dtype of x \(float16\), got float32"):
        pyooc.conv_bias_activation_forward(x, w.astype(np.float32), backend="host", **GEOMETRY)
    with pytest.raises(TypeError, match=r"bias must have the dtype of x \(float16\), got bfloat16"):
        pyooc.conv_bias_activation_forward(x, w, b.astype(ml_dtypes.bfloat16), backend="host", **GEOMETRY)
    with pytest.raises(TypeError, match=r"z must have the dtype of x \(float16\), got float32"):
        pyooc.conv_bias_activation_forward(x, w, b, z=z.astype(np.float32), alpha2=1.0, backend="host", **GEOMETRY)
    with pytest.raises(TypeError, match=r"out must have dtype float16, got float32"):
        pyooc.conv_bias_activation_pooling_forward(x, w, b, out=np.zeros((3, 6, 9, 6), np.float32), backend="host",
                                                   **POOL, **GEOMETRY)
    with pytest.raises(TypeError, match=r"w must have the dtype of x \(bfloat16\), got float16"):
        pyooc.deconv_bias_activation_forward(x.astype(ml_dtypes.bfloat16), np.zeros((5, 4, 3, 3), np.float16),
                                             backend="host")
    with pytest.raises(TypeError, match="x must have dtype"):
        pyooc.conv_bias_activation_forward(x.astype(np.float64), w, backend="host", **GEOMETRY)


def check_gradients(grads, dtype, x, w, dz, tol):
    """(dx, dw, db) of dtype, every element written, against the float64 gradients of dz."""
    dx, dw, db = grads
    refs = (reference_backward_data(dz, up(w), x.shape, **GEOMETRY), reference_backward_filter(up(x), dz, w.shape,
                                                                                              **GEOMETRY),
            dz.sum(axis=(0, 2, 3)))
    for got, ref in zip((dx, dw, db), refs):
        assert got.dtype == dtype and not np.isnan(up(got)).any()
        assert rel_err(up(got), ref) < tol


def backward_budget(plan_fn):
    """The largest budget (halving from 4 MiB) whose plan splits H (dx rows carried between tiles)
    and has several chunks."""
    budget = 4 << 20
    while budget > 256:
        try:
            plan = plan_fn(budget)
        except MemoryError:
            break
        if plan.splits["h"] > 1 and plan.num_chunks > 2:
            return budget
        budget //= 2
    raise AssertionError("no budget splits h")


@pytest.mark.parametrize("name", DTYPES)
def test_conv_backward_data_filter_bias(rng, name):
    dtype, tol = DTYPES[name]
    x, w, _, dy = random_half(rng, dtype, X, W, y_shape_of(X, W), W[0])
    budget = backward_budget(lambda m: pyooc.plan_conv_backward_data_filter_bias(
        X, dy.shape, W, dtype=name, memory_limit=m, backend="host", **GEOMETRY))
    out = (poisoned(X, dtype), poisoned(W, dtype), poisoned(W[0], dtype))
    grads = pyooc.conv_backward_data_filter_bias(x, dy, w, out=out, memory_limit=budget, backend="host", **GEOMETRY)
    plan = pyooc.last_stats()["plan"]
    assert plan.splits["h"] > 1 and plan.num_chunks > 2
    check_gradients(grads, dtype, x, w, up(dy), tol)


@pytest.mark.parametrize("name", DTYPES)
def test_activation_and_pooling_backwards(rng, name):
    dtype, tol = DTYPES[name]
    x, w, _, pre = random_half(rng, dtype, X, W, y_shape_of(X, W), W[0])
    y = np.tanh(up(pre)).astype(dtype)  # tanh's gradient follows from y: pre is not passed
    dy = rng.standard_normal(y.shape).astype(dtype)
    budget = backward_budget(lambda m: pyooc.plan_activation_conv_backward_data_filter_bias(
        X, y.shape, W, activation="tanh", dtype=name, memory_limit=m, backend="host", **GEOMETRY))
    grads = pyooc.activation_conv_backward_data_filter_bias(x, dy, w, y, activation="tanh", memory_limit=budget,
                                                            backend="host", **GEOMETRY)
    check_gradients(grads, dtype, x, w, (1 - up(y) ** 2) * up(dy), tol)
    q = ref_pool(up(y), (2, 2), (2, 2), (0, 0), "avg").astype(dtype)
    dq = rng.standard_normal(q.shape).astype(dtype)
    grads = pyooc.pooling_activation_conv_backward_data_filter_bias(
        x, dq, w, q, y, activation="tanh", pool_mode="avg", memory_limit=budget, backend="host", **POOL, **GEOMETRY)
    assert pyooc.last_stats()["plan"].num_chunks > 1
    dy_pooled = ref_pool_backward(up(y), up(dq), (2, 2), (2, 2), (0, 0), "avg")
    check_gradients(grads, dtype, x, w, (1 - up(y) ** 2) * dy_pooled, tol)


@pytest.mark.parametrize("name", DTYPES)
def test_fused_backward_plans_count_two_bytes_an_element_and_keep_float32(name):
    big = 64 << 20
    f32 = pyooc.plan_conv_backward_data_filter_bias(X, y_shape_of(X, W), W, memory_limit=big, backend="host",
                                                    **GEOMETRY)
    h = pyooc.plan_conv_backward_data_filter_bias(X, y_shape_of(X, W), W, dtype=name, memory_limit=big,
                                                  backend="host", **GEOMETRY)
    assert 2 * h.bytes_h2d == f32.bytes_h2d
    # dx comes back in half; dw and db as the float32 the device summed them in.
    w_elements = int(np.prod(W))
    assert h.bytes_d2h == 2 * int(np.prod(X)) + 4 * (w_elements + W[0])
    assert h.kept_bytes == f32.kept_bytes


@pytest.mark.gpu
@pytest.mark.parametrize("name", DTYPES)
def test_fused_forwards_on_the_gpu(rng, name):
    """cuDNN in half data with float32 compute for the convolution, cuDNN's half activation and
    pooling, the bias by add_tensor (bfloat16: the library's kernel), under budgets that split."""
    dtype, tol = DTYPES[name]
    x_shape, w_shape = (4, 16, 40, 36), (24, 16, 3, 3)
    x, w, b, z = random_half(rng, dtype, x_shape, w_shape, y_shape_of(x_shape, w_shape), w_shape[0])
    budget = splitting_budget(lambda m: pyooc.plan_conv_bias_activation_forward(
        x_shape, w_shape, z=True, alpha2=0.5, dtype=name, memory_limit=m, backend="cuda", **GEOMETRY))
    y = pyooc.conv_bias_activation_forward(x, w, b, z=z, alpha2=0.5, activation="relu",
                                           out=poisoned(z.shape, dtype), memory_limit=budget, backend="cuda",
                                           **GEOMETRY)
    ref, pre = reference_bias_activation(up(x), up(w), up(b), up(z), "relu", 1.0, 0.5, **GEOMETRY)
    check(y, dtype, ref, pre, tol)
    out = pyooc.conv_bias_activation_pooling_forward(x, w, b, activation="tanh", memory_limit=budget,
                                                     backend="cuda", **POOL, **GEOMETRY)
    y_ref, pre = reference_bias_activation(up(x), up(w), up(b), None, "tanh", **GEOMETRY)
    check(out, dtype, ref_pool(y_ref, (2, 2), (2, 2), (0, 0), "max"), ref_pool(pre, (2, 2), (2, 2), (0, 0), "max"),
          tol)
    geometry = dict(stride=2, padding=1, output_padding=1)
    dw_shape = (16, 8, 3, 3)
    y_shape = deconv_shape(x_shape, dw_shape, **geometry)
    xd, wd, bd, zd = random_half(rng, dtype, x_shape, dw_shape, y_shape, dw_shape[1])
    yd = pyooc.deconv_bias_activation_forward(xd, wd, bd, z=zd, alpha2=1.0, activation="sigmoid",
                                              out=poisoned(y_shape, dtype), memory_limit=budget, backend="cuda",
                                              **geometry)
    ref, pre = reference_deconv(up(xd), up(wd), up(bd), up(zd), "sigmoid", 1.0, 1.0, **geometry)
    check(yd, dtype, ref, pre, tol)
    with pytest.raises(NotImplementedError, match=f"has no {name} kernel"):  # a mode cuDNN lacks, on the GPU
        pyooc.conv_bias_activation_forward(x, w, b, activation="gelu", backend="cuda", **GEOMETRY)


@pytest.mark.gpu
@pytest.mark.parametrize("name", DTYPES)
def test_conv_backward_bias_of_half_dy_on_the_gpu(rng, name):
    """db of a half dy: our reduction (float64 sums per chunk, a float32 db across chunks), under
    a budget that splits N and space, with beta blending a prior db."""
    dtype, tol = DTYPES[name]
    dy = rng.standard_normal((6, 24, 41, 37)).astype(dtype)
    ref = up(dy).sum(axis=(0, 2, 3))
    db = pyooc.conv_backward_bias(dy, out=poisoned(24, dtype), memory_limit=1 << 16, backend="cuda")
    assert db.dtype == dtype and pyooc.last_stats()["plan"].num_chunks > 2
    assert rel_err(up(db), ref) < tol
    host = pyooc.conv_backward_bias(dy, memory_limit=1 << 16, backend="host")
    assert rel_err(up(db), up(host)) < tol
    prior = rng.standard_normal(24).astype(dtype)
    out = prior.copy()
    pyooc.conv_backward_bias(dy, alpha=0.5, beta=2.0, out=out, memory_limit=1 << 16, backend="cuda")
    assert rel_err(up(out), 0.5 * ref + 2.0 * up(prior)) < tol


@pytest.mark.gpu
@pytest.mark.parametrize("name", DTYPES)
def test_fused_backward_on_the_gpu(rng, name):
    """cuDNN's half gradients with dw (each chunk's half partial added by cudnnTransformTensor) and
    db (the library's reduction) kept in float32 on the device, H split so dx rows are carried."""
    dtype, tol = DTYPES[name]
    x_shape, w_shape = (4, 16, 40, 36), (24, 16, 3, 3)
    x, w, _, dy = random_half(rng, dtype, x_shape, w_shape, y_shape_of(x_shape, w_shape), w_shape[0])
    budget = backward_budget(lambda m: pyooc.plan_conv_backward_data_filter_bias(
        x_shape, dy.shape, w_shape, dtype=name, memory_limit=m, backend="cuda", **GEOMETRY))
    out = (poisoned(x_shape, dtype), poisoned(w_shape, dtype), poisoned(w_shape[0], dtype))
    grads = pyooc.conv_backward_data_filter_bias(x, dy, w, out=out, memory_limit=budget, backend="cuda", **GEOMETRY)
    assert pyooc.last_stats()["plan"].splits["h"] > 1
    # dw's chunks each round their partial to half once (as the unfused conv_backward_filter's): 4 * tol.
    refs = (reference_backward_data(up(dy), up(w), x_shape, **GEOMETRY),
            reference_backward_filter(up(x), up(dy), w_shape, **GEOMETRY), up(dy).sum(axis=(0, 2, 3)))
    for got, ref, factor in zip(grads, refs, (1, 4, 1)):
        assert got.dtype == dtype and not np.isnan(up(got)).any()
        assert rel_err(up(got), ref) < factor * tol
