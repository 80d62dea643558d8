"""Bad arguments to conv_forward / plan_conv_forward: the right exception type, a message naming
the argument (torch's wording where torch has one), inputs untouched, and the library still
usable afterwards."""

import re

import numpy as np
import pytest

import pyooc
from conftest import HAS_GPU, random_problem, reference_conv, rel_err

X_SHAPE, W_SHAPE = (2, 3, 8, 8), (4, 3, 3, 3)
Y_SHAPE = (2, 4, 6, 6)


@pytest.fixture
def arrays(rng):
    x, w, b = random_problem(rng, X_SHAPE, W_SHAPE, bias=True)
    out = np.full(Y_SHAPE, np.nan, dtype=np.float32)
    return dict(x=x, w=w, bias=b, out=out)


def rejects(exc_type, pattern, arrays, call):
    """`call()` raises exc_type matching `pattern`; x, w, bias and out are unchanged after it; and
    a valid call right after it gives the right answer."""
    before = {k: v.copy() for k, v in arrays.items()}
    with pytest.raises(exc_type, match=pattern) as info:
        call()
    for name, array in arrays.items():
        assert np.array_equal(array, before[name], equal_nan=True), f"{name} changed by a failing call"
    x, w, b = before["x"], before["w"], before["bias"]
    y = pyooc.conv_forward(x, w, bias=b, backend="host")
    assert rel_err(y, reference_conv(x, w, b)) < 1e-5, "a valid call after a failing one is wrong"
    return info.value


def conv(arrays, **overrides):
    args = dict(x=arrays["x"], w=arrays["w"], backend="host")
    args.update(overrides)
    x, w = args.pop("x"), args.pop("w")
    return lambda: pyooc.conv_forward(x, w, **args)


# --------------------------------------------------------------------------------------------
# Shapes and geometry (libooc's checks, torch's wording)


@pytest.mark.parametrize("x_shape, w_shape, pattern", [
    # One rank below w: unbatched (C, H, W), as torch reads it, and then its channels are wrong.
    ((2, 3, 8), (4, 3, 3, 3), r"Given groups=1, w of size \[4, 3, 3, 3\], expected x\[1, 2, 3, 8\] to have 3 channels"),
    ((2, 3, 8, 8, 8), (4, 3, 3, 3), r"Expected 4D \(batched\) input x to conv2d, but got input of size"),
    ((2, 3, 8, 8), (4, 3, 3), r"Expected 3D \(batched\) input x to conv1d"),
    # (3, 8, 8) with a 4-D w is valid now: unbatched, as torch takes it (tests/test_unbatched.py).
    ((2, 3, 8, 8), (4, 3), r"w must be 3D, 4D or 5D"),
    ((2, 3, 8, 8, 8, 8), (4, 3, 3, 3, 3, 3), r"w must be 3D, 4D or 5D"),
    ((2, 3), (4,), r"w must be 3D, 4D or 5D"),
])
def test_wrong_ranks(rng, arrays, x_shape, w_shape, pattern):
    x, w, _ = random_problem(rng, x_shape, w_shape)
    rejects(ValueError, pattern, arrays, lambda: pyooc.conv_forward(x, w, backend="host"))
    with pytest.raises(ValueError, match=pattern):
        pyooc.plan_conv_forward(x_shape, w_shape, backend="host")


def test_channel_mismatch(rng, arrays):
    x, w, _ = random_problem(rng, (2, 3, 8, 8), (4, 4, 3, 3))
    pattern = re.escape("Given groups=1, w of size [4, 4, 3, 3], expected x[2, 3, 8, 8] to have 4 channels, "
                        "but got 3 channels instead")
    rejects(ValueError, pattern, arrays, lambda: pyooc.conv_forward(x, w, backend="host"))
    with pytest.raises(ValueError, match=pattern):
        pyooc.plan_conv_forward(x.shape, w.shape, backend="host")


