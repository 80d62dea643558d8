# Bindings of the fused functions (native/include/ooc/fused.hpp), included into _native.pyx.
# pyooc/fused.py checks the Python arguments; shapes and geometry are checked by libooc.


def fused_activation(str name, double coef):
    """Checks an activation name ("identity" or an activation mode; ValueError listing them)."""
    ooc.fused_activation_from_name(name.encode(), coef)


def plan_conv_bias_activation_forward(tuple x_shape, tuple w_shape, tuple stride, tuple padding, tuple dilation,
                                      int64_t groups, double alpha1, double alpha2, bint has_bias,
                                      CallOptions options not None, str dtype="float32"):
    cdef ooc.ConvProblem problem = _conv_problem(x_shape, w_shape, stride, padding, dilation, groups, alpha1, alpha2,
                                                 has_bias, dtype)
    cdef ooc.Plan plan
    with nogil:
        plan = ooc.plan_conv_bias_activation_forward(problem, options.c_obj)
    return Plan.wrap(plan)


def conv_bias_activation_forward(x_bytes, tuple x_shape, w_bytes, tuple w_shape, z, bias, y_bytes,
                                 str activation, double coef, tuple stride, tuple padding, tuple dilation,
                                 int64_t groups, double alpha1, double alpha2, CallOptions options not None,
                                 str dtype="float32"):
    """Runs on flat byte views of the caller's arrays of `dtype` (no copies; z and bias may be None)."""
    cdef const void* x = _data(x_bytes)
    cdef const void* w = _data(w_bytes)
    cdef const void* z_ptr = _data(z)
    cdef const void* bias_ptr = _data(bias)
    cdef void* y = _writable_data(y_bytes)
    cdef ooc.FusedActivation act = ooc.fused_activation_from_name(activation.encode(), coef)
    cdef ooc.ConvProblem problem = _conv_problem(x_shape, w_shape, stride, padding, dilation, groups, alpha1, alpha2,
                                                 bias is not None, dtype)
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    with nogil:
        ooc.conv_bias_activation_forward(problem, act, x, w, z_ptr, bias_ptr, y, options.c_obj, &plan, &stats)
    return _ran(plan, stats)


cdef ooc.ConvProblem _fused_backward_problem(tuple x_shape, tuple dy_shape, tuple w_shape, tuple stride,
                                             tuple padding, tuple dilation, int64_t groups,
                                             str dtype="float32") except *:
    before, after = _padding_ends(padding)
    return ooc.ConvProblem.backward_data(list(dy_shape), list(w_shape), list(x_shape), list(stride), before,
                                         list(dilation), groups, 1.0, 0.0, _DTYPES[dtype], after)


def check_conv_backward_data_filter_bias(tuple x_shape, tuple dy_shape, tuple w_shape, tuple stride, tuple padding,
                                         tuple dilation, int64_t groups):
    """Validates the shapes and geometry (ValueError naming the argument)."""
    _fused_backward_problem(x_shape, dy_shape, w_shape, stride, padding, dilation, groups)


def plan_conv_backward_data_filter_bias(tuple x_shape, tuple dy_shape, tuple w_shape, tuple stride, tuple padding,
                                        tuple dilation, int64_t groups, CallOptions options not None,
                                        str dtype="float32"):
    cdef ooc.ConvProblem problem = _fused_backward_problem(x_shape, dy_shape, w_shape, stride, padding, dilation,
                                                           groups, dtype)
    cdef ooc.Plan plan
    with nogil:
        plan = ooc.plan_conv_backward_data_filter_bias(problem, options.c_obj)
    return Plan.wrap(plan)


