"""Argument checking of activation, softmax and add_tensor: errors name the argument, unknown modes
list the valid ones, nothing runs on bad input."""

import numpy as np
import pytest

import pyooc

X = np.ones((2, 3, 4, 4), dtype=np.float32)


@pytest.mark.parametrize("call", [
    lambda: pyooc.activation_forward(X, "mish"),
    lambda: pyooc.activation_backward(X, X, X, "mish"),
    lambda: pyooc.plan_activation_forward(X.shape, backend="host") and pyooc.activation_forward(X, "Relu"),
])
def test_unknown_activation_mode_lists_valid(call):
    with pytest.raises(ValueError, match="activation mode must be one of 'relu', 'sigmoid', 'tanh', "
                                         "'clipped_relu', 'elu', 'swish', 'gelu', 'leaky_relu'"):
        call()


@pytest.mark.parametrize("call", [
    lambda: pyooc.softmax_forward(X, mode="spatial"),
    lambda: pyooc.softmax_backward(X, X, mode="spatial"),
    lambda: pyooc.plan_softmax_forward(X.shape, mode="spatial", backend="host"),
])
def test_unknown_softmax_mode_lists_valid(call):
    with pytest.raises(ValueError, match="softmax mode must be one of 'channel', 'instance'; got 'spatial'"):
        call()


def test_mode_must_be_str():
    with pytest.raises(TypeError, match="mode must be a str"):
        pyooc.activation_forward(X, 3)
    with pytest.raises(TypeError, match="mode must be a str"):
        pyooc.softmax_forward(X, mode=None)


def test_clipped_relu_needs_coef():
    with pytest.raises(ValueError, match="needs coef .the ceiling."):
        pyooc.activation_forward(X, "clipped_relu", backend="host")
    with pytest.raises(TypeError, match="coef must be a real number"):
        pyooc.activation_forward(X, "elu", coef="1", backend="host")


@pytest.mark.parametrize("name, call", [
    ("x", lambda bad: pyooc.activation_forward(bad, "relu", backend="host")),
    ("dy", lambda bad: pyooc.activation_backward(X, bad, X, "relu", backend="host")),
    ("x", lambda bad: pyooc.softmax_forward(bad, backend="host")),
    ("y", lambda bad: pyooc.softmax_backward(bad, X, backend="host")),
    ("a", lambda bad: pyooc.add_tensor(bad, X, backend="host")),
    ("c", lambda bad: pyooc.add_tensor(X, bad, backend="host")),
])
def test_dtype_and_contiguity_name_the_argument(name, call):
    with pytest.raises(TypeError, match=f"{name} must have dtype float32"):
        call(X.astype(np.float64))
    with pytest.raises(ValueError, match=f"{name} must be C-contiguous"):
        call(np.ones((2, 3, 4, 8), dtype=np.float32)[..., ::2])
    with pytest.raises(TypeError, match=f"{name} must be an array"):
        call(None)


def test_shape_mismatch_names_the_arguments():
    with pytest.raises(ValueError, match=r"dy has shape \[2, 3, 4, 5\], expected \[2, 3, 4, 4\] \(the shape of y\)"):
        pyooc.activation_backward(X, np.ones((2, 3, 4, 5), np.float32), X, "relu", backend="host")
    with pytest.raises(ValueError, match="x has shape"):
        pyooc.activation_backward(X, X, np.ones(3, np.float32), "relu", backend="host")
    with pytest.raises(ValueError, match="dy has shape"):
        pyooc.softmax_backward(X, X[:1].copy(), backend="host")
    with pytest.raises(ValueError, match="x must have at least 2 dimensions"):
        pyooc.softmax_forward(np.ones(5, np.float32), backend="host")


def test_add_tensor_broadcast_errors():
    with pytest.raises(ValueError, match=r"a of shape \[2, 3, 1, 1\] does not broadcast to c of shape "
                                         r"\[4, 3, 4, 4\]: dimension 0 of a must be 1 or 4, got 2"):
        pyooc.add_tensor(np.ones((2, 3, 1, 1), np.float32), np.ones((4, 3, 4, 4), np.float32), backend="host")
    with pytest.raises(ValueError, match="a must have as many dimensions as c"):
        pyooc.add_tensor(np.ones((3,), np.float32), X, backend="host")
    with pytest.raises(ValueError, match="c must have at most 5 dimensions"):
        pyooc.add_tensor(np.ones((1,) * 6, np.float32), np.ones((1,) * 6, np.float32), backend="host")
    with pytest.raises(TypeError, match="alpha must be a real number"):
        pyooc.add_tensor(X, X, alpha="2", backend="host")


def test_out_checks():
    with pytest.raises(ValueError, match=r"out has shape \[2, 3\], expected \[2, 3, 4, 4\]"):
        pyooc.activation_forward(X, "relu", out=np.empty((2, 3), np.float32), backend="host")
    x = X.copy()
    with pytest.raises(ValueError, match="out overlaps x"):
        pyooc.activation_forward(x, "relu", out=x[:], backend="host")  # a view, not x itself: not in place
    with pytest.raises(ValueError, match="out overlaps a"):
        pyooc.add_tensor(x, X, out=x, backend="host")
    with pytest.raises(ValueError, match="out overlaps y"):
        pyooc.softmax_backward(x, X, out=x, backend="host")  # in place is allowed over dy only
    with pytest.raises(TypeError, match="out must have dtype float32"):
        pyooc.softmax_forward(X, out=np.empty(X.shape), backend="host")


def test_backend_and_budget_errors():
    with pytest.raises(ValueError, match="backend must be one of"):
        pyooc.activation_forward(X, "relu", backend="gpu")
    with pytest.raises(MemoryError, match="memory_limit of .* is too small"):
        pyooc.activation_forward(X, "relu", memory_limit=100, backend="host")
    with pytest.raises(TypeError, match="dtype must be float32, float16 or bfloat16, got float64"):
        pyooc.plan_softmax_forward(X.shape, dtype="float64", backend="host")
