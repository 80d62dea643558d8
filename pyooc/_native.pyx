# cython: language_level=3, boundscheck=False, wraparound=False
"""pyooc._native: thin bindings over libooc. Each binding is named after the libooc function it
calls, and that function's comment in native/include/ooc/*.hpp is its documentation; a binding adds
only what crossing into C++ needs: tuples to std::vector, flat buffer-protocol views to pointers,
names ("relu", "max") to enums, the GIL released around every libooc call, and C++ exceptions
mapped to Python ones (_errors.hpp).

What lives where:
- argument checks that need Python objects (types, "512MiB" limits, backend names, out= arrays):
  pyooc/_call_args.py, pyooc/_arrays.py and each operation's public module (conv.py, layers.py, ...);
- shape and geometry checks: once, in libooc (ConvProblem's factories), arriving as ValueError;
- the options of a call: one CallOptions (ooc::Options), the last argument of every plan_* and run
  binding;
- what a run measured: every run binding returns _ran's dict, kept by pyooc/_last_stats.py;
- the layers' and the fused functions' bindings: _layers.pxi and _fused.pxi; the declarations of
  libooc's headers: _ooc.pxd."""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uintptr_t
from libcpp cimport bool
from libcpp.memory cimport unique_ptr, make_unique
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyooc cimport _ooc as ooc

from pyooc._exceptions import CancelledError, CudaError, CudnnError

ooc.register_error_types(CudaError, CudnnError)
ooc.register_cancelled_type(CancelledError)

_SPATIAL_NAMES = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}
_BACKENDS = {"auto": ooc.BackendKind.automatic, "host": ooc.BackendKind.host, "cuda": ooc.BackendKind.cuda}
_BACKEND_NAMES = {kind: name for name, kind in _BACKENDS.items()}


cdef tuple _dims(ooc.Dims3 d, int n):
    return tuple(d[i] for i in range(n))


cdef tuple _ranges(ooc.RangeArray3& r, int n):
    # A loop, not a generator: a generator's closure cannot hold the C++ reference.
    cdef list out = []
    for d in range(n):
        out.append((r[d].begin, r[d].end))
    return tuple(out)


cdef object _chunk_member(ooc.Chunk& ch, int member, int sd):
    # ooc::ChunkMember's order: n, k, c, out, in, target, out_read, load_x, load_w, load_y, first_c, last_c
    if member == 0:
        return (ch.n.begin, ch.n.end)
    if member == 1:
        return (ch.k.begin, ch.k.end)
    if member == 2:
        return (ch.c.begin, ch.c.end)
    if member == 3:
        return _ranges(ch.out, sd)
    if member == 4:
        return _ranges(ch.input, sd)
    if member == 5:
        return _ranges(ch.target, sd)
    if member == 6:
        return _ranges(ch.out_read, sd)
    return (ch.load_x, ch.load_w, ch.load_y, ch.first_c, ch.last_c)[member - 7]


