"""Bad arguments to the gradients and their plan_* twins: the right exception type, a message naming
the argument (torch's wording where torch has one), inputs and out untouched, the library usable
afterwards."""

import re

import numpy as np
import pytest

import pyooc
from backward_helpers import random_backward, reference_backward_data, reference_backward_filter
from conftest import HAS_GPU, rel_err

X_SHAPE, W_SHAPE, DY_SHAPE = (2, 3, 8, 8), (4, 3, 3, 3), (2, 4, 6, 6)


@pytest.fixture
def arrays(rng):
    x, w, dy = random_backward(rng, X_SHAPE, W_SHAPE)
    return dict(x=x, w=w, dy=dy, dx=np.full(X_SHAPE, np.nan, np.float32), dw=np.full(W_SHAPE, np.nan, np.float32),
                db=np.full((4,), np.nan, np.float32))


def rejects(exc_type, pattern, arrays, call):
    """call() raises exc_type matching pattern; no array changed; valid calls right after are right."""
    before = {k: v.copy() for k, v in arrays.items()}
    with pytest.raises(exc_type, match=pattern) as info:
        call()
    for name, array in arrays.items():
        assert np.array_equal(array, before[name], equal_nan=True), f"{name} changed by a failing call"
    x, w, dy = before["x"], before["w"], before["dy"]
    dx = pyooc.conv_backward_data(dy, w, X_SHAPE, backend="host")
    assert rel_err(dx, reference_backward_data(dy, w, X_SHAPE)) < 1e-5
    dw = pyooc.conv_backward_filter(x, dy, W_SHAPE, backend="host")
    assert rel_err(dw, reference_backward_filter(x, dy, W_SHAPE)) < 1e-5
    return info.value


def data(arrays, **kw):
    args = dict(dy=arrays["dy"], w=arrays["w"], x_shape=X_SHAPE, backend="host")
    args.update(kw)
    return lambda: pyooc.conv_backward_data(args.pop("dy"), args.pop("w"), args.pop("x_shape"), **args)


def filt(arrays, **kw):
    args = dict(x=arrays["x"], dy=arrays["dy"], w_shape=W_SHAPE, backend="host")
    args.update(kw)
    return lambda: pyooc.conv_backward_filter(args.pop("x"), args.pop("dy"), args.pop("w_shape"), **args)


def bias(arrays, **kw):
    args = dict(dy=arrays["dy"], backend="host")
    args.update(kw)
    return lambda: pyooc.conv_backward_bias(args.pop("dy"), **args)


CALLS = {"data": data, "filter": filt, "bias": bias}


# --------------------------------------------------------------------------------------------
# Shapes: dy must be the forward output of x and w


@pytest.mark.parametrize("dy_shape", [(2, 4, 6, 7), (2, 5, 6, 6), (3, 4, 6, 6), (2, 4, 36)])
def test_dy_not_the_forward_output(rng, arrays, dy_shape):
    dy = rng.standard_normal(dy_shape, dtype=np.float32)
    expected = re.escape("Expected dy of size [2, 4, 6, 6]")
    err = rejects(ValueError, expected, arrays, data(arrays, dy=dy))
    assert str(list(dy_shape)) in str(err)
    rejects(ValueError, expected, arrays, filt(arrays, dy=dy))
    with pytest.raises(ValueError, match=expected):
        pyooc.plan_conv_backward_data(dy_shape, W_SHAPE, X_SHAPE, backend="host")
    with pytest.raises(ValueError, match=expected):
        pyooc.plan_conv_backward_filter(X_SHAPE, dy_shape, W_SHAPE, backend="host")


def test_dy_shape_follows_stride_padding_dilation(arrays):
    # With padding=1 the forward output is 8x8, so the 6x6 dy no longer matches.
    rejects(ValueError, re.escape("Expected dy of size [2, 4, 8, 8]"), arrays, data(arrays, padding=1))
    rejects(ValueError, re.escape("Expected dy of size [2, 4, 3, 3]"), arrays, filt(arrays, stride=2))


def test_x_shape_and_w_shape_errors_name_them(arrays):
    rejects(ValueError, r"Expected 4D \(batched\) input x_shape to conv2d", arrays, data(arrays, x_shape=(2, 3, 8)))
    rejects(ValueError, r"expected x_shape\[2, 5, 8, 8\] to have 3 channels, but got 5", arrays,
            data(arrays, x_shape=(2, 5, 8, 8)))
    rejects(ValueError, r"x_shape has a zero or negative dimension", arrays, data(arrays, x_shape=(2, 3, 0, 8)))
    rejects(ValueError, r"w must be 3D, 4D or 5D", arrays, filt(arrays, w_shape=(4, 3)))
    rejects(ValueError, r"expected x\[2, 3, 8, 8\] to have 6 channels", arrays, filt(arrays, w_shape=(4, 6, 3, 3)))
    rejects(TypeError, r"x_shape must be a sequence of ints", arrays, data(arrays, x_shape=5))
    rejects(TypeError, r"w_shape must be a sequence of ints", arrays, filt(arrays, w_shape=None))
    rejects(TypeError, r"x_shape must be an int", arrays, data(arrays, x_shape=(2, 3, 8.5, 8)))


