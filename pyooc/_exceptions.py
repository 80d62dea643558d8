"""Exceptions raised by pyooc beyond Python's own (ValueError, TypeError, MemoryError)."""


class _StatusError(RuntimeError):
    """A library call failed: str(e) is the message (it names the call and the library's error);
    e.status is the library's status code as an int (None when raised without one)."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status

    def __reduce__(self):
        # args holds the message alone (so str(e) is the message): pickle the status beside it.
        return type(self), (self.args[0], self.status)


class CudaError(_StatusError):
    """A CUDA runtime call failed; the message names the call and CUDA's error string, .status is
    the cudaError_t value (e.g. 35, cudaErrorInsufficientDriver; 100, cudaErrorNoDevice)."""


class CudnnError(_StatusError):
    """A cuDNN call failed; the message names the call and cuDNN's status, .status is the
    cudnnStatus_t value."""


class CancelledError(RuntimeError):
    """The call was cancelled through its CancelToken (pyooc.CancelToken) and stopped between two
    chunks, after draining what was in flight and freeing what it held; its out= array is partially
    written. (Ctrl-C raises KeyboardInterrupt the same way.)"""