def conv_backward_data_filter_bias(x_bytes, tuple x_shape, dy_bytes, tuple dy_shape, w_bytes, tuple w_shape,
                                   dx_bytes, dw_bytes, db_bytes, tuple stride, tuple padding, tuple dilation,
                                   int64_t groups, CallOptions options not None, str dtype="float32"):
    """Runs on flat byte views of the caller's arrays of `dtype` (no copies)."""
    cdef const void* x = _data(x_bytes)
    cdef const void* dy = _data(dy_bytes)
    cdef const void* w = _data(w_bytes)
    cdef void* dx = _writable_data(dx_bytes)
    cdef void* dw = _writable_data(dw_bytes)
    cdef void* db = _writable_data(db_bytes)
    cdef ooc.ConvProblem problem = _fused_backward_problem(x_shape, dy_shape, w_shape, stride, padding, dilation,
                                                           groups, dtype)
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    with nogil:
        ooc.conv_backward_data_filter_bias(problem, x, dy, w, dx, dw, db, options.c_obj, &plan, &stats)
    return _ran(plan, stats)


def plan_activation_conv_backward_data_filter_bias(tuple x_shape, tuple dy_shape, tuple w_shape, str activation,
                                                   double coef, bint with_pre, tuple stride, tuple padding,
                                                   tuple dilation, int64_t groups, CallOptions options not None,
                                                   str dtype="float32"):
    cdef ooc.ConvProblem problem = _fused_backward_problem(x_shape, dy_shape, w_shape, stride, padding, dilation,
                                                           groups, dtype)
    cdef ooc.FusedActivation act = ooc.fused_activation_from_name(activation.encode(), coef)
    cdef ooc.Plan plan
    with nogil:
        plan = ooc.plan_activation_conv_backward_data_filter_bias(problem, act, with_pre, options.c_obj)
    return Plan.wrap(plan)


def activation_conv_backward_data_filter_bias(x_bytes, tuple x_shape, dy_bytes, tuple dy_shape, w_bytes,
                                              tuple w_shape, y, pre, dx_bytes, dw_bytes, db_bytes, str activation,
                                              double coef, tuple stride, tuple padding, tuple dilation,
                                              int64_t groups, CallOptions options not None, str dtype="float32"):
    """Runs on flat byte views of `dtype` (no copies; y and pre may be None)."""
    cdef ooc.ConvProblem problem = _fused_backward_problem(x_shape, dy_shape, w_shape, stride, padding, dilation,
                                                           groups, dtype)
    cdef ooc.FusedActivation act = ooc.fused_activation_from_name(activation.encode(), coef)
    cdef const void* x = _data(x_bytes)
    cdef const void* dy = _data(dy_bytes)
    cdef const void* w = _data(w_bytes)
    cdef const void* y_ptr = _data(y)
    cdef const void* pre_ptr = _data(pre)
    cdef void* dx = _writable_data(dx_bytes)
    cdef void* dw = _writable_data(dw_bytes)
    cdef void* db = _writable_data(db_bytes)
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    with nogil:
        ooc.activation_conv_backward_data_filter_bias(problem, act, x, dy, w, y_ptr, pre_ptr, dx, dw, db,
                                                      options.c_obj, &plan, &stats)
    return _ran(plan, stats)


cdef ooc.ConvProblem _pooling_of(ooc.ConvProblem& conv, tuple kernel, tuple stride, tuple padding) except *:
    # The fused pooling pools the convolution's y: its dtype.
    return ooc.pool_problem(conv.y_shape(), list(kernel), list(stride), list(padding), conv.dtype)


def pooled_shape(tuple x_shape, tuple w_shape, tuple stride, tuple padding, tuple dilation, int64_t groups,
                 tuple pool_kernel, tuple pool_stride, tuple pool_padding):
    """The pooled output's shape (ValueError naming the argument for a bad geometry)."""
    cdef ooc.ConvProblem conv = _conv_problem(x_shape, w_shape, stride, padding, dilation, groups, 1.0, 0.0, False)
    return tuple(_pooling_of(conv, pool_kernel, pool_stride, pool_padding).y_shape())