@pytest.mark.parametrize("shape", [(4,), (2, 4), (1, 2, 3, 4, 5, 6)])
def test_bias_dy_rank(rng, arrays, shape):
    dy = rng.standard_normal(shape, dtype=np.float32)
    rejects(ValueError, r"dy must be 3D, 4D or 5D", arrays, bias(arrays, dy=dy))
    with pytest.raises(ValueError, match="dy must be 3D, 4D or 5D"):
        pyooc.plan_conv_backward_bias(shape, backend="host")


def test_kernel_larger_than_padded_input(arrays):
    rejects(ValueError, "Kernel size can't be greater than actual input size", arrays,
            lambda: pyooc.conv_backward_data(arrays["dy"], arrays["w"], (2, 3, 2, 8), backend="host"))


@pytest.mark.parametrize("name, value, exc, pattern", [
    ("stride", 0, ValueError, "non-positive stride is not supported"),
    ("padding", -1, ValueError, "negative padding is not supported"),
    ("dilation", (1, 0), ValueError, "dilation should be greater than zero"),
    ("stride", (1, 1, 1), ValueError, r"stride must be an int or a tuple of 2 ints"),
    ("stride", 1.5, TypeError, r"stride must be an int"),
    ("groups", 1.0, TypeError, r"groups must be an int"),
    ("alpha", "1", TypeError, r"alpha must be a real number"),
    ("beta", None, TypeError, r"beta must be a real number"),
    ("device", "0", TypeError, r"device must be an int"),
    ("backend", "gpu", ValueError, r"^backend must be one of"),
    ("memory_limit", "lots", ValueError, r"memory_limit"),
    ("memory_limit", 0, ValueError, r"memory_limit"),
    ("memory_limit", True, TypeError, r"memory_limit"),
])
@pytest.mark.parametrize("op", ["data", "filter"])
def test_options(arrays, op, name, value, exc, pattern):
    rejects(exc, pattern, arrays, CALLS[op](arrays, **{name: value}))


@pytest.mark.parametrize("name, value, exc, pattern", [
    ("alpha", "1", TypeError, r"alpha must be a real number"),
    ("backend", "cpu", ValueError, r"^backend must be one of"),
    ("memory_limit", -5, ValueError, r"memory_limit"),
])
def test_bias_options(arrays, name, value, exc, pattern):
    rejects(exc, pattern, arrays, bias(arrays, **{name: value}))


def test_groups(rng, arrays):
    x, w, dy = random_backward(rng, (2, 4, 8, 8), (4, 2, 3, 3))
    # w [4, 2, ...] with groups=4 wants x of 8 channels: refused naming x_shape, nothing written.
    rejects(ValueError, r"groups=4.*expected x_shape\[2, 4, 8, 8\] to have 8 channels", arrays,
            lambda: pyooc.conv_backward_data(dy, w, x.shape, groups=4, backend="host"))
    rejects(ValueError, r"groups=4", arrays, lambda: pyooc.conv_backward_filter(x, dy, w.shape, groups=4,
                                                                                 backend="host"))
    rejects(ValueError, "non-positive groups is not supported", arrays, data(arrays, groups=0))


# --------------------------------------------------------------------------------------------
# Arrays: dtype, layout, out


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
@pytest.mark.parametrize("op, which", [("data", "dy"), ("data", "w"), ("filter", "x"), ("filter", "dy"),
                                       ("bias", "dy")])
def test_wrong_dtype(arrays, op, which, dtype):
    bad = arrays[which].astype(dtype)
    rejects(TypeError, rf"^{which} must have dtype float32, float16 or bfloat16, got {np.dtype(dtype)}", arrays,
            CALLS[op](arrays, **{which: bad}))


@pytest.mark.parametrize("op, first, second", [("data", "dy", "w"), ("filter", "x", "dy")])
def test_mixed_dtypes(arrays, op, first, second):
    rejects(TypeError, rf"^{second} must have the dtype of {first} \(float32\), got float16: mixed dtypes", arrays,
            CALLS[op](arrays, **{second: arrays[second].astype(np.float16)}))


@pytest.mark.parametrize("op, which", [("data", "dy"), ("data", "w"), ("filter", "x"), ("filter", "dy"),
                                       ("bias", "dy")])