cdef class Plan:
    """How one operation runs out of core (see native/include/ooc/plan.hpp). `str(plan)` prints it."""
    cdef unique_ptr[ooc.Plan] c_obj

    @staticmethod
    cdef Plan wrap(ooc.Plan plan):
        cdef Plan self = Plan.__new__(Plan)
        self.c_obj = make_unique[ooc.Plan](plan)
        return self

    @property
    def operation(self):
        """Which operation the plan runs: "conv_forward", "conv_backward_data",
        "conv_backward_filter" or "conv_backward_bias", a layer's name, or a fused function's
        ("conv_bias_activation_forward", ...; see `fused`)."""
        if not self.c_obj.get().fused.empty():
            return self.c_obj.get().fused.decode()
        return ooc.operation_name(self.c_obj.get().problem.op).decode()

    @property
    def fused(self):
        """True for a fused function's plan: it runs several operations per chunk, and its chunks
        use the vocabulary of the operation it extends (conv_forward for the fused forwards)."""
        return not self.c_obj.get().fused.empty()

    @property
    def backend(self):
        return self.c_obj.get().backend.decode()

    @property
    def padding_mode(self):
        """What a convolution's padding holds: "zeros", "reflect", "replicate" or "circular"."""
        return _PADDING_MODE_NAMES[self.c_obj.get().problem.padding_mode]

    @property
    def math(self):
        """How its float32 convolutions and GEMMs multiply: "fp32" (full FP32) or "tf32"
        (pyooc/precision.py); the host backend computes full FP32 under either."""
        return _MATH_NAMES[self.c_obj.get().math]

    @property
    def splits(self):
        """Number of pieces per dimension: n, k (output channels), c (input channels) and each
        spatial dimension (d, h, w): of y / dy, or of dx for conv_backward_data. A grouped
        convolution (groups > 1) also has "groups", its group tiles; k and c then count the tiles
        inside one group tile."""
        cdef ooc.Plan* p = self.c_obj.get()
        out = {"groups": p.splits_g} if p.problem.groups > 1 else {}
        out.update({"n": p.splits_n, "k": p.splits_k, "c": p.splits_c})
        for i, name in enumerate(_SPATIAL_NAMES[p.problem.spatial_dims]):
            out[name] = p.splits_out[i]
        return out

    @property
    def tiles(self):
        """Tile size per dimension (the last tile of a dimension may be smaller); "groups" (groups
        per tile) for a grouped convolution, whose k and c tiles are then channels per tile."""
        cdef ooc.Plan* p = self.c_obj.get()
        out = {"groups": p.tiling.g} if p.problem.groups > 1 else {}
        out.update({"n": p.tiling.n, "k": p.tiling.k, "c": p.tiling.c})
        for i, name in enumerate(_SPATIAL_NAMES[p.problem.spatial_dims]):
            out[name] = p.tiling.out[i]
        return out

    @property
    def passes(self):
        """Passes over the chunk list: 2 for batch-norm training and backward (reduce, then apply)."""
        return self.c_obj.get().passes

    @property
    def num_chunks(self):
        return self.c_obj.get().num_chunks()

    @property
    def loop_order(self):
        return ooc.loop_order_name(self.c_obj.get().order).decode()

    @property
    def buffers(self):
        return self.c_obj.get().buffers

    @property
    def w_resident(self):
        return self.c_obj.get().w_resident

    @property
    def peak_device_bytes(self):
        return self.c_obj.get().peak_device_bytes

    @property
    def workspace_bytes(self):
        return self.c_obj.get().workspace_bytes

    @property
    def memory_limit(self):
        return self.c_obj.get().memory_limit

    @property
    def bytes_h2d(self):
        return self.c_obj.get().bytes_h2d

    @property
    def bytes_d2h(self):
        return self.c_obj.get().bytes_d2h

    @property
    def y_inputs(self):
        """y-shaped tensors each dy tile loads: 1 (dy), 2 or 3 with an activation's backward folded in
        (dy, y and maybe the activation's input)."""
        return self.c_obj.get().y_inputs

    @property
    def pooled_inputs(self):
        """Pooled tensors (dq, q) each dy tile loads where a pooling's backward is folded in."""
        return self.c_obj.get().pooled_inputs

    @property
    def kept_bytes(self):
        """Fused functions: device bytes of outputs kept on the device for the whole run (dw, db)."""
        return self.c_obj.get().kept_bytes

    @property
    def scratch_bytes(self):
        """Fused functions: device scratch bytes (the fused backward: the dx rows carried from one
        spatial tile to the next; the fused pooling forward: a pooled tile)."""
        return self.c_obj.get().scratch_bytes

    @property
    def predicted_seconds(self):
        return self.c_obj.get().predicted_seconds

    @property
    def x_shape(self):
        """Shape of x (and dx); None for conv_backward_bias."""
        if self.c_obj.get().problem.op == ooc.Operation.backward_bias:
            return None
        return tuple(self.c_obj.get().problem.x_shape())

    @property
    def w_shape(self):
        """Shape of w (and dw); None for conv_backward_bias."""
        if self.c_obj.get().problem.op == ooc.Operation.backward_bias:
            return None
        return tuple(self.c_obj.get().problem.w_shape())

    @property
    def y_shape(self):
        """Shape of y (and dy)."""
        return tuple(self.c_obj.get().problem.y_shape())

    @property
    def flops(self):
        return self.c_obj.get().problem.flops()

    @property
    def chunks(self):
        """The chunks in execution order, each a dict of index ranges (half-open) and flags, keyed by
        the names the operation gives its tensors (ooc::Plan::chunk_fields, native/src/plan/
        chunk_fields.cpp, says which for every operation). conv_forward: n, k, c, out (y), in (x,
        halo included), load_x, load_w, first_c, last_c; the gradients name theirs (dy, dx, dy_read,
        ...) and mark a reduction's first and last chunk; matmul: m, n, k; batch norm: n, c,
        spatial; the layers: n, c, box, out, target."""
        cdef ooc.Plan* p = self.c_obj.get()
        cdef int sd = p.problem.spatial_dims
        cdef vector[ooc.ChunkField] fields = p.chunk_fields()
        names = [fields[f].name.decode() for f in range(fields.size())]
        result = []
        for i in range(p.chunks.size()):
            result.append({names[f]: _chunk_member(p.chunks[i], <int>fields[f].member, sd)
                           for f in range(fields.size())})
        return result

    @property
    def candidates(self):
        """The fastest candidates the planner's search found within the budget, fastest first (the
        first is this plan's own): dicts of predicted_seconds, peak_device_bytes and chunks."""
        cdef ooc.Plan* p = self.c_obj.get()
        return [{"predicted_seconds": p.candidates[i].predicted_seconds,
                 "peak_device_bytes": p.candidates[i].peak_device_bytes,
                 "chunks": int(p.candidates[i].chunks)} for i in range(p.candidates.size())]

    @property
    def candidates_fitting(self):
        """How many candidates fitted the budget (and were costed) in the planner's search."""
        return self.c_obj.get().candidates_fitting

    @property
    def machine(self):
        """The machine model the plan was costed with (pyooc.machine's dict form)."""
        cdef ooc.MachineModel* m = &self.c_obj.get().machine
        return {"h2d_bytes_per_s": m.h2d_bytes_per_s, "d2h_bytes_per_s": m.d2h_bytes_per_s,
                "bidir_bytes_per_s": m.bidir_bytes_per_s, "host_copy_bytes_per_s": m.host_copy_bytes_per_s,
                "flops_per_s": m.flops_per_s, "chunk_half_flops": m.chunk_half_flops,
                "chunk_overhead_s": m.chunk_overhead_s, "copies_share_compute": m.copies_share_compute}

    @property
    def slots(self):
        """The device memory of the run as the planner laid it out (ooc::Plan::slots), a list of
        dicts: name (the tensor it holds: "x", "dy", "dw[0]", ...), kind ("streamed": a ring of
        `buffers` slots chunks load into or store from; "kept": an output reduced on the device over
        the whole run; "scratch": partial results carried between chunks), buffers, bytes (per
        buffer) and offset (kept and scratch pieces: into their block). With the workspace they add
        up to peak_device_bytes."""
        cdef ooc.Plan* p = self.c_obj.get()
        return [{"name": p.slots[i].name.decode(), "kind": ooc.slot_kind_name(p.slots[i].kind).decode(),
                 "buffers": p.slots[i].buffers, "bytes": p.slots[i].bytes, "offset": p.slots[i].offset}
                for i in range(p.slots.size())]

    def __str__(self):
        return self.c_obj.get().describe().decode()

    def __repr__(self):
        return (f"<pyooc.Plan {self.operation} backend={self.backend!r} splits={self.splits} "
                f"chunks={self.num_chunks} peak_device_bytes={self.peak_device_bytes}>")


