"""float64 references of batch normalization (training forward and backward) and the check that a
plan's chunks tile x once, shared by the batch-norm tests of every dtype."""

import numpy as np


def axes(x):
    return (0,) + tuple(range(2, x.ndim))


def per_channel(v, x):
    return np.asarray(v, np.float64).reshape((1, -1) + (1,) * (x.ndim - 2))


def ref_training(x, scale, bias, eps):
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes(x))
    var = x64.var(axis=axes(x))
    y = (x64 - per_channel(mean, x)) / np.sqrt(per_channel(var, x) + eps) * per_channel(scale, x) + per_channel(bias, x)
    return y, mean, var


def ref_backward(x, dy, scale, mean, invstd):
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    count = x.size // x.shape[1]
    xhat = (x64 - per_channel(mean, x)) * per_channel(invstd, x)
    sdy = dy64.sum(axis=axes(x))
    sdyx = (dy64 * xhat).sum(axis=axes(x))
    dx = per_channel(np.asarray(scale, np.float64) * invstd, x) * (
        dy64 - per_channel(sdy / count, x) - xhat * per_channel(sdyx / count, x))
    return dx, sdyx, sdy


def check_tiles(plan, shape):
    covered = np.zeros(shape, np.int32)
    for ch in plan.chunks:
        index = (slice(*ch["n"]), slice(*ch["c"])) + tuple(slice(*r) for r in ch["spatial"][:len(shape) - 2])
        covered[index] += 1
    assert (covered == 1).all()
    assert plan.peak_device_bytes <= plan.memory_limit