def test_not_an_array_or_not_contiguous(arrays, op, which):
    rejects(TypeError, rf"^{which} must ", arrays, CALLS[op](arrays, **{which: None}))
    bad = np.asfortranarray(arrays[which])
    if not bad.flags.c_contiguous:
        rejects(ValueError, rf"^{which} must be C-contiguous", arrays, CALLS[op](arrays, **{which: bad}))
    empty = np.zeros((0,) + arrays[which].shape[1:], np.float32)
    rejects(ValueError, rf"^{which} must not be empty", arrays, CALLS[op](arrays, **{which: empty}))


@pytest.mark.parametrize("op, shape, expect", [("data", (2, 3, 8, 7), "[2, 3, 8, 8]"),
                                                ("filter", (4, 3, 3), "[4, 3, 3, 3]"), ("bias", (5,), "[4]")])
def test_out_wrong_shape(arrays, op, shape, expect):
    bad = np.full(shape, np.nan, dtype=np.float32)
    err = rejects(ValueError, r"^out has shape", arrays, CALLS[op](arrays, out=bad))
    assert expect in str(err)
    assert np.isnan(bad).all()


@pytest.mark.parametrize("op", ["data", "filter", "bias"])
def test_out_dtype_readonly_noncontiguous(arrays, op):
    shape = {"data": X_SHAPE, "filter": W_SHAPE, "bias": (4,)}[op]
    rejects(TypeError, r"^out must have dtype float32", arrays, CALLS[op](arrays, out=np.zeros(shape, np.float64)))
    ro = np.full(shape, np.nan, np.float32)
    ro.setflags(write=False)
    rejects(ValueError, r"^out is read-only", arrays, CALLS[op](arrays, out=ro))
    strided = np.full(shape[:-1] + (2 * shape[-1],), np.nan, np.float32)[..., ::2]
    rejects(ValueError, r"^out must be C-contiguous", arrays, CALLS[op](arrays, out=strided))
    rejects(TypeError, r"^out must be a numpy\.ndarray", arrays, CALLS[op](arrays, out=[0.0]))


def test_out_overlapping_an_input(rng, arrays):
    buf = rng.standard_normal(2 * 4 * 6 * 6 + 2 * 3 * 8 * 8, dtype=np.float32)
    dy = buf[:2 * 4 * 6 * 6].reshape(DY_SHAPE)
    out = buf[10:10 + 2 * 3 * 8 * 8].reshape(X_SHAPE)
    before = buf.copy()
    rejects(ValueError, r"^out overlaps dy", arrays,
            lambda: pyooc.conv_backward_data(dy, arrays["w"], X_SHAPE, out=out, backend="host"))
    assert np.array_equal(buf, before)
    out_b = buf[:4]
    rejects(ValueError, r"^out overlaps dy", arrays, lambda: pyooc.conv_backward_bias(dy, out=out_b, backend="host"))


@pytest.mark.parametrize("op", ["data", "filter", "bias"])
def test_beta_without_out(arrays, op):
    rejects(ValueError, r"beta != 0 needs out=", arrays, CALLS[op](arrays, beta=0.5))


@pytest.mark.parametrize("op", ["data", "filter", "bias"])
def test_impossible_budget_leaves_out_untouched(arrays, op):
    out = arrays[{"data": "dx", "filter": "dw", "bias": "db"}[op]]
    err = rejects(MemoryError, r"needs .*\(\d+ bytes", arrays, CALLS[op](arrays, out=out, memory_limit=100))
    assert "memory_limit of 100 B" in str(err)
    assert np.isnan(out).all()


def test_plan_arguments():
    with pytest.raises(TypeError, match="dtype must be float32"):
        pyooc.plan_conv_backward_data(DY_SHAPE, W_SHAPE, X_SHAPE, dtype="float64", backend="host")
    with pytest.raises(TypeError, match="dtype must be float32, float16 or bfloat16, got int16"):
        pyooc.plan_conv_backward_bias(DY_SHAPE, dtype=np.int16, backend="host")
    half = pyooc.plan_conv_backward_bias(DY_SHAPE, dtype=np.float16, backend="host")
    assert "float16" in str(half)
    with pytest.raises(TypeError, match="dy_shape"):
        pyooc.plan_conv_backward_data(5, W_SHAPE, X_SHAPE, backend="host")
    with pytest.raises(TypeError, match="x_shape"):
        pyooc.plan_conv_backward_filter(None, DY_SHAPE, W_SHAPE, backend="host")
    with pytest.raises(ValueError, match="^backend must be one of"):
        pyooc.plan_conv_backward_filter(X_SHAPE, DY_SHAPE, W_SHAPE, backend="CUDA")


def test_cuda_backend_without_device(arrays):
    if HAS_GPU:
        rejects(ValueError, r"device 99 is out of range", arrays, data(arrays, backend="cuda", device=99))
    else:
        rejects(ValueError, r"no CUDA device is available", arrays, data(arrays, backend="cuda"))
        rejects(ValueError, r"no CUDA device is available", arrays, bias(arrays, backend="cuda"))
