"""Memory limits: parsing "512MiB"-style strings and the process-wide default."""

import operator
import re

from pyooc._loader import load_native

_native = load_native()

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
MAX_BYTES = 2**64 - 1  # libooc's size_t
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_memory_limit(limit, name="memory_limit"):
    """Bytes from an int or a string like "512MiB", "2 GiB", "1.5GB", "4096"; None stays None."""
    if limit is None:
        return None
    if isinstance(limit, bool):
        raise TypeError(f"{name} must be a number of bytes or a string like '512MiB', got bool")
    if isinstance(limit, float):
        if limit != limit or limit in (float("inf"), float("-inf")):
            raise ValueError(f"{name} must be finite, got {limit}")
        nbytes = int(limit)
    elif isinstance(limit, str):
        match = _PATTERN.match(limit)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ValueError(
                f"{name}: could not parse {limit!r}; expected bytes or a size like '512MiB', '2GiB', '1.5GB'")
        value = float(match.group(1)) * _UNITS[unit]
        if value == float("inf"):
            raise ValueError(f"{name} must be finite, got {limit!r}")
        nbytes = int(value)
    else:
        try:
            nbytes = operator.index(limit)
        except TypeError:
            raise TypeError(
                f"{name} must be a number of bytes or a string like '512MiB', got {type(limit).__name__}") from None
    if nbytes <= 0:
        raise ValueError(f"{name} must be positive, got {limit!r}")
    if nbytes > MAX_BYTES:
        raise ValueError(f"{name} must be at most {MAX_BYTES} bytes (2^64 - 1), got {limit!r}")
    return nbytes


def set_memory_limit(limit):
    """Sets the process-wide default device-memory budget for every call that passes no
    memory_limit. None restores the automatic default (most of the free device memory)."""
    nbytes = parse_memory_limit(limit)
    _native.set_default_memory_limit(0 if nbytes is None else nbytes)


def get_memory_limit():
    """The process-wide default budget in bytes, or None when automatic."""
    nbytes = _native.default_memory_limit()
    return nbytes or None
