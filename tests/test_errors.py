"""CudaError and CudnnError: the message libooc gives, and the CUDA / cuDNN status code as .status."""

import pickle
import re

import pytest

import pyooc
from conftest import HAS_GPU

# The cudaError_t values a machine without a usable GPU reports (driver_types.h).
CUDA_STATUS_WITHOUT_GPU = {"cudaErrorInsufficientDriver": 35, "cudaErrorNoDevice": 100}


@pytest.mark.parametrize("cls", [pyooc.CudaError, pyooc.CudnnError])
def test_constructed_from_python(cls):
    e = cls("msg", 2)
    assert e.status == 2 and str(e) == "msg" and isinstance(e, RuntimeError)
    copy = pickle.loads(pickle.dumps(e))
    assert type(copy) is cls and copy.status == 2 and str(copy) == "msg"
    assert cls("msg").status is None


@pytest.mark.skipif(HAS_GPU, reason="needs a machine without a usable GPU")
@pytest.mark.parametrize("call", [lambda: pyooc.pinned_empty(16), lambda: pyooc.measure_link_bandwidth()],
                         ids=["pinned_empty", "measure_link_bandwidth"])
def test_cuda_status_without_gpu(call):
    with pytest.raises(pyooc.CudaError) as raised:
        call()
    e = raised.value
    names = re.findall(r"cudaError\w+", str(e))
    assert len(names) == 1 and names[0] in CUDA_STATUS_WITHOUT_GPU, str(e)
    assert isinstance(e.status, int) and e.status == CUDA_STATUS_WITHOUT_GPU[names[0]]
    assert e.args == (str(e),)  # the message alone, as before the status was added
