# Bindings of the layers (native/include/ooc/layers.hpp), included into _native.pyx. Shapes arrive
# as tuples of rank 3 to 5 (pyooc/layers.py reshapes); modes as names, parsed (and rejected, listing
# the valid ones) by libooc.


def plan_layer(str operation, tuple shape, str mode, tuple a_shape, bint in_place, CallOptions options not None,
               str dtype="float32"):
    """The Plan of one layer: operation is "activation_forward", ..., "add_tensor" (shape: c's),
    over arrays of `dtype`."""
    cdef ooc.DType element = _DTYPES[dtype]
    cdef vector[int64_t] s = list(shape)
    cdef vector[int64_t] a = list(a_shape)
    cdef ooc.SoftmaxMode smode = ooc.SoftmaxMode.channel
    cdef ooc.ActivationMode amode = ooc.ActivationMode.relu
    cdef ooc.Plan plan
    cdef int which = ("activation_forward", "activation_backward", "softmax_forward", "softmax_backward",
                      "add_tensor").index(operation)
    if operation.startswith("softmax"):
        smode = ooc.softmax_mode_from_name(mode.encode())
    elif operation == "activation_backward":
        amode = ooc.activation_mode_from_name(mode.encode())
    with nogil:
        if which == 0:
            plan = ooc.plan_activation_forward(s, options.c_obj, element)
        elif which == 1:
            plan = ooc.plan_activation_backward(s, amode, options.c_obj, element)
        elif which == 2:
            plan = ooc.plan_softmax_forward(s, smode, options.c_obj, element)
        elif which == 3:
            plan = ooc.plan_softmax_backward(s, smode, options.c_obj, element)
        else:
            plan = ooc.plan_add_tensor(a, s, in_place, options.c_obj, element)
    return Plan.wrap(plan)


def activation_traits(str mode):
    """(coef_name, coef_default, gradient_from_y) of an activation mode (ooc/types.hpp's
    ActivationTraits; coef_name "" when coef is unused, coef_default None when it must be given);
    ValueError listing the valid names otherwise."""
    cdef ooc.ActivationTraits t = ooc.activation_traits(ooc.activation_mode_from_name(mode.encode()))
    default = None if t.coef_default != t.coef_default else t.coef_default
    return t.coef_name.decode(), default, t.gradient_from_y


def softmax_mode(str mode):
    ooc.softmax_mode_from_name(mode.encode())


def activation_forward(tuple shape, str mode, double coef, x_bytes, y_bytes,
                       CallOptions options not None, str dtype="float32"):
    """On flat byte views of arrays of `dtype` (no copies)."""
    cdef vector[int64_t] s = list(shape)
    cdef ooc.ActivationMode m = ooc.activation_mode_from_name(mode.encode())
    cdef ooc.DType element = _DTYPES[dtype]
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    cdef const void* x = _data(x_bytes)
    cdef void* y = _writable_data(y_bytes)
    with nogil:
        ooc.activation_forward(s, m, coef, x, y, options.c_obj, &plan, &stats, 1.0, 0.0, element)
    return _ran(plan, stats)


def activation_backward(tuple shape, str mode, double coef, y_bytes, dy_bytes, x_bytes, dx_bytes,
                        CallOptions options not None, str dtype="float32"):
    cdef vector[int64_t] s = list(shape)
    cdef ooc.ActivationMode m = ooc.activation_mode_from_name(mode.encode())
    cdef ooc.DType element = _DTYPES[dtype]
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    cdef const void* y = _data(y_bytes)
    cdef const void* dy = _data(dy_bytes)
    cdef const void* x = _data(x_bytes)
    cdef void* dx = _writable_data(dx_bytes)
    with nogil:
        ooc.activation_backward(s, m, coef, y, dy, x, dx, options.c_obj, &plan, &stats, 1.0, 0.0,
                                element)
    return _ran(plan, stats)


def softmax_forward(tuple shape, str mode, bint log, x_bytes, y_bytes,
                    CallOptions options not None, str dtype="float32"):
    """On flat byte views of arrays of `dtype`, as every layer binding below (no copies)."""
    cdef vector[int64_t] s = list(shape)
    cdef ooc.SoftmaxMode m = ooc.softmax_mode_from_name(mode.encode())
    cdef ooc.DType element = _DTYPES[dtype]
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    cdef const void* x = _data(x_bytes)
    cdef void* y = _writable_data(y_bytes)
    with nogil:
        ooc.softmax_forward(s, m, log, x, y, options.c_obj, &plan, &stats, 1.0, 0.0, element)
    return _ran(plan, stats)


