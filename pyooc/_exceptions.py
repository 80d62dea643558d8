"""Exceptions raised by pyooc beyond Python's own (ValueError, TypeError, MemoryError)."""


class CudaError(RuntimeError):
    """A CUDA runtime call failed; the message names the call and CUDA's error string."""


class CudnnError(RuntimeError):
    """A cuDNN call failed; the message names the call and cuDNN's status."""
