"""Which devices a call spreads its chunks over (libooc's Options::devices): per call
(`devices=` of the convolutions), a thread's choice for the calls it makes
(devices_for_this_thread: pyooc.torch's devices=) and the process default (set_devices). Each
device runs its own pipeline under the call's memory_limit; the plan's reduction groups are shared
out by chunk count weighted by each device's modelled speed, a reduction over every chunk (dw, db)
is split into partial sums added once at the end, and batch norm's per-chunk statistics are merged
once between its two passes (native/src/plan/device_shares.hpp). Operations that do not spread run
on the first device."""

import contextlib
import threading

from pyooc._arrays import as_int
from pyooc._loader import load_native

_native = load_native()
_default = None
_thread = threading.local()  # .devices: devices_for_this_thread's choice


def _checked(devices):
    """devices as a tuple of ordinals: None (one device: the call's `device`), "all" (every CUDA
    device present) or a sequence of ints (a device listed twice gets two pipelines; with
    backend="host", virtual devices 0 to 63)."""
    if devices is None:
        return None
    if isinstance(devices, str):
        if devices != "all":
            raise ValueError(f"devices must be None, 'all' or a list of device ordinals, got {devices!r}")
        return "all"
    try:
        items = tuple(devices)
    except TypeError:
        raise TypeError(f"devices must be None, 'all' or a list of device ordinals, got {type(devices).__name__}") \
            from None
    if not items:
        raise ValueError("devices must list at least one device")
    return tuple(as_int(d, "devices", 0, 2**31 - 1) for d in items)


def set_devices(devices):
    """The process default of every call's `devices=` (None: one device, as before)."""
    global _default
    _default = _checked(devices)


def get_devices():
    return _default


@contextlib.contextmanager
def devices_for_this_thread(devices):
    """While active, the calls this thread makes without devices= spread over `devices` (None:
    leave the choice as it is)."""
    previous = getattr(_thread, "devices", None)
    _thread.devices = _checked(devices) if devices is not None else previous
    try:
        yield
    finally:
        _thread.devices = previous


def call_devices(devices):
    """The ordinals a call runs on: its own devices=, else this thread's choice
    (devices_for_this_thread), else the process default; () for one device."""
    chosen = _checked(devices) if devices is not None else getattr(_thread, "devices", None) or _default
    if chosen is None:
        return ()
    if chosen == "all":
        return tuple(range(max(_native.device_count(), 1)))
    return chosen