include "_observe.pxi"


cdef class CallOptions:
    """The ooc::Options one call runs with (native/include/ooc/ooc.hpp says what each field means),
    built once per call by pyooc/_call_args.py and passed as the last argument of every binding.
    memory_limit: bytes, 0 for the process default; backend: "auto", "cuda" or "host" (the names
    _call_args checked); assume_pinned: read by the plan_* bindings only; observer: the call's
    CallObserver (Ctrl-C, CancelToken, progress; _observe.pxi), kept alive here for the call;
    math: "fp32" or "tf32" (pyooc/precision.py checked it)."""
    cdef ooc.Options c_obj
    cdef readonly CallObserver observer
    cdef ooc.MachineModel machine_model  # what c_obj.machine points to when a model was given

    def __cinit__(self, size_t memory_limit, str backend, int device, bint assume_pinned=False,
                  CallObserver observer=None, machine=None, tuple devices=(), str math="fp32"):
        self.c_obj.memory_limit = memory_limit
        self.c_obj.math = _MATH_MODES[math]
        self.c_obj.backend = _BACKENDS[backend]
        self.c_obj.device = device
        self.c_obj.devices = list(devices)
        self.c_obj.assume_pinned = assume_pinned
        self.observer = observer
        self.c_obj.observer = observer.native() if observer is not None else NULL
        self.c_obj.machine = NULL
        if machine is not None:  # a dict of every MachineModel field, checked by pyooc/machine.py
            self.machine_model.h2d_bytes_per_s = machine["h2d_bytes_per_s"]
            self.machine_model.d2h_bytes_per_s = machine["d2h_bytes_per_s"]
            self.machine_model.bidir_bytes_per_s = machine["bidir_bytes_per_s"]
            self.machine_model.host_copy_bytes_per_s = machine["host_copy_bytes_per_s"]
            self.machine_model.flops_per_s = machine["flops_per_s"]
            self.machine_model.chunk_half_flops = machine["chunk_half_flops"]
            self.machine_model.chunk_overhead_s = machine["chunk_overhead_s"]
            self.machine_model.copies_share_compute = machine["copies_share_compute"]
            self.c_obj.machine = &self.machine_model

    @property
    def memory_limit(self):
        return self.c_obj.memory_limit

    @property
    def backend(self):
        return _BACKEND_NAMES[self.c_obj.backend]

    @property
    def device(self):
        return self.c_obj.device

    @property
    def assume_pinned(self):
        return self.c_obj.assume_pinned

    @property
    def devices(self):
        return tuple(self.c_obj.devices)

    @property
    def math(self):
        return _MATH_NAMES[self.c_obj.math]

    def __repr__(self):
        return (f"<pyooc.CallOptions memory_limit={self.memory_limit} backend={self.backend!r} "
                f"device={self.device} assume_pinned={self.assume_pinned} math={self.math!r}>")


