"""float64 references of the layers (activation, softmax, add_tensor, pooling and its gradient)
and budget search for plans that split the way a test wants."""

import math

import numpy as np

import pyooc

ACTIVATIONS = ["relu", "sigmoid", "tanh", "clipped_relu", "elu", "swish", "gelu", "leaky_relu"]
COEF = {"relu": None, "sigmoid": None, "tanh": None, "clipped_relu": 0.7, "elu": 1.3, "swish": 0.8, "gelu": None,
        "leaky_relu": 0.2}


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def normal_cdf(v):
    return 0.5 * (1.0 + _erf(v / math.sqrt(2.0)))


def ref_activation(x, mode, coef):
    x = np.asarray(x, dtype=np.float64)
    if mode == "relu":
        return np.maximum(x, 0)
    if mode == "sigmoid":
        return sigmoid(x)
    if mode == "tanh":
        return np.tanh(x)
    if mode == "clipped_relu":
        return np.minimum(np.maximum(x, 0), coef)
    if mode == "elu":
        return np.where(x > 0, x, coef * np.expm1(np.minimum(x, 0)))
    if mode == "swish":
        return x * sigmoid(coef * x)
    if mode == "gelu":  # exact (torch's approximate="none")
        return x * normal_cdf(x)
    if mode == "leaky_relu":
        return np.where(x > 0, x, coef * x)
    raise ValueError(mode)


def ref_activation_grad(x, dy, mode, coef):
    """dy * f'(x), the derivative taken analytically (0 at relu's kink, as cuDNN)."""
    x, dy = np.asarray(x, dtype=np.float64), np.asarray(dy, dtype=np.float64)
    if mode == "relu":
        d = (x > 0).astype(np.float64)
    elif mode == "sigmoid":
        s = sigmoid(x)
        d = s * (1 - s)
    elif mode == "tanh":
        d = 1 - np.tanh(x) ** 2
    elif mode == "clipped_relu":
        d = ((x > 0) & (x < coef)).astype(np.float64)
    elif mode == "elu":
        d = np.where(x > 0, 1.0, coef * np.exp(np.minimum(x, 0)))
    elif mode == "swish":
        s = sigmoid(coef * x)
        d = s + coef * x * s * (1 - s)
    elif mode == "gelu":
        d = normal_cdf(x) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    elif mode == "leaky_relu":
        d = np.where(x > 0, 1.0, coef)
    else:
        raise ValueError(mode)
    return dy * d


def softmax_axes(x, mode):
    return (1,) if mode == "channel" else tuple(range(1, x.ndim))


def ref_softmax(x, mode, log):
    x = np.asarray(x, dtype=np.float64)
    axes = softmax_axes(x, mode)
    z = x - x.max(axis=axes, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=axes, keepdims=True))
    return z - lse if log else np.exp(z - lse)


def ref_softmax_grad(y, dy, mode, log):
    y, dy = np.asarray(y, dtype=np.float64), np.asarray(dy, dtype=np.float64)
    axes = softmax_axes(y, mode)
    if log:
        return dy - np.exp(y) * dy.sum(axis=axes, keepdims=True)
    return y * (dy - (dy * y).sum(axis=axes, keepdims=True))


def split_set(plan):
    return frozenset(d for d, pieces in plan.splits.items() if pieces > 1)


def budget_where(plan_fn, want, start=1 << 24):
    """The largest budget (scanning down by 7%) whose plan splits exactly the dims `want`
    (a frozenset of plan.splits keys; "c" and "k" are the same axis for layers)."""
    budget = start
    while budget > 256:
        try:
            plan = plan_fn(budget)
        except MemoryError:
            return None
        got = split_set(plan) - {"k"}
        if got == want:
            return budget
        budget = int(budget * 0.93)
    return None


def poisoned(shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype=dtype)


def ref_pool(x, kernel, stride, padding, mode):
    x = np.asarray(x, dtype=np.float64)
    sd = x.ndim - 2
    out = [(x.shape[2 + d] + 2 * padding[d] - kernel[d]) // stride[d] + 1 for d in range(sd)]
    y = np.empty(x.shape[:2] + tuple(out))
    for idx in np.ndindex(*out):
        sl = []
        for d in range(sd):
            b = idx[d] * stride[d] - padding[d]
            sl.append(slice(max(b, 0), min(b + kernel[d], x.shape[2 + d])))
        flat = x[(slice(None), slice(None)) + tuple(sl)].reshape(x.shape[0], x.shape[1], -1)
        if mode == "max":
            v = flat.max(-1)
        elif mode == "avg":
            v = flat.sum(-1) / np.prod(kernel)
        else:
            v = flat.mean(-1)
        y[(slice(None), slice(None)) + idx] = v
    return y


def ref_pool_grad(x, dy, kernel, stride, padding, mode):
    x, dy = np.asarray(x, dtype=np.float64), np.asarray(dy, dtype=np.float64)
    sd = x.ndim - 2
    dx = np.zeros_like(x)
    for idx in np.ndindex(*dy.shape[2:]):
        sl = []
        for d in range(sd):
            b = idx[d] * stride[d] - padding[d]
            sl.append(slice(max(b, 0), min(b + kernel[d], x.shape[2 + d])))
        key = (slice(None), slice(None)) + tuple(sl)
        win = x[key]
        g = dy[(slice(None), slice(None)) + idx]
        flat = np.zeros(win.shape[:2] + (int(np.prod(win.shape[2:])),))
        if mode == "max":
            am = win.reshape(flat.shape).argmax(-1)
            np.put_along_axis(flat, am[..., None], g[..., None], axis=-1)
        else:
            div = np.prod(kernel) if mode == "avg" else flat.shape[-1]
            flat[...] = (g / div)[..., None]
        dx[key] += flat.reshape(win.shape)
    return dx
