"""Device-resident arrays (__cuda_array_interface__: CuPy, torch CUDA) for every function, on
the CPU: what is checked before any device memory is touched. The protocol is read with fake
producers whose addresses are never dereferenced; the GPU half (tests/test_device_arrays_gpu.py)
runs the calls on real device memory."""

import numpy as np
import pytest

import pyooc
from pyooc._device_arrays import DeviceArray, WHOLE_DEVICE, device_array


class FakeCuda:
    """What a CUDA array exports: its protocol dict and nothing else (no buffer, no __array__)."""

    def __init__(self, shape, typestr="<f4", address=0xDEAD0000, readonly=False, **more):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (address, readonly),
                                         "version": 3, **more}


def test_the_protocol_becomes_a_device_view():
    view = device_array(FakeCuda((2, 3, 4), stream=7), "x", (np.dtype(np.float32),))
    assert (view.shape, view.dtype, view.device_address, view.stream) == ((2, 3, 4), np.float32, 0xDEAD0000, 7)
    assert view.nbytes == 96 and view.size == 24 and view.ndim == 3
    flat = view.reshape(24)
    assert flat.shape == (24,) and flat.device_address == view.device_address and flat.owner is view.owner


def test_the_stream_to_wait_for():
    dtypes = (np.dtype(np.float32),)
    assert device_array(FakeCuda((2,)), "x", dtypes).stream == WHOLE_DEVICE  # none named: the whole device
    assert device_array(FakeCuda((2,), stream=None), "x", dtypes).stream is None  # the producer says: none needed
    assert device_array(FakeCuda((2,), stream=2), "x", dtypes).stream == 2


def test_contiguous_strides_are_accepted_and_others_refused():
    dtypes = (np.dtype(np.float32),)
    device_array(FakeCuda((2, 3), strides=(12, 4)), "x", dtypes)
    device_array(FakeCuda((1, 3), strides=(999, 4)), "x", dtypes)  # a size-1 dimension's stride is free
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        device_array(FakeCuda((2, 3), strides=(4, 8)), "x", dtypes)


@pytest.mark.parametrize("fake, error, message", [
    (FakeCuda((2, 3), typestr="<f8"), TypeError, "x must have dtype float32.*'<f8'"),
    (FakeCuda((2, 0)), ValueError, "x must not be empty"),
    (FakeCuda((2, 3), mask=object()), ValueError, "x: masked device arrays"),
])
def test_what_the_protocol_allows_but_pyooc_does_not_serve(fake, error, message):
    with pytest.raises(error, match=message):
        device_array(fake, "x", pyooc._arrays.CONV_DTYPES)


def test_overlap_is_judged_by_address_range():
    a = DeviceArray(None, 1000, (10,), np.dtype(np.float32), False, None)
    assert a.overlaps(DeviceArray(None, 1036, (4,), np.dtype(np.float32), False, None))
    assert not a.overlaps(DeviceArray(None, 1040, (4,), np.dtype(np.float32), False, None))
    assert not a.overlaps(np.zeros(10, np.float32))