@pytest.mark.parametrize("stride", [0, -1, (1, 0), (-2, 1)])
def test_non_positive_stride(arrays, stride):
    rejects(ValueError, "non-positive stride is not supported", arrays, conv(arrays, stride=stride))


@pytest.mark.parametrize("dilation", [0, -1, (1, 0)])
def test_non_positive_dilation(arrays, dilation):
    rejects(ValueError, "dilation should be greater than zero", arrays, conv(arrays, dilation=dilation))


@pytest.mark.parametrize("padding", [-1, (0, -2)])
def test_negative_padding(arrays, padding):
    rejects(ValueError, "negative padding is not supported", arrays, conv(arrays, padding=padding))


@pytest.mark.parametrize("x_shape, w_shape, geometry, sizes", [
    ((1, 3, 2, 8), (4, 3, 3, 3), dict(),
     r"Calculated padded input size per channel: \(2 x 8\)\. Kernel size: \(3 x 3\)"),
    ((1, 3, 5, 5), (4, 3, 3, 3), dict(dilation=3), r"Kernel size: \(7 x 7\)"),
    ((1, 3, 4), (4, 3, 7), dict(padding=1), r"Calculated padded input size per channel: \(6\)\. Kernel size: \(7\)"),
    ((1, 1, 3, 3, 1), (1, 1, 1, 1, 2), dict(), r"Kernel size: \(1 x 1 x 2\)"),
])
def test_kernel_larger_than_padded_input(rng, arrays, x_shape, w_shape, geometry, sizes):
    x, w, _ = random_problem(rng, x_shape, w_shape)
    err = rejects(ValueError, "Kernel size can't be greater than actual input size", arrays,
                  lambda: pyooc.conv_forward(x, w, backend="host", **geometry))
    assert re.search(sizes, str(err)), str(err)


def test_zero_sized_dimension(arrays):
    x = np.zeros((0, 3, 8, 8), dtype=np.float32)
    rejects(ValueError, r"\bx\b", arrays, conv(arrays, x=x))
    with pytest.raises(ValueError, match=r"\bx\b"):
        pyooc.plan_conv_forward((2, 0, 8, 8), (4, 0, 3, 3), backend="host")


@pytest.mark.parametrize("name, value, exc, pattern", [
    ("stride", (1, 1, 1), ValueError, r"stride must be an int or a tuple of 2 ints"),
    ("stride", (1,) * 0, ValueError, r"stride must be an int or a tuple of 2 ints"),
    ("padding", (1, 1, 1), ValueError, r"padding must be an int or a tuple of 2 ints"),
    ("dilation", [1, 1, 1, 1], ValueError, r"dilation must be an int or a tuple of 2 ints"),
    ("stride", 1.5, TypeError, r"stride must be an int"),
    ("stride", (1, 1.5), TypeError, r"stride must be an int"),
    ("padding", "1", ValueError, r"Invalid padding string '1', should be one of"),  # torch's words
    ("padding", True, TypeError, r"padding must be an int or a tuple of ints, got bool"),
    ("groups", 1.0, TypeError, r"groups must be an int"),
    ("alpha", "1", TypeError, r"alpha must be a real number"),
    ("beta", None, TypeError, r"beta must be a real number"),
    ("device", "0", TypeError, r"device must be an int"),
])
def test_option_types(arrays, name, value, exc, pattern):
    rejects(exc, pattern, arrays, conv(arrays, **{name: value}))


def test_groups_zero(arrays):
    rejects(ValueError, "non-positive groups is not supported", arrays, conv(arrays, groups=0))


def test_groups_not_dividing_out_channels(rng, arrays):
    x, w, _ = random_problem(rng, (2, 4, 8, 8), (3, 2, 3, 3))
    rejects(ValueError, r"Given groups=2, expected w to be divisible by 2 at dimension 0", arrays,
            lambda: pyooc.conv_forward(x, w, groups=2, backend="host"))


def test_groups_not_matching_channels(rng, arrays):
    x, w, _ = random_problem(rng, (2, 4, 8, 8), (4, 4, 3, 3))
    rejects(ValueError, r"Given groups=2, w of size \[4, 4, 3, 3\], expected x\[2, 4, 8, 8\] to have 8 channels", arrays,
            lambda: pyooc.conv_forward(x, w, groups=2, backend="host"))


