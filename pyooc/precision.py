"""How float32 convolutions and GEMMs multiply (libooc's Options::math; docs/precision.md): per
call (`math=` of the convolutions, their gradients, the fused functions, matmul and linear, and
their plan_* twins) and the process default (set_math). "fp32", the default, is full single
precision; "tf32" lets the GPU's tensor cores read the operands rounded to TF32 (about 5e-3 of
the result's norm) and accumulate in float32. Half precision uses tensor cores either way and the
host backend computes full FP32 either way. The plan records the mode it ran with (Plan.math)."""

import contextvars
import functools
import inspect

MATH_MODES = ("fp32", "tf32")
_default = "fp32"
# The math= of the call in progress (None: none given, the process default holds).
_call_math = contextvars.ContextVar("pyooc_call_math", default=None)


def check_math(math):
    """math as given, when it is one of MATH_MODES; ValueError naming `math` otherwise."""
    if not isinstance(math, str) or math not in MATH_MODES:
        raise ValueError(f"math must be one of {MATH_MODES}, got {math!r}")
    return math


def set_math(math):
    """The process default of every call's `math=`: "fp32" (full FP32, the initial default) or "tf32"."""
    global _default
    _default = check_math(math)


def get_math():
    """The process default math mode (set_math's), "fp32" unless set."""
    return _default


def call_math():
    """The math mode of the call in progress: its math= (accepts_math), else the process default."""
    given = _call_math.get()
    return _default if given is None else given


def accepts_math(function):
    """Gives a public function the `math=` keyword (None: the process default): checked first, then
    in force while the function builds its call options (pyooc/_call_args.py reads call_math)."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def with_math(*args, math=None, **kwargs):
        if math is None:
            return function(*args, **kwargs)
        token = _call_math.set(check_math(math))
        try:
            return function(*args, **kwargs)
        finally:
            _call_math.reset(token)

    with_math.__signature__ = signature.replace(parameters=[
        *signature.parameters.values(), inspect.Parameter("math", inspect.Parameter.KEYWORD_ONLY, default=None)])
    with_math.__doc__ = (function.__doc__ or "") + (
        '\n\n    math: "fp32" (full FP32) or "tf32" (tensor cores on float32 data, about 5e-3 relative'
        "\n    error); None: pyooc.set_math's default (pyooc/precision.py).")
    return with_math
