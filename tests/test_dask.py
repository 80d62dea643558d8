"""pyooc.dask against the single pyooc call on the host backend: the same bits (the backward
filter's block sums to float32 rounding), with dask's threaded scheduler and with a
dask.distributed LocalCluster of two worker processes."""

import numpy as np
import pytest

da = pytest.importorskip("dask.array", reason="pyooc[dask] is not installed")
import pyooc  # noqa: E402
import pyooc.dask as pdask  # noqa: E402

# (x shape, w shape, stride, padding, dilation, chunks of x): strides above and below the kernel,
# uneven chunks, 1-D to 3-D, halos wider than a stride.
CONV_CASES = [
    ((3, 4, 17, 19), (5, 4, 3, 3), 1, 1, 1, (2, 4, 5, 6)),
    ((2, 3, 23, 20), (4, 3, 3, 2), 2, (1, 0), 1, (1, 3, 7, 4)),
    ((2, 3, 30), (4, 3, 5), 3, 2, 2, (1, 3, 7)),
    ((2, 3, 31), (4, 3, 2), 3, 0, 1, (2, 3, 5)),  # kernel narrower than the stride: no halo
    ((2, 2, 9, 10, 11), (3, 2, 3, 3, 3), (1, 2, 1), 1, 1, (1, 2, 4, 3, 5)),
]