# --------------------------------------------------------------------------------------------
# Arrays: dtype, layout, out, bias


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.uint8, np.complex64, bool])
@pytest.mark.parametrize("which", ["x", "w"])
def test_wrong_dtype(arrays, dtype, which):
    bad = arrays[which].astype(dtype)
    rejects(TypeError, rf"^{which} must have dtype float32, float16 or bfloat16, got {np.dtype(dtype)}", arrays,
            conv(arrays, **{which: bad}))


@pytest.mark.parametrize("which", ["x", "w"])
def test_mixed_dtypes(arrays, which):
    """float16 is a dtype pyooc computes in, but not mixed with float32 in one call."""
    bad = arrays[which].astype(np.float16)
    x_dtype = "float16" if which == "x" else "float32"
    rejects(TypeError, rf"^w must have the dtype of x \({x_dtype}\), got {'float32' if which == 'x' else 'float16'}",
            arrays, conv(arrays, **{which: bad}))


def test_bias_wrong_dtype(arrays):
    rejects(TypeError, r"^bias must have dtype float32, float16 or bfloat16", arrays,
            conv(arrays, bias=arrays["bias"].astype(np.float64)))
    rejects(TypeError, r"^bias must have the dtype of x \(float32\), got float16", arrays,
            conv(arrays, bias=arrays["bias"].astype(np.float16)))


@pytest.mark.parametrize("which", ["x", "w"])
def test_not_an_array(arrays, which):
    rejects(TypeError, rf"^{which} must ", arrays, conv(arrays, **{which: None}))
    rejects(TypeError, rf"^{which} must ", arrays, conv(arrays, **{which: object()}))


@pytest.mark.parametrize("which, make", [
    ("x", lambda a: np.asfortranarray(a)),
    ("x", lambda a: np.swapaxes(a, 2, 3)),
    ("x", lambda a: np.concatenate([a, a], axis=3)[:, :, :, ::2]),
    ("w", lambda a: np.asfortranarray(a)),
    ("w", lambda a: np.concatenate([a, a], axis=1)[:, ::2]),
])
def test_non_contiguous(arrays, which, make):
    bad = make(arrays[which])
    assert not bad.flags.c_contiguous
    rejects(ValueError, rf"^{which} must be C-contiguous", arrays, conv(arrays, **{which: bad}))


def test_bias_non_contiguous(arrays):
    bad = np.repeat(arrays["bias"], 2)[::2]
    rejects(ValueError, r"^bias must be C-contiguous", arrays, conv(arrays, bias=bad))


@pytest.mark.parametrize("shape", [(4, 1), (3,), (5,), (2, 4)])
def test_bias_wrong_shape(rng, arrays, shape):
    bad = rng.standard_normal(shape, dtype=np.float32)
    rejects(ValueError, r"^bias must have shape \[4\]", arrays, conv(arrays, bias=bad))


@pytest.mark.parametrize("shape", [(2, 4, 6, 7), (2, 4, 36), (1, 4, 6, 6), (2 * 4 * 36,)])
def test_out_wrong_shape(arrays, shape):
    bad = np.full(shape, np.nan, dtype=np.float32)
    err = rejects(ValueError, r"^out has shape", arrays, conv(arrays, out=bad))
    assert "[2, 4, 6, 6]" in str(err)
    assert np.isnan(bad).all()


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32])
def test_out_wrong_dtype(arrays, dtype):
    bad = np.zeros(Y_SHAPE, dtype=dtype)
    rejects(TypeError, r"^out must have dtype float32", arrays, conv(arrays, out=bad))
    assert not bad.any()


def test_out_not_ndarray(arrays):
    rejects(TypeError, r"^out must be a numpy\.ndarray", arrays, conv(arrays, out=[[0.0]]))


