"""Helpers for the fused-function tests (test_fused_*.py): float64 references built from the
unfused references, the same result composed from pyooc's unfused operations, and one checked call.

A fused function must equal both: the float64 reference (its numerics) and the composition of the
unfused pyooc ops it replaces (its contract), while moving fewer bytes than that composition."""

import numpy as np

import pyooc
from conftest import expected_traffic, output_shape, reference_conv, rel_err
from layers_helpers import COEF, ref_activation

TOL = 1e-5
ACTIVATIONS = ["identity", "relu", "sigmoid", "tanh", "clipped_relu", "elu", "swish"]


def coef_of(activation):
    return None if activation == "identity" else COEF[activation]


def activated(v, activation):
    return np.asarray(v, dtype=np.float64) if activation == "identity" else ref_activation(v, activation,
                                                                                          coef_of(activation))


def activation_err(got, ref, pre):
    """The error relative to the larger of ||ref|| and the norm before the activation: the
    activations are about 1-Lipschitz, so fp32 rounding before them carries through at that scale,
    also where they saturate (sigmoid(-400) is 0 in fp32, 1e-174 in fp64)."""
    ref, pre = np.asarray(ref, dtype=np.float64), np.asarray(pre, dtype=np.float64)
    scale = max(np.linalg.norm(ref), np.linalg.norm(pre), 1e-300)
    return float(np.linalg.norm(np.asarray(got, dtype=np.float64) - ref) / scale)


def random_forward(rng, x_shape, w_shape, **geometry):
    """float32 x, w (scaled so conv is O(1)), bias and z (y's shape)."""
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = (rng.standard_normal(w_shape, dtype=np.float32) / np.float32(np.sqrt(np.prod(w_shape[1:])))).astype(
        np.float32)
    b = rng.standard_normal(w_shape[0], dtype=np.float32)
    z = rng.standard_normal(output_shape(x_shape, w_shape, **geometry), dtype=np.float32)
    return x, w, b, z


def reference_bias_activation(x, w, b, z, activation, alpha1=1.0, alpha2=0.0, **geometry):
    """(y, pre-activation) in float64."""
    pre = reference_conv(x, w, b, alpha=alpha1, beta=alpha2, out=z, **geometry)
    return activated(pre, activation), pre


def composed_bias_activation(x, w, b, z, activation, alpha1=1.0, alpha2=0.0, memory_limit=None, backend="host",
                             **geometry):
    """The unfused sequence the fused forward replaces: conv_forward, add_tensor (z, bias),
    activation_forward. Returns (y, bytes moved H2D + D2H over the sequence)."""
    moved = 0

    def count():
        nonlocal moved
        stats = pyooc.last_stats()
        moved += stats["bytes_h2d"] + stats["bytes_d2h"]

    y = pyooc.conv_forward(x, w, alpha=alpha1, memory_limit=memory_limit, backend=backend, **geometry)
    count()
    if z is not None and alpha2 != 0.0:
        pyooc.add_tensor(z, y, alpha=alpha2, beta=1.0, out=y, memory_limit=memory_limit, backend=backend)
        count()
    if b is not None:
        pyooc.add_tensor(b.reshape((1, -1) + (1,) * (x.ndim - 2)), y, out=y, memory_limit=memory_limit,
                         backend=backend)
        count()
    if activation != "identity":
        pyooc.activation_forward(y, activation, coef=coef_of(activation), out=y, memory_limit=memory_limit,
                                 backend=backend)
        count()
    return y, moved


def run_bias_activation_checked(x, w, b, z, activation, *, alpha1=1.0, alpha2=0.0, memory_limit=None,
                                backend="host", direct=False, in_place=False, tol=TOL, **geometry):
    """conv_bias_activation_forward into a NaN-poisoned out (or into z, in_place), checked: the
    float64 reference, inputs unwritten, every output written, last_stats agreeing with the plan
    (traffic from its chunk list), budget held. Returns (y, plan)."""
    before = [None if a is None else a.copy() for a in (x, w, b, z)]
    ref, pre = reference_bias_activation(x, w, b, z, activation, alpha1, alpha2, **geometry)
    out = z if in_place else np.full(ref.shape, np.nan, dtype=np.float32)
    y = pyooc.conv_bias_activation_forward(x, w, b, z=z, activation=activation, coef=coef_of(activation),
                                           alpha1=alpha1, alpha2=alpha2, out=out, memory_limit=memory_limit,
                                           backend=backend, **geometry)
    assert y is out
    assert not np.isnan(y).any(), f"{int(np.isnan(y).sum())} of {y.size} outputs were never written"
    err = activation_err(y, ref, pre)
    assert err < tol, f"relative error {err:.3e} >= {tol}"
    for a, a0 in zip((x, w, b) + (() if in_place else (z,)), before):
        assert a is None or np.array_equal(a, a0), "conv_bias_activation_forward wrote to an input"
    stats = pyooc.last_stats()
    plan = stats["plan"]
    assert plan.operation == "conv_bias_activation_forward" and plan.fused
    assert plan.backend == backend
    beta = alpha2 if z is not None else 0.0
    h2d, d2h = expected_traffic(plan, direct=bool(direct), bias=b is not None, beta=beta)
    assert (stats["bytes_h2d"], stats["bytes_d2h"]) == (h2d, d2h), "traffic disagrees with the chunk list"
    if not direct:
        assert stats["bytes_h2d"] == plan.bytes_h2d
    assert stats["bytes_d2h"] == plan.bytes_d2h == y.nbytes, "y crosses back once"
    assert stats["chunks"] == plan.num_chunks
    assert stats["device_bytes_reserved"] == plan.peak_device_bytes <= plan.memory_limit
    return y, plan


__all__ = ["ACTIVATIONS", "TOL", "activation_err", "coef_of", "composed_bias_activation", "random_forward",
           "reference_bias_activation", "rel_err", "run_bias_activation_checked"]