def plan_conv_bias_activation_pooling_forward(tuple x_shape, tuple w_shape, tuple stride, tuple padding,
                                              tuple dilation, int64_t groups, double alpha1, double alpha2,
                                              bint has_bias, tuple pool_kernel, tuple pool_stride, tuple pool_padding,
                                              CallOptions options not None, str dtype="float32"):
    cdef ooc.ConvProblem conv = _conv_problem(x_shape, w_shape, stride, padding, dilation, groups, alpha1, alpha2,
                                              has_bias, dtype)
    cdef ooc.ConvProblem pool = _pooling_of(conv, pool_kernel, pool_stride, pool_padding)
    cdef ooc.Plan plan
    with nogil:
        plan = ooc.plan_conv_bias_activation_pooling_forward(conv, pool, options.c_obj)
    return Plan.wrap(plan)


def conv_bias_activation_pooling_forward(x_bytes, tuple x_shape, w_bytes, tuple w_shape, z, bias, out_bytes,
                                         str activation, double coef, tuple stride, tuple padding, tuple dilation,
                                         int64_t groups, double alpha1, double alpha2, tuple pool_kernel,
                                         tuple pool_stride, tuple pool_padding, str pool_mode,
                                         CallOptions options not None, str dtype="float32"):
    """Runs on flat byte views of `dtype` (no copies; z and bias may be None)."""
    cdef const void* x = _data(x_bytes)
    cdef const void* w = _data(w_bytes)
    cdef const void* z_ptr = _data(z)
    cdef const void* bias_ptr = _data(bias)
    cdef void* out = _writable_data(out_bytes)
    cdef ooc.FusedActivation act = ooc.fused_activation_from_name(activation.encode(), coef)
    cdef ooc.PoolMode mode = ooc.pool_mode_from_name(pool_mode.encode())
    cdef ooc.ConvProblem conv = _conv_problem(x_shape, w_shape, stride, padding, dilation, groups, alpha1, alpha2,
                                              bias is not None, dtype)
    cdef ooc.ConvProblem pool = _pooling_of(conv, pool_kernel, pool_stride, pool_padding)
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    with nogil:
        ooc.conv_bias_activation_pooling_forward(conv, act, pool, mode, x, w, z_ptr, bias_ptr, out, options.c_obj,
                                                 &plan, &stats)
    return _ran(plan, stats)


cdef ooc.ConvProblem _deconv(tuple x_shape, tuple w_shape, tuple stride, tuple padding, tuple output_padding,
                             tuple dilation, int64_t groups, double alpha1, double alpha2, bint has_bias,
                             str dtype="float32") except *:
    return ooc.deconv_problem(list(x_shape), list(w_shape), list(stride), list(padding), list(output_padding),
                              list(dilation), groups, alpha1, alpha2, has_bias, _DTYPES[dtype])


def deconv_output_shape(tuple x_shape, tuple w_shape, tuple stride, tuple padding, tuple output_padding,
                        tuple dilation, int64_t groups):
    """y's shape (ValueError naming the argument for a bad geometry)."""
    return tuple(_deconv(x_shape, w_shape, stride, padding, output_padding, dilation, groups, 1.0, 0.0,
                         False).x_shape())


def plan_deconv_bias_activation_forward(tuple x_shape, tuple w_shape, tuple stride, tuple padding,
                                        tuple output_padding, tuple dilation, int64_t groups, double alpha1,
                                        double alpha2, bint has_bias, CallOptions options not None,
                                        str dtype="float32"):
    cdef ooc.ConvProblem problem = _deconv(x_shape, w_shape, stride, padding, output_padding, dilation, groups,
                                           alpha1, alpha2, has_bias, dtype)
    cdef ooc.Plan plan
    with nogil:
        plan = ooc.plan_deconv_bias_activation_forward(problem, options.c_obj)
    return Plan.wrap(plan)