cdef tuple _padding_ends(tuple padding):
    """(before, after) lists of a convolution's padding: a tuple of ints pads alike at both ends
    (after: empty); one of (before, after) pairs, as _call_args.conv_padding gives for
    padding='same' with an even kernel, pads each end by its own."""
    if all(isinstance(p, int) for p in padding):
        return list(padding), []
    pairs = [(p, p) if isinstance(p, int) else p for p in padding]
    return [b for b, _ in pairs], [a for _, a in pairs]


_MATH_MODES = {"fp32": ooc.MathMode.fp32, "tf32": ooc.MathMode.tf32}
_MATH_NAMES = {ooc.MathMode.fp32: "fp32", ooc.MathMode.tf32: "tf32"}

_DTYPES = {"float32": ooc.DType.float32, "float16": ooc.DType.float16, "bfloat16": ooc.DType.bfloat16}
# Where the convolutions' tensors keep their channels (ConvProblem::layout; pyooc/_layouts.py).
_LAYOUTS = {"channels_first": ooc.Layout.channels_first, "channels_last": ooc.Layout.channels_last}

# torch's padding_mode names (pyooc._call_args.check_padding_mode validates them first).
_PADDING_MODES = {"zeros": ooc.PaddingMode.zeros, "reflect": ooc.PaddingMode.reflect,
                  "replicate": ooc.PaddingMode.replicate, "circular": ooc.PaddingMode.circular}
_PADDING_MODE_NAMES = {mode: name for name, mode in _PADDING_MODES.items()}


cdef ooc.ConvProblem _conv_problem(tuple x_shape, tuple w_shape, tuple stride, tuple padding, tuple dilation,
                                   int64_t groups, double alpha, double beta, bint has_bias,
                                   str dtype="float32", str padding_mode="zeros", str layout="channels_first") except *:
    before, after = _padding_ends(padding)
    cdef ooc.ConvProblem problem = ooc.ConvProblem.forward(list(x_shape), list(w_shape), list(stride), before,
                                                           list(dilation), groups, alpha, beta, has_bias,
                                                           _DTYPES[dtype], after)
    problem.set_padding_mode(_PADDING_MODES[padding_mode])
    problem.layout = _LAYOUTS[layout]
    return problem


def conv_output_shape(tuple x_shape, tuple w_shape, tuple stride, tuple padding, tuple dilation, int64_t groups,
                      str padding_mode="zeros"):
    """The output's shape; validates the geometry, padding_mode's against it included."""
    return tuple(_conv_problem(x_shape, w_shape, stride, padding, dilation, groups, 1.0, 0.0, False, "float32",
                               padding_mode).y_shape())