def test_the_host_backend_refuses_device_arrays_by_name(rng):
    x = rng.standard_normal((2, 3, 6, 6), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    with pytest.raises(TypeError, match="x is a device-resident array, but backend='host'"):
        pyooc.conv_forward(FakeCuda(x.shape), w, backend="host")
    with pytest.raises(TypeError, match="w is a device-resident array, but backend='host'"):
        pyooc.conv_forward(x, FakeCuda(w.shape), backend="host")
    with pytest.raises(TypeError, match="out is a device-resident array, but backend='host'"):
        pyooc.conv_forward(x, w, out=FakeCuda((2, 4, 4, 4)), backend="host")
    with pytest.raises(TypeError, match="dy is a device-resident array, but backend='host'"):
        pyooc.conv_backward_data(FakeCuda((2, 4, 4, 4)), w, x.shape, backend="host")
    with pytest.raises(TypeError, match="x is a device-resident array, but backend='host'"):
        pyooc.conv_backward_filter(FakeCuda(x.shape), np.zeros((2, 4, 4, 4), np.float32), w.shape, backend="host")
    with pytest.raises(TypeError, match="dy is a device-resident array, but backend='host'"):
        pyooc.conv_backward_bias(FakeCuda((2, 4, 4, 4)), backend="host")


def test_device_arguments_are_checked_as_host_ones_are(rng):
    x = rng.standard_normal((2, 3, 6, 6), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    with pytest.raises(TypeError, match="w must have the dtype of x"):
        pyooc.conv_forward(x, FakeCuda(w.shape, typestr="<f2"), backend="host")
    with pytest.raises(ValueError, match=r"out has shape \[2, 4, 5, 5\], expected \[2, 4, 4, 4\]"):
        pyooc.conv_forward(x, w, out=FakeCuda((2, 4, 5, 5)), backend="host")
    with pytest.raises(ValueError, match="out is read-only"):
        pyooc.conv_forward(x, w, out=FakeCuda((2, 4, 4, 4), readonly=True), backend="host")
    with pytest.raises(ValueError, match="out overlaps x"):
        pyooc.conv_forward(FakeCuda(x.shape, address=4096), w, out=FakeCuda((2, 4, 4, 4), address=4096 + 100),
                           backend="host")


def test_the_element_wise_layers_take_device_arrays_too():
    for call in (lambda: pyooc.activation_forward(FakeCuda((2, 3)), "relu", backend="host"),
                 lambda: pyooc.softmax_forward(FakeCuda((2, 3)), backend="host"),
                 lambda: pyooc.add_tensor(np.ones((1, 3), np.float32), FakeCuda((2, 3)), backend="host"),
                 lambda: pyooc.pool_forward(FakeCuda((1, 2, 4, 4)), 2, backend="host")):
        with pytest.raises(TypeError, match="is a device-resident array, but backend='host'"):
            call()


def test_in_place_on_a_device_array_is_allowed(rng):
    x = FakeCuda((2, 3))
    with pytest.raises(TypeError, match="x is a device-resident array, but backend='host'"):  # not "out overlaps x"
        pyooc.activation_forward(x, "relu", out=x, backend="host")


def test_batch_norm_gemm_and_the_fused_functions_take_device_arrays_too():
    x, w, vec = np.ones((2, 3, 4, 4), np.float32), np.ones((4, 3, 3, 3), np.float32), np.ones(3, np.float32)
    for call in (lambda: pyooc.matmul(FakeCuda((2, 3)), np.ones((3, 4), np.float32), backend="host"),
                 lambda: pyooc.linear_forward(np.ones((2, 3), np.float32), FakeCuda((4, 3)), backend="host"),
                 lambda: pyooc.batchnorm_forward_inference(FakeCuda(x.shape), vec, vec, vec, vec, backend="host"),
                 lambda: pyooc.batchnorm_forward_training(x, FakeCuda((3,)), vec, backend="host"),
                 lambda: pyooc.batchnorm_backward(x, x, vec, vec, vec, out=FakeCuda(x.shape), backend="host"),
                 lambda: pyooc.conv_bias_activation_forward(FakeCuda(x.shape), w, backend="host"),
                 lambda: pyooc.conv_bias_activation_pooling_forward(x, w, pool_kernel=2, out=FakeCuda((2, 4, 1, 1)),
                                                                    backend="host"),
                 lambda: pyooc.deconv_bias_activation_forward(FakeCuda(x.shape), FakeCuda((3, 2, 3, 3)),
                                                              backend="host"),
                 lambda: pyooc.conv_backward_data_filter_bias(x, FakeCuda((2, 4, 2, 2)), w, backend="host")):
        with pytest.raises(TypeError, match="is a device-resident array, but backend='host'"):
            call()


def test_their_device_arguments_are_checked_before_the_call():
    x, vec = np.ones((2, 3, 4, 4), np.float32), np.ones(3, np.float32)
    with pytest.raises(ValueError, match=r"scale must have shape \[3\] \(one per channel\), got \[4\]"):
        pyooc.batchnorm_forward_inference(x, FakeCuda((4,)), vec, vec, vec)
    with pytest.raises(TypeError, match="running_mean must be a writable C-contiguous float32 array"):
        pyooc.batchnorm_forward_training(x, vec, vec, running_mean=FakeCuda((3,), readonly=True),
                                         running_var=vec.copy())
    with pytest.raises(TypeError, match="bias must have dtype float32"):
        pyooc.batchnorm_forward_inference(x, vec, FakeCuda((3,), typestr="<f2"), vec, vec)
    with pytest.raises(TypeError, match="mat2 must have the dtype of mat1"):
        pyooc.matmul(np.ones((2, 3), np.float32), FakeCuda((3, 4), typestr="<f2"))
    with pytest.raises(ValueError, match=r"out has shape \[2, 5\], expected \[2, 4\]"):
        pyooc.matmul(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), out=FakeCuda((2, 5)))
    z = FakeCuda((2, 4, 2, 2), address=4096)
    with pytest.raises(ValueError, match="out overlaps z"):  # another view of z's memory is not z
        pyooc.conv_bias_activation_forward(x, np.ones((4, 3, 3, 3), np.float32), z=z, alpha2=1.0,
                                           out=FakeCuda((2, 4, 2, 2), address=4096 + 4))
    with pytest.raises(ValueError, match="padding_mode='reflect' needs dy in host memory"):
        pyooc.conv_backward_data(FakeCuda((2, 4, 4, 4)), np.ones((4, 3, 3, 3), np.float32), x.shape, padding=1,
                                 padding_mode="reflect")


def test_host_arrays_go_in_as_before(rng):
    x = rng.standard_normal((2, 3, 6, 6), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    y = pyooc.conv_forward(x, w, backend="host")
    assert isinstance(y, np.ndarray) and y.shape == (2, 4, 4, 4)