def deconv_bias_activation_forward(x_bytes, tuple x_shape, w_bytes, tuple w_shape, z, bias, y_bytes,
                                   str activation, double coef, tuple stride, tuple padding, tuple output_padding,
                                   tuple dilation, int64_t groups, double alpha1, double alpha2,
                                   CallOptions options not None, str dtype="float32"):
    """Runs on flat byte views of `dtype` (no copies; z and bias may be None)."""
    cdef const void* x = _data(x_bytes)
    cdef const void* w = _data(w_bytes)
    cdef const void* z_ptr = _data(z)
    cdef const void* bias_ptr = _data(bias)
    cdef void* y = _writable_data(y_bytes)
    cdef ooc.FusedActivation act = ooc.fused_activation_from_name(activation.encode(), coef)
    cdef ooc.ConvProblem problem = _deconv(x_shape, w_shape, stride, padding, output_padding, dilation, groups,
                                           alpha1, alpha2, bias is not None, dtype)
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    with nogil:
        ooc.deconv_bias_activation_forward(problem, act, x, w, z_ptr, bias_ptr, y, options.c_obj, &plan, &stats)
    return _ran(plan, stats)


def plan_pooling_activation_conv_backward_data_filter_bias(tuple x_shape, tuple dy_shape, tuple w_shape,
                                                           str activation, double coef, bint with_pre,
                                                           tuple stride, tuple padding, tuple dilation,
                                                           int64_t groups, tuple pool_kernel, tuple pool_stride,
                                                           tuple pool_padding, CallOptions options not None,
                                                           str dtype="float32"):
    cdef ooc.ConvProblem problem = _fused_backward_problem(x_shape, dy_shape, w_shape, stride, padding, dilation,
                                                           groups, dtype)
    cdef ooc.ConvProblem pool = _pooling_of(problem, pool_kernel, pool_stride, pool_padding)
    cdef ooc.FusedActivation act = ooc.fused_activation_from_name(activation.encode(), coef)
    cdef ooc.Plan plan
    with nogil:
        plan = ooc.plan_pooling_activation_conv_backward_data_filter_bias(problem, act, pool, with_pre, options.c_obj)
    return Plan.wrap(plan)


def pooling_activation_conv_backward_data_filter_bias(x_bytes, tuple x_shape, dq_bytes, w_bytes, tuple w_shape,
                                                      q_bytes, y_bytes, tuple y_shape, pre, dx_bytes, dw_bytes,
                                                      db_bytes, str activation, double coef, tuple stride,
                                                      tuple padding, tuple dilation, int64_t groups,
                                                      tuple pool_kernel, tuple pool_stride, tuple pool_padding,
                                                      str pool_mode, CallOptions options not None,
                                                      str dtype="float32"):
    """Runs on flat byte views of `dtype` (no copies; pre may be None)."""
    cdef ooc.ConvProblem problem = _fused_backward_problem(x_shape, y_shape, w_shape, stride, padding, dilation,
                                                           groups, dtype)
    cdef ooc.ConvProblem pool = _pooling_of(problem, pool_kernel, pool_stride, pool_padding)
    cdef ooc.FusedActivation act = ooc.fused_activation_from_name(activation.encode(), coef)
    cdef ooc.PoolMode mode = ooc.pool_mode_from_name(pool_mode.encode())
    cdef const void* x = _data(x_bytes)
    cdef const void* dq = _data(dq_bytes)
    cdef const void* w = _data(w_bytes)
    cdef const void* q = _data(q_bytes)
    cdef const void* y = _data(y_bytes)
    cdef const void* pre_ptr = _data(pre)
    cdef void* dx = _writable_data(dx_bytes)
    cdef void* dw = _writable_data(dw_bytes)
    cdef void* db = _writable_data(db_bytes)
    cdef ooc.Plan plan
    cdef ooc.RunStats stats
    with nogil:
        ooc.pooling_activation_conv_backward_data_filter_bias(problem, act, pool, mode, x, dq, w, q, y, pre_ptr, dx,
                                                              dw, db, options.c_obj, &plan, &stats)
    return _ran(plan, stats)