def plan_conv_forward(tuple x_shape, tuple w_shape, tuple stride, tuple padding, tuple dilation, int64_t groups,
                      double alpha, double beta, bint has_bias, CallOptions options not None, str dtype="float32",
                      str padding_mode="zeros", str layout="channels_first"):
    cdef ooc.ConvProblem problem = _conv_problem(x_shape, w_shape, stride, padding, dilation, groups, alpha, beta,
                                                 has_bias, dtype, padding_mode, layout)
    cdef ooc.Plan plan
    with nogil:
        plan = ooc.plan_conv_forward(problem, options.c_obj)
    return Plan.wrap(plan)


cdef const void* _data(object array) except? NULL:
    """Where a binding's array argument starts: a flat byte view of host memory (raw_bytes), a
    pyooc._device_arrays.DeviceArray (its device address), or None (NULL). The caller's objects
    outlive the call, so the address stays valid after the view is released."""
    cdef const unsigned char[::1] view
    if array is None:
        return NULL
    address = getattr(array, "device_address", None)
    if address is not None:
        return <const void*><uintptr_t>address
    view = array
    return &view[0]


cdef void* _writable_data(object array) except NULL:
    """_data for an output: a writable host view or a writable DeviceArray."""
    cdef unsigned char[::1] view
    address = getattr(array, "device_address", None)
    if address is not None:
        return <void*><uintptr_t>address
    view = array
    return &view[0]


cdef void* _writable_or_null(object array) except? NULL:
    """_writable_data, or NULL for None (an optional output)."""
    return NULL if array is None else _writable_data(array)


def conv_forward(x_bytes, tuple x_shape, w_bytes, tuple w_shape, bias, y_bytes, tuple stride, tuple padding,
                 tuple dilation, int64_t groups, double alpha, double beta, CallOptions options not None,
                 str dtype="float32", str padding_mode="zeros", str layout="channels_first"):
    """Runs on flat byte views of the caller's arrays of `dtype` (no copies), or on their device
    memory (DeviceArray), every one dense in `layout`."""
    cdef const void* x = _data(x_bytes)
    cdef const void* w = _data(w_bytes)
    cdef const void* bias_ptr = _data(bias)
    cdef void* y = _writable_data(y_bytes)
    cdef ooc.ConvProblem problem = _conv_problem(x_shape, w_shape, stride, padding, dilation, groups, alpha, beta,
                                                 bias is not None, dtype, padding_mode, layout)
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    with nogil:
        ooc.conv_forward(problem, x, w, bias_ptr, y, options.c_obj, &plan, &stats)
    return _ran(plan, stats)


cdef dict _ran(ooc.Plan& plan, ooc.RunStats& stats):
    """What a call that ran returns: its RunStats as a dict, with the Plan it ran under "plan" (the
    record last_stats() gives)."""
    return {
        "bytes_h2d": stats.bytes_h2d, "bytes_d2h": stats.bytes_d2h,
        "device_bytes_reserved": stats.device_bytes_reserved, "chunks": stats.chunks,
        "seconds": stats.seconds, "gather_seconds": stats.gather_seconds,
        "scatter_seconds": stats.scatter_seconds, "host_wait_seconds": stats.host_wait_seconds,
        "pace_wait_seconds": stats.pace_wait_seconds,
        "h2d_busy_seconds": stats.h2d_busy_seconds, "compute_busy_seconds": stats.compute_busy_seconds,
        "d2h_busy_seconds": stats.d2h_busy_seconds, "plan": Plan.wrap(plan),
    }


# The gradients. Their problems come from three shapes in the order of the Python signatures:
# conv_backward_data (dy, w, x_shape), conv_backward_filter (x, dy, w_shape), conv_backward_bias (dy).
_BACKWARD = {"conv_backward_data": ooc.Operation.backward_data,
             "conv_backward_filter": ooc.Operation.backward_filter,
             "conv_backward_bias": ooc.Operation.backward_bias}