def softmax_backward(tuple shape, str mode, bint log, y_bytes, dy_bytes, dx_bytes, CallOptions options not None,
                     str dtype="float32"):
    cdef vector[int64_t] s = list(shape)
    cdef ooc.SoftmaxMode m = ooc.softmax_mode_from_name(mode.encode())
    cdef ooc.DType element = _DTYPES[dtype]
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    cdef const void* y = _data(y_bytes)
    cdef const void* dy = _data(dy_bytes)
    cdef void* dx = _writable_data(dx_bytes)
    with nogil:
        ooc.softmax_backward(s, m, log, y, dy, dx, options.c_obj, &plan, &stats, 1.0, 0.0, element)
    return _ran(plan, stats)


def add_tensor(tuple a_shape, tuple c_shape, double alpha, a_bytes, double beta, c_bytes, out_bytes,
               CallOptions options not None, str dtype="float32"):
    """out may be c (in place): then libooc reads c as the output it scales by beta."""
    cdef vector[int64_t] av = list(a_shape)
    cdef vector[int64_t] cv = list(c_shape)
    cdef ooc.DType element = _DTYPES[dtype]
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    cdef const void* a = _data(a_bytes)
    cdef const void* c = _data(c_bytes)
    cdef void* out = _writable_data(out_bytes)
    with nogil:
        ooc.add_tensor(av, cv, alpha, a, beta, c, out, options.c_obj, &plan, &stats, element)
    return _ran(plan, stats)


cdef ooc.ConvProblem _pool_problem(tuple x_shape, tuple kernel, tuple stride, tuple padding, str dtype,
                                   str layout="channels_first") except *:
    cdef ooc.ConvProblem problem = ooc.pool_problem(list(x_shape), list(kernel), list(stride), list(padding),
                                                    _DTYPES[dtype])
    problem.layout = _LAYOUTS[layout]  # x, y, dy and dx alike (pyooc/_layouts.py)
    return problem


def pool_output_shape(tuple x_shape, tuple kernel, tuple stride, tuple padding):
    """Checks the pooling geometry (ValueError naming the argument) and gives y's shape."""
    return tuple(_pool_problem(x_shape, kernel, stride, padding, "float32").y_shape())


def pool_mode(str mode):
    ooc.pool_mode_from_name(mode.encode())


def plan_pool_forward(tuple x_shape, tuple kernel, tuple stride, tuple padding, CallOptions options not None,
                      str dtype="float32", str layout="channels_first"):
    cdef ooc.ConvProblem problem = _pool_problem(x_shape, kernel, stride, padding, dtype, layout)
    cdef ooc.Plan plan
    with nogil:
        plan = ooc.plan_pool_forward(problem, options.c_obj)
    return Plan.wrap(plan)


def pool_forward(tuple x_shape, tuple kernel, tuple stride, tuple padding, str mode, x_bytes, y_bytes,
                 CallOptions options not None, str dtype="float32", str layout="channels_first"):
    cdef ooc.ConvProblem problem = _pool_problem(x_shape, kernel, stride, padding, dtype, layout)
    cdef ooc.PoolMode m = ooc.pool_mode_from_name(mode.encode())
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    cdef const void* x = _data(x_bytes)
    cdef void* y = _writable_data(y_bytes)
    with nogil:
        ooc.pool_forward(problem, m, x, y, options.c_obj, &plan, &stats)
    return _ran(plan, stats)


def plan_pool_backward(tuple x_shape, tuple kernel, tuple stride, tuple padding, CallOptions options not None,
                       str dtype="float32", str layout="channels_first"):
    cdef ooc.ConvProblem problem = ooc.pool_backward_problem(_pool_problem(x_shape, kernel, stride, padding, dtype,
                                                                           layout))
    cdef ooc.Plan plan
    with nogil:
        plan = ooc.plan_pool_backward(problem, options.c_obj)
    return Plan.wrap(plan)


def pool_backward(tuple x_shape, tuple kernel, tuple stride, tuple padding, str mode, y_bytes, dy_bytes, x_bytes,
                  dx_bytes, CallOptions options not None, str dtype="float32", str layout="channels_first"):
    cdef ooc.ConvProblem problem = ooc.pool_backward_problem(_pool_problem(x_shape, kernel, stride, padding, dtype,
                                                                           layout))
    cdef ooc.PoolMode m = ooc.pool_mode_from_name(mode.encode())
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    cdef const void* y = _data(y_bytes)
    cdef const void* dy = _data(dy_bytes)
    cdef const void* x = _data(x_bytes)
    cdef void* dx = _writable_data(dx_bytes)
    with nogil:
        ooc.pool_backward(problem, m, y, dy, x, dx, options.c_obj, &plan, &stats)
    return _ran(plan, stats)
