"""Device-resident arrays of other libraries (CuPy, torch CUDA, Numba, JAX: anything exporting
__cuda_array_interface__), read and written in place by the functions that take them: the
convolutions and their gradients, the activations, softmax, add_tensor and pooling. libooc copies each chunk from and to a device pointer as from
pinned memory (cudaMemcpyDefault, at device speed), so a CuPy x with a host w, or a host x with a
CuPy out=, all run without a staging copy of the whole tensor.

The protocol (version 2 and 3): shape, typestr, data = (address, read_only), strides (None for
C-contiguous), mask (must be None), stream (version 3: the producer's stream, which the consumer
waits for before reading; absent in version 2, as torch exports it, which then means the producer's
work may be on any stream: ready_device_arrays waits for the whole device).

What is refused, with the argument named: strides neither C-contiguous nor channels-last (the
functions that do not serve channels-last refuse that too: pyooc/_arrays.py's check_layout), masks (ValueError, as for host
arrays), a read-only array as out, the host backend (it computes on the CPU and cannot read device
memory), an array on another GPU than the call's `device`, and spreading over several devices (the
spread sums partial results in host memory)."""

import numpy as np

from pyooc._layouts import CHANNELS_FIRST, layouts_of

# What a call waits for before reading an array (DeviceArray.stream): a stream handle, as the
# protocol gives it; WHOLE_DEVICE (wait_for_stream's 0) where the producer names no stream; None
# where it says none is needed (version 3's explicit "stream": None).
WHOLE_DEVICE = 0


def is_device_array(array):
    return not isinstance(array, np.ndarray) and hasattr(array, "__cuda_array_interface__")


class DeviceArray:
    """A C-contiguous CUDA array as a binding takes it: its device address (device_address, the
    attribute pyooc/_native.pyx's _data looks for), shape and dtype, and the caller's object (owner)
    that keeps the memory alive and is what a call returns for out=; stream: what the call waits
    for before reading it (WHOLE_DEVICE, a stream handle, or None)."""

    __slots__ = ("owner", "device_address", "shape", "dtype", "readonly", "stream", "strides")

    def __init__(self, owner, device_address, shape, dtype, readonly, stream, strides=None):
        self.owner = owner
        self.device_address = device_address
        self.shape = tuple(shape)
        self.dtype = dtype
        self.readonly = readonly
        self.stream = stream
        # Byte strides, None for C-contiguous: dense in a layout pyooc/_layouts.py names (checked
        # by the function that takes it).
        self.strides = None if strides is None else tuple(strides)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def reshape(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        if int(np.prod(shape, dtype=np.int64)) != self.size:
            raise ValueError(f"cannot reshape a device array of {self.size} elements into shape {list(shape)}")
        if self.strides is not None and len(self.shape) >= 3:
            raise ValueError("cannot reshape a channels-last device array")
        return DeviceArray(self.owner, self.device_address, shape, self.dtype, self.readonly, self.stream)

    def overlaps(self, other):
        """Whether two arrays' bytes overlap (a host array never overlaps device memory)."""
        if not isinstance(other, DeviceArray):
            return False
        return (self.device_address < other.device_address + other.nbytes and
                other.device_address < self.device_address + self.nbytes)

    def __repr__(self):
        return (f"DeviceArray(shape={list(self.shape)}, dtype={self.dtype}, address={self.device_address:#x}, "
                f"owner={type(self.owner).__module__}.{type(self.owner).__name__})")


def device_array(array, name, dtypes, writable=False):
    """The DeviceArray viewing `array`'s device memory; TypeError/ValueError naming `name` for what
    the protocol allows but pyooc does not serve."""
    try:
        interface = array.__cuda_array_interface__
    except Exception as exc:  # e.g. torch refuses bfloat16 and tensors that require grad
        raise TypeError(f"{name}: its __cuda_array_interface__ failed ({exc})") from exc
    try:
        dtype = np.dtype(interface["typestr"])
    except TypeError:
        dtype = None
    if dtype is None or dtype not in dtypes:
        names = ", ".join(str(d) for d in dtypes)
        raise TypeError(f"{name} must have dtype {names}, got typestr {interface['typestr']!r}")
    shape = tuple(int(d) for d in interface["shape"])
    if interface.get("mask") is not None:
        raise ValueError(f"{name}: masked device arrays are not supported")
    strides = interface.get("strides")
    if strides is not None and not layouts_of(shape, tuple(strides), dtype.itemsize):
        raise ValueError(f"{name} must be C-contiguous or channels-last (a contiguous copy on the device, e.g. "
                         f"cupy.ascontiguousarray({name}) or {name}.contiguous(), makes one)")
    if strides is not None and CHANNELS_FIRST in layouts_of(shape, tuple(strides), dtype.itemsize):
        strides = None  # C-contiguous after all (size-1 dimensions' strides do not matter)
    if int(np.prod(shape, dtype=np.int64)) == 0:
        raise ValueError(f"{name} must not be empty, got shape {list(shape)}")
    address, readonly = interface["data"]
    if writable and readonly:
        raise ValueError(f"{name} is read-only")
    stream = WHOLE_DEVICE if "stream" not in interface else interface["stream"]
    return DeviceArray(array, int(address), shape, dtype, bool(readonly), stream, strides)


def caller_array(array):
    """What a call returns for an array it wrote: the caller's own object for a device array."""
    return array.owner if isinstance(array, DeviceArray) else array


def ready_device_arrays(arrays, options, native):
    """Checks the call's device arrays against where it runs (options: its CallOptions) and waits
    for their producers' work. arrays: name -> array (host arrays and None are skipped)."""
    device_arrays = {name: a for name, a in arrays.items() if isinstance(a, DeviceArray)}
    if not device_arrays:
        return
    first = next(iter(device_arrays))
    if options.backend == "host":
        raise TypeError(f"{first} is a device-resident array, but backend='host' computes on the CPU, which "
                        "cannot read device memory: use backend='cuda' or 'auto', or move it to the host")
    if len(options.devices) > 1:
        raise ValueError(f"devices: a call with device-resident arrays ({first}) runs on the device that holds "
                         f"them, not spread over {list(options.devices)}")
    device = options.devices[0] if options.devices else options.device
    waited = set()
    for name, array in device_arrays.items():
        ordinal = native.device_memory_ordinal(array.device_address)
        if ordinal < 0:
            raise TypeError(f"{name} exports __cuda_array_interface__, but CUDA does not know its address "
                            f"{array.device_address:#x} as device memory")
        if ordinal != device:
            raise ValueError(f"{name} is on cuda:{ordinal}, but the call runs on device {device} "
                             f"(pass device={ordinal})")
        if array.stream is not None and (array.stream, ordinal) not in waited:
            waited.add((array.stream, ordinal))
            native.wait_for_stream(int(array.stream), ordinal)