cdef ooc.ConvProblem _backward_problem(str operation, tuple first, tuple second, tuple third, tuple stride,
                                       tuple padding, tuple dilation, int64_t groups, double alpha,
                                       double beta, str dtype="float32", str padding_mode="zeros", str layout="channels_first") except *:
    cdef ooc.Operation op = _BACKWARD[operation]
    cdef ooc.DType element = _DTYPES[dtype]
    cdef ooc.ConvProblem problem
    before, after = _padding_ends(padding)
    if op == ooc.Operation.backward_data:
        problem = ooc.ConvProblem.backward_data(list(first), list(second), list(third), list(stride), before,
                                                list(dilation), groups, alpha, beta, element, after)
    elif op == ooc.Operation.backward_filter:
        problem = ooc.ConvProblem.backward_filter(list(first), list(second), list(third), list(stride), before,
                                                  list(dilation), groups, alpha, beta, element, after)
    else:
        problem = ooc.ConvProblem.backward_bias(list(first), alpha, beta, element)
    problem.set_padding_mode(_PADDING_MODES[padding_mode])
    problem.layout = _LAYOUTS[layout]
    return problem


def check_backward(str operation, tuple first, tuple second, tuple third, tuple stride, tuple padding,
                   tuple dilation, int64_t groups, str padding_mode="zeros"):
    """Validates a gradient's shapes and geometry (ValueError naming the argument)."""
    _backward_problem(operation, first, second, third, stride, padding, dilation, groups, 1.0, 0.0, "float32",
                      padding_mode)


def plan_conv_backward(str operation, tuple first, tuple second, tuple third, tuple stride, tuple padding,
                       tuple dilation, int64_t groups, double alpha, double beta, CallOptions options not None,
                       str dtype="float32", str padding_mode="zeros", str layout="channels_first"):
    cdef ooc.ConvProblem problem = _backward_problem(operation, first, second, third, stride, padding, dilation,
                                                     groups, alpha, beta, dtype, padding_mode, layout)
    cdef ooc.Plan plan
    with nogil:
        if problem.op == ooc.Operation.backward_data:
            plan = ooc.plan_conv_backward_data(problem, options.c_obj)
        elif problem.op == ooc.Operation.backward_filter:
            plan = ooc.plan_conv_backward_filter(problem, options.c_obj)
        else:
            plan = ooc.plan_conv_backward_bias(problem, options.c_obj)
    return Plan.wrap(plan)


def conv_backward(str operation, a_bytes, tuple a_shape, b_bytes, tuple b_shape, tuple third_shape, out_bytes,
                  tuple stride, tuple padding, tuple dilation, int64_t groups, double alpha, double beta,
                  CallOptions options not None, str dtype="float32", str padding_mode="zeros", str layout="channels_first"):
    """Runs a gradient on flat byte views of the caller's arrays of `dtype` (no copies), dense in
    `layout`: a, b are (dy, w) for conv_backward_data, (x, dy) for conv_backward_filter, (dy, None)
    for conv_backward_bias; the shapes follow as for plan_conv_backward."""
    cdef ooc.ConvProblem problem = _backward_problem(operation, a_shape, b_shape, third_shape, stride, padding,
                                                     dilation, groups, alpha, beta, dtype, padding_mode, layout)
    cdef const void* a = _data(a_bytes)
    cdef const void* b_ptr = _data(b_bytes)
    cdef void* out = _writable_data(out_bytes)
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    with nogil:
        if problem.op == ooc.Operation.backward_data:
            ooc.conv_backward_data(problem, a, b_ptr, out, options.c_obj, &plan, &stats)
        elif problem.op == ooc.Operation.backward_filter:
            ooc.conv_backward_filter(problem, a, b_ptr, out, options.c_obj, &plan, &stats)
        else:
            ooc.conv_backward_bias(problem, a, out, options.c_obj, &plan, &stats)
    return _ran(plan, stats)


# ---- layers.hpp: GEMM and batch norm

def check_matmul(tuple a_shape, tuple b_shape):
    """Validates op(a) [M, K] @ op(b) [K, N] (ValueError in torch's words)."""
    ooc.matmul_problem(list(a_shape), list(b_shape), 1.0, 0.0, False, ooc.DType.float32)


def plan_matmul(tuple a_shape, tuple b_shape, double alpha, double beta, bint has_bias, CallOptions options not None,
                str dtype="float32"):
    """a_shape, b_shape: op(a) [M, K] and op(b) [K, N]."""
    cdef ooc.ConvProblem problem = ooc.matmul_problem(list(a_shape), list(b_shape), alpha, beta, has_bias,
                                                      _DTYPES[dtype])
    cdef ooc.Plan plan
    with nogil:
        plan = ooc.plan_matmul(problem, options.c_obj)
    return Plan.wrap(plan)


