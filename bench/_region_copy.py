"""Async copies between strided layouts (a slab of a host tensor, a halo-padded device buffer) that
keep the pinned link rate: each 2D block of the region is one cudaMemcpy2DAsync, through the CUDA
runtime torch has loaded. copy_segments, the layout arithmetic, needs no torch (the --dry-run
self-test replays it with numpy)."""

import ctypes
import glob
import itertools
import os
import site

from _console import log


def copy_segments(shape, dst_strides, src_strides, itemsize):
    """Byte-level 2D copies that move a region of `shape` between two strided layouts (strides in
    elements): the longest suffix of dims contiguous in both is one row; the dim before it is the
    height (a pitch per side); any dims further out are enumerated. Returns a list of
    (dst_offset, src_offset, width, height, dst_pitch, src_pitch), all in bytes."""
    dims = [(n, ds, ss) for n, ds, ss in zip(shape, dst_strides, src_strides) if n != 1]
    if any(n == 0 for n in shape):
        return []
    row = 1
    cut = len(dims)
    while cut > 0 and dims[cut - 1][1] == row and dims[cut - 1][2] == row:
        row *= dims[cut - 1][0]
        cut -= 1
    width = row * itemsize
    if cut == 0:
        return [(0, 0, width, 1, width, width)]
    height, dpitch, spitch = dims[cut - 1]
    outer = dims[:cut - 1]
    segments = []
    for index in itertools.product(*(range(n) for n, _, _ in outer)):
        doff = sum(i * ds for i, (_, ds, _) in zip(index, outer)) * itemsize
        soff = sum(i * ss for i, (_, _, ss) in zip(index, outer)) * itemsize
        segments.append((doff, soff, width, height, dpitch * itemsize, spitch * itemsize))
    return segments


def _find_cudart():
    names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    paths = []
    try:
        import torch
        paths += glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libcudart*.so*"))
    except ImportError:
        pass
    for base in site.getsitepackages() + [site.getusersitepackages()]:
        paths += glob.glob(os.path.join(base, "nvidia", "cu13", "lib", "libcudart.so*"))
        paths += glob.glob(os.path.join(base, "nvidia", "cuda_runtime", "lib", "libcudart.so*"))
    for name in names + paths:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


class RegionCopier:
    """Async copies between equally shaped tensors whose layouts may be strided (a slab of a host
    tensor, a halo-padded device buffer). torch's own copy_ stages a non-contiguous host side through
    a pageable temporary, which would throw the pinned bandwidth away, so this issues one
    cudaMemcpy2DAsync per segment (copy_segments) on the given stream, through the CUDA runtime torch
    has loaded. Falls back to one copy_ per contiguous row when that runtime cannot be used (method
    says which)."""

    def __init__(self, torch):
        self.torch = torch
        self.method = "copy_"
        torch.cuda.init()
        lib = _find_cudart()
        if lib is None:
            return
        try:
            lib.cudaMemcpy2DAsync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                              ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
            lib.cudaMemcpy2DAsync.restype = ctypes.c_int
            lib.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                            ctypes.c_void_p]
            lib.cudaMemcpyAsync.restype = ctypes.c_int
            lib.cudaGetErrorString.argtypes = [ctypes.c_int]
            lib.cudaGetErrorString.restype = ctypes.c_char_p
        except AttributeError:
            return
        self._lib = lib
        self.method = "cudaMemcpy2DAsync"
        try:
            self._self_test()
        except Exception as exc:  # any failure: use torch's copies, slower but right
            log(f"RegionCopier: cudaMemcpy2DAsync unusable ({exc}); falling back to per-row copy_")
            self.method = "copy_"

    def _self_test(self):
        torch = self.torch
        host = torch.arange(2 * 5 * 7 * 3, dtype=torch.float32).reshape(2, 5, 7, 3).pin_memory()
        dev = torch.full((2, 5, 4, 3), -1.0, device="cuda")
        back = torch.full((2, 5, 4, 3), -2.0).pin_memory()
        stream = torch.cuda.Stream()
        torch.cuda.synchronize()  # the fills above ran on the default stream
        with torch.cuda.stream(stream):
            self.copy(dev[:, :, 1:3], host[:, :, 2:4], stream)
            self.copy(back[:, :, 1:3], dev[:, :, 1:3], stream)
        stream.synchronize()
        if not torch.equal(back[:, :, 1:3], host[:, :, 2:4]) or not bool((back[:, :, 0] == -2).all()):
            raise RuntimeError("self-test copy came back wrong")

    def _check(self, status):
        if status != 0:
            raise RuntimeError(f"CUDA error {status}: {self._lib.cudaGetErrorString(status).decode()}")

    def copy(self, dst, src, stream):
        """dst <- src (same shape and dtype; one side host, the other device, or both device),
        enqueued on `stream`. The caller keeps both alive until the stream has passed this point."""
        if tuple(dst.shape) != tuple(src.shape):
            raise ValueError(f"shape mismatch {tuple(dst.shape)} vs {tuple(src.shape)}")
        itemsize = dst.element_size()
        segments = copy_segments(tuple(dst.shape), dst.stride(), src.stride(), itemsize)
        if self.method == "cudaMemcpy2DAsync":
            handle = ctypes.c_void_p(stream.cuda_stream)
            d, s = dst.data_ptr(), src.data_ptr()
            for doff, soff, width, height, dpitch, spitch in segments:
                if height == 1:
                    self._check(self._lib.cudaMemcpyAsync(d + doff, s + soff, width, 4, handle))
                else:
                    self._check(self._lib.cudaMemcpy2DAsync(d + doff, dpitch, s + soff, spitch, width, height, 4,
                                                            handle))
            return
        torch = self.torch
        with torch.cuda.stream(stream):
            for doff, soff, width, height, dpitch, spitch in segments:
                n = width // itemsize
                for r in range(height):
                    dv = dst.as_strided((n,), (1,), dst.storage_offset() + (doff + r * dpitch) // itemsize)
                    sv = src.as_strided((n,), (1,), src.storage_offset() + (soff + r * spitch) // itemsize)
                    dv.copy_(sv, non_blocking=True)