def test_out_read_only(arrays):
    bad = np.full(Y_SHAPE, np.nan, dtype=np.float32)
    bad.setflags(write=False)
    rejects(ValueError, r"^out is read-only", arrays, conv(arrays, out=bad))
    assert np.isnan(bad).all()


def test_out_non_contiguous(arrays):
    bad = np.full((2, 4, 6, 12), np.nan, dtype=np.float32)[..., ::2]
    rejects(ValueError, r"^out must be C-contiguous", arrays, conv(arrays, out=bad))
    assert np.isnan(bad).all()


def test_out_overlaps_x(rng, arrays):
    # One buffer: x at its start, out starting inside x (a view into the same memory).
    y_size, x_size = int(np.prod(Y_SHAPE)), int(np.prod(X_SHAPE))
    buf = rng.standard_normal(x_size + y_size, dtype=np.float32)
    x = buf[:x_size].reshape(X_SHAPE)
    out = buf[x_size - 10:x_size - 10 + y_size].reshape(Y_SHAPE)
    before = buf.copy()
    rejects(ValueError, r"^out overlaps x", arrays, lambda: pyooc.conv_forward(x, arrays["w"], out=out, backend="host"))
    assert np.array_equal(buf, before)


def test_out_is_x(rng, arrays):
    x = rng.standard_normal((1, 2, 5, 5), dtype=np.float32)
    w = rng.standard_normal((2, 2, 1, 1), dtype=np.float32)  # y has x's shape
    before = x.copy()
    rejects(ValueError, r"^out overlaps x", arrays, lambda: pyooc.conv_forward(x, w, out=x, backend="host"))
    assert np.array_equal(x, before)


def test_out_overlaps_w(rng, arrays):
    y_size, w_size = int(np.prod(Y_SHAPE)), int(np.prod(W_SHAPE))
    buf = rng.standard_normal(w_size + y_size, dtype=np.float32)
    w = buf[y_size:].reshape(W_SHAPE)
    out = buf[5:5 + y_size].reshape(Y_SHAPE)  # its tail overlaps w's head
    before = buf.copy()
    rejects(ValueError, r"^out overlaps w", arrays, lambda: pyooc.conv_forward(arrays["x"], w, out=out, backend="host"))
    assert np.array_equal(buf, before)


def test_out_overlaps_bias(rng, arrays):
    y_size = int(np.prod(Y_SHAPE))
    buf = rng.standard_normal(y_size + 2, dtype=np.float32)
    out = buf[:y_size].reshape(Y_SHAPE)
    bias = buf[y_size - 2:]
    before = buf.copy()
    rejects(ValueError, r"^out overlaps bias", arrays, conv(arrays, out=out, bias=bias))
    assert np.array_equal(buf, before)


def test_out_disjoint_views_of_one_buffer_are_fine(rng):
    """Sharing a base buffer without overlapping is allowed (and must give the right answer)."""
    x_size, y_size = int(np.prod(X_SHAPE)), int(np.prod(Y_SHAPE))
    buf = rng.standard_normal(x_size + y_size, dtype=np.float32)
    x = buf[:x_size].reshape(X_SHAPE)
    out = buf[x_size:].reshape(Y_SHAPE)
    w = rng.standard_normal(W_SHAPE, dtype=np.float32)
    ref = reference_conv(x, w)
    y = pyooc.conv_forward(x, w, out=out, backend="host")
    assert y is out and rel_err(y, ref) < 1e-5


@pytest.mark.parametrize("beta", [1.0, -0.5, 1e-30])
def test_beta_without_out(arrays, beta):
    rejects(ValueError, r"beta != 0 needs out=", arrays, conv(arrays, beta=beta))


# --------------------------------------------------------------------------------------------
# memory_limit, backend, device