def inputs(rng, x_shape, w_shape):
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    return x, w, rng.standard_normal(w_shape[0], dtype=np.float32)


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation,chunks", CONV_CASES)
def test_conv_forward_blocks_equal_the_single_call(rng, x_shape, w_shape, stride, padding, dilation, chunks):
    x, w, b = inputs(rng, x_shape, w_shape)
    single = pyooc.conv_forward(x, w, b, stride=stride, padding=padding, dilation=dilation, backend="host")
    lazy = pdask.conv_forward(da.from_array(x, chunks=chunks), w, b, stride=stride, padding=padding,
                              dilation=dilation, backend="host")
    assert lazy.shape == single.shape and np.prod(lazy.numblocks) > 1
    np.testing.assert_array_equal(lazy.compute(scheduler="threads"), single)


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation,chunks", CONV_CASES)
def test_conv_backward_blocks_equal_the_single_call(rng, x_shape, w_shape, stride, padding, dilation, chunks):
    x, w, _ = inputs(rng, x_shape, w_shape)
    geometry = dict(stride=stride, padding=padding, dilation=dilation, backend="host")
    y_shape = pyooc.plan_conv_forward(x_shape, w_shape, **geometry).y_shape
    dy = rng.standard_normal(y_shape, dtype=np.float32)
    dx = pdask.conv_backward_data(da.from_array(dy, chunks=(1,) + dy.shape[1:]), w, x_shape, **geometry)
    np.testing.assert_array_equal(dx.compute(scheduler="threads"), pyooc.conv_backward_data(dy, w, x_shape, **geometry))
    dw = pdask.conv_backward_filter(da.from_array(x, chunks=chunks), da.from_array(dy, chunks=chunks), w_shape,
                                    **geometry).compute(scheduler="threads")
    single = pyooc.conv_backward_filter(x, dy, w_shape, **geometry)
    scale = np.abs(single).max()
    np.testing.assert_allclose(dw, single, rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("mode", ["max", "avg", "avg_exclude_pad"])
@pytest.mark.parametrize("kernel,stride,padding", [(3, 2, 1), (2, None, 0), ((3, 2), (1, 2), (1, 0))])
def test_pool_forward_blocks_equal_the_single_call(rng, mode, kernel, stride, padding):
    x = rng.standard_normal((3, 4, 17, 14), dtype=np.float32)
    single = pyooc.pool_forward(x, kernel, stride=stride, padding=padding, mode=mode, backend="host")
    lazy = pdask.pool_forward(da.from_array(x, chunks=(2, 3, 5, 6)), kernel, stride=stride, padding=padding,
                              mode=mode, backend="host")
    np.testing.assert_array_equal(lazy.compute(scheduler="threads"), single)


def test_activation_and_batchnorm_inference_blocks_equal_the_single_call(rng):
    x = rng.standard_normal((4, 6, 9, 7), dtype=np.float32)
    dx = da.from_array(x, chunks=(3, 4, 5, 3))
    for mode in ("relu", "gelu", "sigmoid"):
        np.testing.assert_array_equal(pdask.activation_forward(dx, mode, backend="host").compute(scheduler="threads"),
                                      pyooc.activation_forward(x, mode, backend="host"))
    scale, bias, mean = (rng.standard_normal(6, dtype=np.float32) for _ in range(3))
    var = rng.random(6, dtype=np.float32) + 0.5
    np.testing.assert_array_equal(
        pdask.batchnorm_forward_inference(dx, scale, bias, mean, var, eps=1e-3, backend="host").compute(),
        pyooc.batchnorm_forward_inference(x, scale, bias, mean, var, eps=1e-3, backend="host"))


def test_grouped_convolution_blocks_equal_the_single_call(rng):
    x, w, b = inputs(rng, (2, 6, 12, 10), (6, 2, 3, 3))
    geometry = dict(padding=1, groups=3, backend="host")
    single = pyooc.conv_forward(x, w, b, **geometry)
    lazy = pdask.conv_forward(da.from_array(x, chunks=(1, 6, 5, 4)), w, b, **geometry)
    np.testing.assert_array_equal(lazy.compute(scheduler="threads"), single)
    dy = rng.standard_normal(single.shape, dtype=np.float32)
    dx = pdask.conv_backward_data(da.from_array(dy, chunks=(1, 6, 12, 10)), w, x.shape, **geometry)
    np.testing.assert_array_equal(dx.compute(scheduler="threads"), pyooc.conv_backward_data(dy, w, x.shape, **geometry))
    dw = pdask.conv_backward_filter(da.from_array(x, chunks=(1, 6, 5, 4)), da.from_array(dy, chunks=(1, 6, 5, 4)),
                                    w.shape, **geometry).compute(scheduler="threads")
    single_dw = pyooc.conv_backward_filter(x, dy, w.shape, **geometry)
    np.testing.assert_allclose(dw, single_dw, rtol=0, atol=1e-5 * np.abs(single_dw).max())


def test_bad_input_names_the_problem(rng):
    with pytest.raises(TypeError, match="must be a dask.array.Array"):
        pdask.conv_forward(np.zeros((1, 1, 4, 4), np.float32), np.zeros((1, 1, 3, 3), np.float32))
    with pytest.raises(TypeError, match="float32"):
        pdask.activation_forward(da.zeros((2, 2, 2, 2), dtype=np.float64), "relu")
    with pytest.raises(ValueError, match="does not match w"):
        pdask.conv_forward(da.zeros((1, 2, 4, 4), dtype=np.float32), np.zeros((1, 3, 3, 3), np.float32))


def test_a_local_cluster_of_two_worker_processes(rng):
    distributed = pytest.importorskip("distributed", reason="pyooc[dask] is not installed")
    x, w, b = inputs(rng, (4, 3, 20, 18), (5, 3, 3, 3))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        lazy_x = da.from_array(x, chunks=(1, 3, 7, 9))
        y = pdask.conv_forward(lazy_x, w, b, padding=1, stride=(2, 1), backend="host")
        pooled = pdask.pool_forward(pdask.activation_forward(y, "relu", backend="host"), 2, backend="host")
        got_y, got_pooled = client.compute([y, pooled], sync=True)
        workers = client.run(lambda: __import__("os").getpid())
    assert len(set(workers.values())) == 2
    single_y = pyooc.conv_forward(x, w, b, padding=1, stride=(2, 1), backend="host")
    np.testing.assert_array_equal(got_y, single_y)
    np.testing.assert_array_equal(got_pooled, pyooc.pool_forward(pyooc.activation_forward(single_y, "relu",
                                                                                         backend="host"), 2,
                                                                 backend="host"))
