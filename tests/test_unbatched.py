"""Unbatched input (C, *spatial), accepted where torch accepts it: conv_forward and pool_forward."""

import numpy as np
import pyooc
import pytest

from conftest import reference_conv


def test_conv_forward_unbatched_matches_the_batch_of_one(rng):
    x = rng.standard_normal((3, 11, 10), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    b = rng.standard_normal(4, dtype=np.float32)
    y = pyooc.conv_forward(x, w, b, padding=1, memory_limit="4KiB", backend="host")
    assert y.shape == (4, 11, 10)
    ref = reference_conv(x[None].astype(np.float64), w.astype(np.float64), padding=(1, 1))[0] + b[:, None, None]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(y, pyooc.conv_forward(x[None], w, b, padding=1, backend="host")[0])


def test_conv_forward_unbatched_into_out(rng):
    x = rng.standard_normal((2, 9), dtype=np.float32)
    w = rng.standard_normal((3, 2, 3), dtype=np.float32)
    out = np.full((3, 7), np.nan, np.float32)
    y = pyooc.conv_forward(x, w, out=out, backend="host")
    assert np.shares_memory(y, out) and y.shape == (3, 7) and not np.isnan(out).any()


def test_pool_forward_unbatched_with_a_kernel_tuple(rng):
    x = rng.standard_normal((3, 8, 9), dtype=np.float32)
    y = pyooc.pool_forward(x, (2, 2), backend="host")
    assert y.shape == (3, 4, 4)
    np.testing.assert_array_equal(y, pyooc.pool_forward(x[None], (2, 2), backend="host")[0])
    # An int kernel keeps the old meaning: (N, C, L), one spatial dim.
    assert pyooc.pool_forward(x, 3, backend="host").shape == (3, 8, 3)


def test_unbatched_rank_errors_still_name_the_argument(rng):
    with pytest.raises(ValueError, match="x"):
        pyooc.conv_forward(rng.standard_normal((9,), dtype=np.float32), rng.standard_normal((3, 2, 3), dtype=np.float32),
                           backend="host")