@pytest.mark.parametrize("limit, exc", [
    ("lots", ValueError), ("12XB", ValueError), ("", ValueError), ("1.5.2GiB", ValueError), ("-5MiB", ValueError),
    (-5, ValueError), (0, ValueError), ("0", ValueError), (0.0, ValueError), (float("nan"), ValueError),
    (float("inf"), ValueError), (True, TypeError), (False, TypeError), ([1], TypeError), (object(), TypeError),
])
def test_bad_memory_limit(arrays, limit, exc):
    rejects(exc, r"memory_limit", arrays, conv(arrays, memory_limit=limit))
    with pytest.raises(exc, match="memory_limit"):
        pyooc.plan_conv_forward(X_SHAPE, W_SHAPE, memory_limit=limit, backend="host")
    with pytest.raises(exc, match="memory_limit"):
        pyooc.parse_memory_limit(limit)


@pytest.mark.parametrize("limit, exc", [("lots", ValueError), (-5, ValueError), (0, ValueError), (True, TypeError),
                                        ([1], TypeError)])
def test_bad_default_memory_limit_leaves_default(limit, exc):
    pyooc.set_memory_limit(None)
    with pytest.raises(exc, match="memory_limit"):
        pyooc.set_memory_limit(limit)
    assert pyooc.get_memory_limit() is None


def test_impossible_budget(rng, arrays):
    # A 9x9 kernel: even 1-element tiles need 512 B (x) + 512 B (w) + 256 B (y) slots.
    x, w, b = random_problem(rng, (2, 3, 12, 12), (4, 3, 9, 9), bias=True)
    out = np.full((2, 4, 4, 4), np.nan, dtype=np.float32)
    err = rejects(MemoryError, r"needs", dict(arrays, x2=x, w2=w, b2=b, out2=out),
                  lambda: pyooc.conv_forward(x, w, bias=b, memory_limit=1000, out=out, backend="host"))
    assert re.search(r"needs .*\(\d+ bytes", str(err)), str(err)
    assert "memory_limit" in str(err) and "1000 B" in str(err)
    assert np.isnan(out).all(), "out was written by a call that failed"
    with pytest.raises(MemoryError, match="needs"):
        pyooc.plan_conv_forward(x.shape, w.shape, bias=True, memory_limit=1000, backend="host")
    needed = int(re.search(r"\((\d+) bytes", str(err)).group(1))
    assert needed > 1000
    pyooc.conv_forward(x, w, bias=b, memory_limit=needed, out=out, backend="host")
    assert rel_err(out, reference_conv(x, w, b)) < 1e-5


@pytest.mark.parametrize("backend", ["gpu", "CUDA", "", None, "cpu"])
def test_bad_backend(arrays, backend):
    rejects(ValueError, r"^backend must be one of", arrays, conv(arrays, backend=backend))
    with pytest.raises(ValueError, match="^backend must be one of"):
        pyooc.plan_conv_forward(X_SHAPE, W_SHAPE, backend=backend)


def test_cuda_backend_without_device_or_bad_device(arrays):
    if not HAS_GPU:
        rejects(ValueError, r"backend 'cuda' was asked for, but no CUDA device is available", arrays,
                conv(arrays, backend="cuda"))
        with pytest.raises(ValueError, match="no CUDA device"):
            pyooc.plan_conv_forward(X_SHAPE, W_SHAPE, backend="cuda")
    else:
        rejects(ValueError, r"device 99 is out of range", arrays, conv(arrays, backend="cuda", device=99))
        rejects(ValueError, r"device -1 is out of range", arrays, conv(arrays, backend="cuda", device=-1))


def test_plan_dtype_other_than_float32():
    with pytest.raises(TypeError, match="dtype must be float32"):
        pyooc.plan_conv_forward(X_SHAPE, W_SHAPE, dtype="float64", backend="host")
    with pytest.raises(TypeError, match="x_shape"):
        pyooc.plan_conv_forward(5, W_SHAPE, backend="host")
    with pytest.raises(TypeError, match="w_shape"):
        pyooc.plan_conv_forward(X_SHAPE, (4, 3, 3.5, 3), backend="host")


def test_inject_fault_rejects_unknown_site():
    with pytest.raises(ValueError, match="copy.*conv|where"):
        pyooc._native.inject_fault("disk", 1)