def matmul(a_bytes, tuple a_shape, bint trans_a, b_bytes, tuple b_shape, bint trans_b, bias, c_bytes, double alpha,
           double beta, CallOptions options not None, str dtype="float32"):
    """Shapes are op(a)'s and op(b)'s; the arrays (flat byte views of `dtype`, no copies) are stored
    transposed where trans_* says."""
    cdef const void* a = _data(a_bytes)
    cdef const void* b = _data(b_bytes)
    cdef const void* bias_ptr = _data(bias)
    cdef void* c = _writable_data(c_bytes)
    cdef ooc.ConvProblem problem = ooc.matmul_problem(list(a_shape), list(b_shape), alpha, beta, bias is not None,
                                                      _DTYPES[dtype])
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    with nogil:
        ooc.matmul(problem, trans_a, trans_b, a, b, bias_ptr, c, options.c_obj, &plan, &stats)
    return _ran(plan, stats)


_BATCHNORM = {"batchnorm_forward_training": ooc.Operation.batchnorm_forward_training,
              "batchnorm_forward_inference": ooc.Operation.batchnorm_forward_inference,
              "batchnorm_backward": ooc.Operation.batchnorm_backward}


def plan_batchnorm(str operation, tuple x_shape, CallOptions options not None, str dtype="float32"):
    cdef ooc.ConvProblem problem = ooc.batchnorm_problem(_BATCHNORM[operation], list(x_shape), _DTYPES[dtype])
    cdef ooc.Plan plan
    with nogil:
        plan = ooc.plan_batchnorm(problem, options.c_obj)
    return Plan.wrap(plan)


def batchnorm(str operation, tuple x_shape, dict arrays, double eps, double momentum, CallOptions options not None,
              str dtype="float32"):
    """Runs a batch-norm operation without copies: every array a flat byte view (raw_bytes) or a
    DeviceArray (x, dy and out of `dtype`, the per-channel ones float32, which libooc reads and
    writes in any memory); `arrays` maps the argument names of layers.hpp to arrays or None."""
    cdef ooc.ConvProblem problem = ooc.batchnorm_problem(_BATCHNORM[operation], list(x_shape), _DTYPES[dtype])
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    cdef const void* x = _data(arrays["x"])
    cdef const float* scale = <const float*>_data(arrays["scale"])
    cdef const float* bias = <const float*>_data(arrays.get("bias"))
    cdef const float* mean = <const float*>_data(arrays.get("mean"))
    cdef const float* var = <const float*>_data(arrays.get("var"))
    cdef const void* dy = _data(arrays.get("dy"))
    cdef void* out = _writable_data(arrays["out"])
    cdef float* out2 = <float*>_writable_or_null(arrays.get("out2"))
    cdef float* out3 = <float*>_writable_or_null(arrays.get("out3"))
    cdef float* running_mean = <float*>_writable_or_null(arrays.get("running_mean"))
    cdef float* running_var = <float*>_writable_or_null(arrays.get("running_var"))
    cdef ooc.Operation op = problem.op
    with nogil:
        if op == ooc.Operation.batchnorm_forward_training:
            ooc.batchnorm_forward_training(problem, x, scale, bias, eps, momentum, running_mean, running_var, out,
                                           out2, out3, options.c_obj, &plan, &stats)
        elif op == ooc.Operation.batchnorm_forward_inference:
            ooc.batchnorm_forward_inference(problem, x, scale, bias, mean, var, eps, out, options.c_obj, &plan, &stats)
        else:
            ooc.batchnorm_backward(problem, x, dy, scale, mean, var, out, out2, out3, options.c_obj, &plan, &stats)
    return _ran(plan, stats)


def measure_link_bandwidth(int device, size_t nbytes):
    cdef ooc.LinkBandwidth bw
    with nogil:
        bw = ooc.measure_link_bandwidth(device, nbytes)
    return {"h2d": bw.h2d, "d2h": bw.d2h, "bidir": bw.bidir}


# The Python object libooc's plan observer reports to (pyooc/_plan_log.py): wants(predicted
# seconds, automatic_chose_host) says cheaply whether it needs the Plan, observe(Plan,
# automatic_chose_host) gets it. Called on the calling thread before every run.
_plan_observer = None


cdef void _observe_plan(const ooc.Plan& plan, bool automatic_chose_host) noexcept with gil:
    observer = _plan_observer
    if observer is None:
        return
    # noexcept: an exception here (a logging handler's) is reported as unraisable, never unwinds through libooc.
    if observer.wants(plan.predicted_seconds, automatic_chose_host):
        observer.observe(Plan.wrap(plan), automatic_chose_host)


