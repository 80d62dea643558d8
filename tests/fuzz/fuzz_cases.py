"""The fuzz suite's cases (issue 13, item 5): hypothesis strategies that draw calls of every public
function and its plan_* twin, as JSON-able descriptions a child process runs (fuzz_worker.py).

A case is {"fn": name, "args": [...], "kwargs": {...}, "check": how its result is judged, "bad":
the argument made bad, or None}. Arrays are described, not passed: {"array": shape, "seed": s}
(float32 normal values, made in the child); {"np_str": s} is a numpy.str_. Three families:
- valid: small problems of every operation run with backend `backend` under a small memory_limit
  (many chunks), judged against the same call in one chunk and, for some, a float64 reference;
- bad: a valid case with one argument replaced by a hostile value (huge, negative, zero, wrong
  type, NaN, numpy scalars): a result or ValueError/TypeError/MemoryError/NotImplementedError;
- plans: plan_* twins over shapes and options from small to 2^63, budgets from 1 byte to 2^64-1.
"""

import inspect

import hypothesis.strategies as st
import numpy as np

import pyooc

HUGE = [2**31 - 1, 2**31, 2**32, 2**40, 2**56, 2**60, 2**62, 2**63 - 1, 2**63, 2**64, 2**64 - 1]
HOSTILE = HUGE + [-(2**63), -(2**31), -1, 0, 1.5, float("nan"), float("inf"), "3", None, True, [], [[1]],
                  {"np_str": "relu"}, {"np_int": 3}, {"np_int": 2**62}, {"np_float": 2.0}]
BUDGETS = [1, 255, 4096, 40000, "64 KiB", "1MiB", 2**40, 2**64 - 1, 2**64, -1, 0, 1.5, "1e400", "lots", "", None]
SMALL_BUDGETS = [2048, 4096, 8192, 20000, 65536]


def arr(shape, seed, form=None):
    """An array's description; form: {"dtype": ..., "layout": ...} (fuzz_worker.build), or None for
    float32 C-contiguous."""
    return {"array": list(shape), "seed": seed, **(form or {})}


# Element types and memory layouts the case's arrays share (issue 15): a half or channels-last
# call where the function serves it, a TypeError/NotImplementedError naming the argument where not.
forms = st.sampled_from([None, None, None, {"dtype": "float16"}, {"dtype": "bfloat16"}, {"layout": "channels_last"},
                         {"dtype": "bfloat16", "layout": "channels_last"}])


dims = st.integers(1, 5)
seeds = st.integers(0, 2**31 - 1)


@st.composite
def spatial(draw, lo=1, hi=7):
    sd = draw(st.integers(1, 3))
    return [draw(st.integers(lo, hi if sd < 3 else 5)) for _ in range(sd)]


@st.composite
def conv_geometry(draw, grouped=False):
    """Shapes and options of a small valid-looking convolution (sometimes invalid: ValueError).
    grouped: also groups (x's channels and w's filters a multiple of them) and torch's padding
    strings ("same" with a stride is refused: ValueError)."""
    sp = draw(spatial(2, 8))
    groups = draw(st.sampled_from([1, 1, 2, 3])) if grouped else 1
    n, c, k = draw(dims), draw(dims), draw(dims)
    kernel = [draw(st.integers(1, 4 if grouped else 3)) for _ in sp]
    stride = draw(st.sampled_from([1, 2, [1] * len(sp)]))
    padding = draw(st.sampled_from([0, 1, "same", "valid"] if grouped else [0, 1]))
    dilation = draw(st.sampled_from([1, 2]))
    g = {"x": [n, c * groups] + sp, "w": [k * groups, c] + kernel, "stride": stride, "padding": padding,
         "dilation": dilation}
    if grouped:
        g["groups"] = groups
    return g


