"""Machine models: the figures the planner costs candidates with (ooc::MachineModel,
native/include/ooc/plan.hpp), so that plan_* can plan for a GPU that is not present.

A model is a dict of MachineModel's fields, optionally with "memory_limit" (the device budget its
plans use when the call names none; `pyooc info --save-model` records 80% of the GPU's free
memory, as the cuda backend's own default). plan_*(..., machine=M) takes a model as such a dict, a
JSON file written by `pyooc info --save-model FILE`, or a built-in GPU's name (BUILTIN_MODELS)."""

import contextvars
import functools
import inspect
import json
import os

from pyooc._arrays import as_float
from pyooc._plan_log import log_plan

# Every field of ooc::MachineModel, in its order, and which are rates that must be positive.
FIELDS = ("h2d_bytes_per_s", "d2h_bytes_per_s", "bidir_bytes_per_s", "host_copy_bytes_per_s", "flops_per_s",
          "chunk_half_flops", "chunk_overhead_s", "copies_share_compute")

# The H200's figures: those the cuda backend plans with by default (native/src/backend/cuda/
# cuda_machine_model.cpp), measured as docs/ARCHITECTURE.md's "Machine figures" records (pinned H2D
# 54 GB/s, D2H 55 GB/s, both at once 88 GB/s), and its 141 GB with the backend's 80% default budget.
BUILTIN_MODELS = {
    "h200": {
        "h2d_bytes_per_s": 54e9, "d2h_bytes_per_s": 55e9, "bidir_bytes_per_s": 88e9,
        "host_copy_bytes_per_s": 30e9, "flops_per_s": 40e12, "chunk_half_flops": 2e9,
        "chunk_overhead_s": 300e-6, "copies_share_compute": False,
        "memory_limit": int(141e9 * 0.8) // 256 * 256,
    },
}


def as_machine_model(machine):
    """A machine model (see the module's docstring) as a checked dict of every field, with
    "memory_limit" when the model has one."""
    if isinstance(machine, (str, os.PathLike)):
        name = os.fspath(machine)
        if name.lower() in BUILTIN_MODELS:
            machine = BUILTIN_MODELS[name.lower()]
        elif os.path.exists(name):
            with open(name) as f:
                try:
                    machine = json.load(f)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"machine: {name} is not a machine model saved by "
                                     f"`pyooc info --save-model` ({exc})") from None
        else:
            raise ValueError(f"machine must be a saved model's file, a dict or one of {sorted(BUILTIN_MODELS)}, "
                             f"got {name!r} (no such file)")
    if not isinstance(machine, dict):
        raise TypeError(f"machine must be a dict, a file name or a GPU's name, got {type(machine).__name__}")
    missing = [f for f in FIELDS if f not in machine]
    if missing:
        raise ValueError(f"machine lacks {missing} (a model has {list(FIELDS)})")
    model = {}
    for field in FIELDS[:-1]:
        value = as_float(machine[field], f"machine[{field!r}]")
        if not value > 0 or value == float("inf"):
            raise ValueError(f"machine[{field!r}] must be a positive finite number, got {value}")
        model[field] = value
    model["copies_share_compute"] = bool(machine["copies_share_compute"])
    if machine.get("memory_limit") is not None:
        from pyooc.memory import parse_memory_limit
        model["memory_limit"] = parse_memory_limit(machine["memory_limit"])
    return model


def save_machine_model(model, path):
    """Writes a model (dict) as JSON, as as_machine_model reads it back."""
    with open(path, "w") as f:
        json.dump(as_machine_model(model), f, indent=2)
        f.write("\n")


# The model the plan_* call now on this thread (or task) plans with; read by _call_args.call_options.
_planning_machine = contextvars.ContextVar("pyooc_planning_machine", default=None)


def planning_machine():
    return _planning_machine.get()


def accepts_machine(plan_function):
    """Gives a plan_* function the `machine=` argument: plan with that model (for a GPU that need
    not be present; backend "auto" then means that GPU) and, when the call names no memory_limit,
    the model's own budget. Every plan_* goes through here, so its plan is logged here too (DEBUG)."""
    signature = inspect.signature(plan_function)

    @functools.wraps(plan_function)
    def plan_with_machine(*args, machine=None, **kwargs):
        plan = _plan_for(plan_function, machine, args, kwargs)
        log_plan(plan)
        return plan

    plan_with_machine.__signature__ = signature.replace(parameters=[
        *signature.parameters.values(), inspect.Parameter("machine", inspect.Parameter.KEYWORD_ONLY, default=None)])
    plan_with_machine.__doc__ = (plan_function.__doc__ or "") + (
        "\n\n    machine: plan for this machine model instead of this machine's (pyooc.machine: a dict, a file"
        "\n    saved by `pyooc info --save-model`, or a built-in GPU's name such as \"h200\").")
    return plan_with_machine


def _plan_for(plan_function, machine, args, kwargs):
    if machine is None:
        return plan_function(*args, **kwargs)
    model = as_machine_model(machine)
    if kwargs.get("memory_limit") is None and model.get("memory_limit"):
        kwargs["memory_limit"] = model["memory_limit"]
    token = _planning_machine.set(model)
    try:
        return plan_function(*args, **kwargs)
    finally:
        _planning_machine.reset(token)