def set_plan_observer(observer):
    """Reports every run's plan to observer (see _plan_observer), or to nothing for None."""
    global _plan_observer
    _plan_observer = observer
    if observer is None:
        ooc.set_plan_observer(NULL)
    else:
        ooc.set_plan_observer(_observe_plan)


def set_default_memory_limit(size_t nbytes):
    ooc.set_default_memory_limit(nbytes)


def default_memory_limit():
    return ooc.default_memory_limit()


def device_count():
    return ooc.device_count()


def register_pinned(uintptr_t address, size_t nbytes):
    with nogil:
        ooc.register_pinned(<void*>address, nbytes)


def unregister_pinned(uintptr_t address):
    with nogil:
        ooc.unregister_pinned(<void*>address)


def device_memory_ordinal(uintptr_t address):
    return ooc.device_memory_ordinal(<const void*>address)


def wait_for_stream(uintptr_t stream, int device):
    with nogil:
        ooc.wait_for_stream(stream, device)


def cudnn_versions():
    return ooc.cudnn_version_build(), ooc.cudnn_version_runtime()


def cuda_runtime_version():
    return ooc.cuda_runtime_version()


def cudnn_library_path():
    return ooc.cudnn_library_path().decode()


def inject_fault(str where, int64_t countdown):
    ooc.inject_fault(where.encode(), countdown)


def set_host_direct_access(bint enabled):
    ooc.set_host_direct_access(enabled)


cdef void _export_bytes(Py_buffer* view, object owner, void* buf, Py_ssize_t nbytes, Py_ssize_t* shape,
                        Py_ssize_t* strides):
    """Fills `view` with `nbytes` writable bytes at `buf`, owned by `owner` (whose shape and
    strides arrays of one element outlive the view)."""
    shape[0] = nbytes
    strides[0] = 1
    view.buf = buf
    view.obj = owner
    view.len = nbytes
    view.readonly = 0
    view.itemsize = 1
    view.format = "B"
    view.ndim = 1
    view.shape = shape
    view.strides = strides
    view.suboffsets = NULL
    view.internal = NULL


cdef class BufferLease:
    """A writable buffer over another exporter's memory (a pinned block of pyooc/pinned_cache.py)
    that calls on_release(block) once the last array viewing it is gone: every numpy view of a
    result keeps its lease, so the block is reused only when nothing can read or write it."""
    cdef Py_buffer source
    cdef bint has_source
    cdef object block
    cdef object on_release
    cdef Py_ssize_t nbytes
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __cinit__(self, block, Py_ssize_t nbytes, on_release):
        PyObject_GetBuffer(block, &self.source, PyBUF_WRITABLE)
        self.has_source = True
        if nbytes < 0 or nbytes > self.source.len:
            PyBuffer_Release(&self.source)
            self.has_source = False
            raise ValueError(f"a lease of {nbytes} bytes does not fit a block of {self.source.len}")
        self.block = block
        self.nbytes = nbytes
        self.on_release = on_release

    def __dealloc__(self):
        if self.has_source:
            PyBuffer_Release(&self.source)
        if self.on_release is not None:
            self.on_release(self.block)

    def __getbuffer__(self, Py_buffer* view, int flags):
        _export_bytes(view, self, self.source.buf, self.nbytes, self.shape, self.strides)

    def __releasebuffer__(self, Py_buffer* view):
        pass


cdef class PinnedAllocation:
    """Page-locked host memory, exposed through the buffer protocol; freed when the last array
    viewing it goes away."""
    cdef void* ptr
    cdef Py_ssize_t nbytes
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __cinit__(self, Py_ssize_t nbytes):
        cdef size_t n = max(nbytes, 1)
        with nogil:
            self.ptr = ooc.alloc_pinned(n)
        self.nbytes = nbytes

    def __dealloc__(self):
        if self.ptr != NULL:
            with nogil:
                ooc.free_pinned(self.ptr)

    def __getbuffer__(self, Py_buffer* view, int flags):
        _export_bytes(view, self, self.ptr, self.nbytes, self.shape, self.strides)

    def __releasebuffer__(self, Py_buffer* view):
        pass

    @property
    def address(self):
        return <uintptr_t>self.ptr


include "_layers.pxi"
include "_fused.pxi"