def conv_out(g):
    out = []
    stride = g["stride"] if isinstance(g["stride"], list) else [g["stride"]] * (len(g["x"]) - 2)
    for i, e in enumerate(g["x"][2:]):
        span = g["dilation"] * (g["w"][2 + i] - 1) + 1
        padding = {"same": span - 1, "valid": 0}.get(g["padding"], None)
        padded = e + (2 * g["padding"] if padding is None else padding)
        out.append((padded - span) // stride[i] + 1)
    return [g["x"][0], g["w"][0]] + out


def case(fn, args, kwargs, check="chunks", bad=None):
    return {"fn": fn, "args": args, "kwargs": kwargs, "check": check, "bad": bad}


@st.composite
def valid_cases(draw, backend="host"):
    """One small call of a run function under a budget that makes it chunk."""
    s = draw(seeds)
    opts = {"memory_limit": draw(st.sampled_from(SMALL_BUDGETS)), "backend": backend}
    kind = draw(st.sampled_from([
        "conv_forward", "conv_backward_data", "conv_backward_filter", "conv_backward_bias", "matmul", "linear_forward",
        "linear_backward", "batchnorm_forward_training", "batchnorm_forward_inference", "batchnorm_backward",
        "pool_forward", "pool_backward", "activation_forward", "activation_backward", "softmax_forward",
        "softmax_backward", "add_tensor", "conv_bias_activation_forward", "conv_bias_activation_pooling_forward",
        "deconv_bias_activation_forward", "conv_backward_data_filter_bias", "activation_conv_backward_data_filter_bias",
        "pooling_activation_conv_backward_data_filter_bias"]))
    if kind.startswith("conv") or kind.endswith("filter_bias") or kind.startswith("deconv"):
        # The convolution and its separate gradients also take groups, padding strings and
        # several (virtual) devices.
        grouped = kind in ("conv_forward", "conv_backward_data", "conv_backward_filter")
        g = draw(conv_geometry(grouped))
        geo = {"stride": g["stride"], "padding": g["padding"], "dilation": g["dilation"]}
        if grouped:
            geo["groups"] = g["groups"]
            # padding_mode: a mode pads what a chunk reads explicitly; too much padding for reflect
            # or circular is a ValueError, still a case.
            geo["padding_mode"] = draw(st.sampled_from(["zeros", "zeros", "reflect", "replicate", "circular"]))
        if kind in ("conv_forward", "conv_backward_data", "conv_backward_filter", "conv_backward_bias"):
            geo_devices = draw(st.sampled_from([None, None, [0, 1], [0, 0, 2]]))
            if geo_devices is not None and backend == "host":
                opts = {**opts, "devices": geo_devices}
        y = conv_out(g)
        if min(y) <= 0:  # an impossible geometry: ValueError expected, still a case
            y = [max(1, v) for v in y]
        f = draw(forms) if grouped or kind == "conv_backward_bias" else None
        bias_form = {"dtype": f["dtype"]} if f and "dtype" in f else None  # a bias has no layout
        if kind == "conv_forward":
            bias = arr([g["w"][0]], s + 3, bias_form) if draw(st.booleans()) else None
            return case(kind, [arr(g["x"], s, f), arr(g["w"], s + 1, f), bias], {**geo, **opts},
                        check=draw(st.sampled_from(["chunks", "reference"])))
        if kind == "conv_backward_data":
            return case(kind, [arr(y, s, f), arr(g["w"], s + 1, f), g["x"]], {**geo, **opts})
        if kind == "conv_backward_filter":
            return case(kind, [arr(g["x"], s, f), arr(y, s + 1, f), g["w"]], {**geo, **opts})
        if kind == "conv_backward_bias":
            return case(kind, [arr(y, s, f)], opts)
        if kind == "conv_bias_activation_forward":
            return case(kind, [arr(g["x"], s), arr(g["w"], s + 1), arr([g["w"][0]], s + 2)],
                        {**geo, **opts, "activation": draw(st.sampled_from(["relu", "identity", "sigmoid"]))})
        if kind == "conv_bias_activation_pooling_forward":
            return case(kind, [arr(g["x"], s), arr(g["w"], s + 1), arr([g["w"][0]], s + 2)],
                        {**geo, **opts, "pool_kernel": draw(st.sampled_from([1, 2])),
                         "pool_mode": draw(st.sampled_from(["max", "avg"]))})
        if kind == "deconv_bias_activation_forward":
            # conv_transpose of a y-shaped input back to x's shape: w [in = k, out = c, ...] is the
            # convolution's own w in torch's conv_transpose layout, the bias has x's channels.
            return case(kind, [arr(y, s), arr(g["w"], s + 1), arr([g["w"][1]], s + 2)], {**geo, **opts})
        if kind == "conv_backward_data_filter_bias":
            return case(kind, [arr(g["x"], s), arr(y, s + 1), arr(g["w"], s + 2)], {**geo, **opts})
        if kind == "activation_conv_backward_data_filter_bias":
            return case(kind, [arr(g["x"], s), arr(y, s + 1), arr(g["w"], s + 2), arr(y, s + 3)], {**geo, **opts})
        # pooling_activation_conv_backward_data_filter_bias: q = pool(y) with a 1x.. window of 2
        q = y[:2] + [max(1, v // 2) for v in y[2:]]
        return case(kind, [arr(g["x"], s), arr(q, s + 1), arr(g["w"], s + 2), arr(q, s + 3), arr(y, s + 4)],
                    {**geo, **opts, "pool_kernel": 2})
    if kind in ("matmul", "linear_forward", "linear_backward"):
        m, k_, n = draw(st.integers(1, 40)), draw(st.integers(1, 40)), draw(st.integers(1, 40))
        if kind == "matmul":
            return case(kind, [arr([m, k_], s), arr([k_, n], s + 1)], opts,
                        check=draw(st.sampled_from(["chunks", "reference"])))
        if kind == "linear_forward":
            return case(kind, [arr([m, k_], s), arr([n, k_], s + 1), arr([n], s + 2)], opts)
        return case(kind, [arr([m, k_], s), arr([n, k_], s + 1), arr([m, n], s + 2)], opts)
    shape = [draw(dims), draw(dims)] + draw(spatial(3 if kind.startswith("pool") else 1, 9))
    c = shape[1]
    f = draw(forms)  # the layers' arrays share one dtype and layout (batch norm's per-channel ones: float32)
    if kind.startswith("batchnorm"):
        if kind == "batchnorm_forward_training":
            return case(kind, [arr(shape, s, f), arr([c], s + 1), arr([c], s + 2)], opts)
        if kind == "batchnorm_forward_inference":
            return case(kind, [arr(shape, s, f), arr([c], s + 1), arr([c], s + 2), arr([c], s + 3),
                               {"abs": arr([c], s + 4)}], opts)
        return case(kind, [arr(shape, s, f), arr(shape, s + 1, f), arr([c], s + 2), arr([c], s + 3),
                           {"abs": arr([c], s + 4)}], opts)
    if kind.startswith("pool"):
        kernel = draw(st.sampled_from([1, 2, 3]))
        stride = draw(st.sampled_from([None, 1, 2]))
        pool_opts = {"stride": stride, "mode": draw(st.sampled_from(["max", "avg", "avg_exclude_pad"]))}
        if kind == "pool_forward":
            return case(kind, [arr(shape, s, f), kernel], {**pool_opts, **opts}, check=draw(st.sampled_from(
                ["chunks", "reference"])))
        return case(kind, [{"pool_of": arr(shape, s, f), "kernel": kernel, "stride": stride}, {"pool_dy": s + 1},
                           arr(shape, s, f)], {**pool_opts, **opts, "kernel": kernel})
    if kind.startswith("activation"):
        mode = draw(st.sampled_from(["relu", "sigmoid", "tanh", "elu", "swish", "gelu", "leaky_relu", "clipped_relu"]))
        if draw(st.booleans()):
            mode = {"np_str": mode}
        if kind == "activation_forward":
            return case(kind, [arr(shape, s, f), mode], opts, check=draw(st.sampled_from(["chunks", "reference"])))
        return case(kind, [arr(shape, s, f), arr(shape, s + 1, f), arr(shape, s + 2, f), mode], opts)
    if kind.startswith("softmax"):
        mode_opts = {"mode": draw(st.sampled_from(["channel", "instance"])), "log": draw(st.booleans())}
        if kind == "softmax_forward":
            return case(kind, [arr(shape, s, f)], {**mode_opts, **opts})
        return case(kind, [arr(shape, s, f), arr(shape, s + 1, f)], {**mode_opts, **opts})
    a = [v if draw(st.booleans()) else 1 for v in shape]
    return case("add_tensor", [arr(a, s, f), arr(shape, s + 1, f)], {**opts, "alpha": 0.5, "beta": 2.0},
                check=draw(st.sampled_from(["chunks", "reference"])))


@st.composite
def bad_cases(draw, backend="host"):
    """A valid case with one argument (positional or keyword) replaced by a hostile value."""
    c = draw(valid_cases(backend))
    names = [i for i in range(len(c["args"]))] + [k for k in c["kwargs"] if k != "backend"]
    names += ["stride", "padding", "dilation", "device", "coef", "eps", "alpha"] if c["fn"].startswith("conv") else [
        "device"]
    which = draw(st.sampled_from(names))
    value = draw(st.one_of(st.sampled_from(HOSTILE), st.sampled_from(BUDGETS),
                           st.lists(st.sampled_from(HUGE + [0, -1, 1]), min_size=1, max_size=4)))
    if isinstance(which, int):
        c["args"][which] = value
    else:
        c["kwargs"][which] = value
    c["check"] = "any"
    c["bad"] = which
    return c


shape_items = st.one_of(st.integers(1, 9), st.sampled_from(HUGE), st.integers(-2, 0), st.integers(1, 2**20))
REAL_BUDGETS = [4096, 65536, "1MiB", 2**30, None]


def accepts(fn, name):
    """Whether public function `fn` takes keyword `name` (hostile options go only where they can)."""
    return name in inspect.signature(getattr(pyooc, fn)).parameters


@st.composite
def plan_cases(draw, backend="host"):
    """A plan_* twin of a valid-looking problem with one size made extreme (or none), under a real
    or a hostile budget: a sane Plan (at least one chunk, peak within the budget) or an expected
    exception, in milliseconds."""
    valid = draw(valid_cases(backend))
    fn = "plan_" + valid["fn"]
    if not hasattr(pyooc, fn):
        fn = "plan_activation_forward"
        valid = case("activation_forward", [arr([2, 3, 4], 0), "relu"], {})
    shapes = [list(np.shape(a["array"])) if isinstance(a, dict) and "array" in a else None for a in valid["args"]]
    args = plan_args(fn, valid, shapes)
    opts = {k: v for k, v in valid["kwargs"].items() if accepts(fn, k) and k != "kernel"}
    opts["backend"] = backend
    first = next((a for a in valid["args"] if isinstance(a, dict) and "array" in a), {})
    for name in ("dtype", "layout"):  # the run case's array form, as the plan twin's options
        if name in first and accepts(fn, name):
            opts[name] = first[name]
    opts["memory_limit"] = draw(st.sampled_from(REAL_BUDGETS + BUDGETS))
    what = draw(st.sampled_from(["none", "dim", "dim", "option", "option"]))
    if what == "dim":  # one dimension of one shape made extreme: the geometry must stay checked
        i = draw(st.integers(0, len(args) - 1))
        if isinstance(args[i], list) and args[i] and all(isinstance(v, int) for v in args[i]):
            args[i][draw(st.integers(0, len(args[i]) - 1))] = draw(shape_items)
    elif what == "option":
        names = [n for n in ("stride", "padding", "dilation", "output_padding", "pool_kernel", "pool_stride",
                             "pool_padding", "groups", "device", "dtype", "layout", "padding_mode", "alpha",
                             "beta") if accepts(fn, n)]
        if names:
            opts[draw(st.sampled_from(names))] = draw(st.one_of(st.sampled_from(HOSTILE), st.integers(0, 3),
                                                                st.sampled_from(HUGE)))
    return case(fn, args, opts, check="plan")


def plan_args(fn, valid, shapes):
    """The plan twin's positional arguments: the run function's arrays as shapes."""
    a = valid["args"]
    if fn == "plan_pool_backward":
        return [list(a[2]["array"]), a[0]["kernel"]]
    if fn == "plan_pool_forward":
        return [list(a[0]["array"]), a[1]]
    if fn in ("plan_activation_backward",):
        return [list(a[0]["array"])]
    if fn == "plan_activation_forward":
        return [list(a[0]["array"])]
    if fn in ("plan_softmax_forward", "plan_softmax_backward", "plan_conv_backward_bias"):
        return [list(a[0]["array"])]
    if fn.startswith("plan_batchnorm"):
        return [list(a[0]["array"])]
    if fn in ("plan_matmul", "plan_linear_forward"):
        return [list(a[0]["array"]), list(a[1]["array"])]
    if fn == "plan_add_tensor":
        return [list(a[0]["array"]), list(a[1]["array"])]
    if fn in ("plan_conv_forward", "plan_conv_bias_activation_forward", "plan_conv_bias_activation_pooling_forward",
              "plan_deconv_bias_activation_forward"):
        return [list(a[0]["array"]), list(a[1]["array"])]
    if fn in ("plan_conv_backward_data", "plan_conv_backward_filter"):
        return [list(v["array"]) if isinstance(v, dict) else list(v) for v in a[:3]]
    # the fused backward twins: (x_shape, dy_shape, w_shape)
    return [list(a[0]["array"]), list(a[1]["array"]), list(a[2]["array"])]
