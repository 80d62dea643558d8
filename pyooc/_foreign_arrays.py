"""Arrays from other libraries as the numpy views pyooc's checks take (pyooc/_arrays.py).

- Buffer-protocol and __array_interface__ arrays (numpy, np.memmap, pinned_empty, torch CPU
  tensors through __array__): np.asarray, zero-copy.
- CPU DLPack producers (__dlpack__ with a CPU __dlpack_device__: torch CPU, JAX CPU, numpy):
  np.from_dlpack, zero-copy.
- Device-resident arrays: those with __cuda_array_interface__ (CuPy, torch CUDA, Numba) every
  function takes before they get here, reading them in place (pyooc/_device_arrays.py); here, where
  the call computes on the host, they are refused with an error saying so, never copied silently,
  and so are DLPack arrays on a device other than the host (JAX GPU), which export no address
  pyooc can read in place."""

import numpy as np

# DLPack's device types (dlpack.h): 1 CPU, 3 CUDA pinned host memory (a host address).
_DLPACK_HOST_DEVICES = (1, 3)
_DLPACK_DEVICE_NAMES = {2: "CUDA", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 10: "ROCm", 13: "CUDA managed"}


def device_resident_error(array, name, where):
    return TypeError(
        f"{name} is a device-resident array ({type(array).__module__}.{type(array).__name__} on {where}); "
        f"pyooc's numpy-level functions take host arrays (tensors that do not fit on the GPU live in host "
        f"memory) and do not copy silently: move it to the host first (e.g. cupy.asnumpy({name}), "
        f"{name}.cpu() for torch); pyooc reads device arrays in place where they export "
        f"__cuda_array_interface__ (CuPy, torch CUDA) and the call computes on a GPU")


def host_array(array, name):
    """A numpy array viewing `array`'s host memory, zero-copy; TypeError for device-resident arrays."""
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "__cuda_array_interface__"):
        raise device_resident_error(array, name, "a CUDA device")
    if hasattr(array, "__dlpack__") and hasattr(array, "__dlpack_device__"):
        device_type = int(array.__dlpack_device__()[0])
        if device_type not in _DLPACK_HOST_DEVICES:
            raise device_resident_error(array, name, _DLPACK_DEVICE_NAMES.get(device_type, f"DLPack device {device_type}"))
        if not (hasattr(array, "__array__") or hasattr(array, "__array_interface__")):
            return np.from_dlpack(array)
    return np.asarray(array)
