"""`pyooc plan OP ...`: the Plan a pyooc call would run, printed or as JSON, for every plan_*
function. The options of each operation are derived from its plan_* signature, not listed here:
a `*_shape` argument becomes --x/--w/--dy/... (e.g. --x 8,64,56,56 or 8x64x56x56), a bool one a
flag (--bias / --no-bias), any other takes an int, a tuple "1,1", a float or a name."""

import argparse
import inspect
import json

from pyooc.cli import subcommand

NAME = "plan"
EXAMPLES = """  pyooc plan conv_forward --x 8,64,128,128,128 --w 64,64,3,3,3 --padding 1 --memory-limit 512MiB
  pyooc plan conv_backward_filter --x 32,256,56,56 --dy 32,256,56,56 --w 256,256,3,3 --padding 1 --json
  pyooc plan pool_forward --x 16,64,112,112 --kernel 2 --machine h200
  pyooc plan conv_forward --help   (the options of one operation)"""


def plan_functions():
    """Every public plan_* function, by operation name ("conv_forward" for plan_conv_forward)."""
    import pyooc

    return {name[len("plan_"):]: getattr(pyooc, name) for name in pyooc.__all__ if name.startswith("plan_")}


def parse_shape(text):
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is ints separated by ',' or 'x', got {text!r}") from None
    if not dims:
        raise argparse.ArgumentTypeError("a shape needs at least one dimension")
    return dims


def parse_value(text):
    """An option's value: an int, a tuple of ints ("1,1"), a float, or a name, whichever parses."""
    if "," in text:
        return parse_shape(text)
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def option_name(parameter):
    name = parameter[:-len("_shape")] if parameter.endswith("_shape") else parameter
    return "--" + name.replace("_", "-")


def add_operation_options(p, function):
    """The options of one plan_* function, from its signature."""
    for param in inspect.signature(function).parameters.values():
        flag = option_name(param.name)
        if param.name == "backend":
            p.add_argument(flag, dest=param.name, choices=("auto", "cuda", "host"), default=param.default)
        elif param.name.endswith("_shape") or param.name == "shape":
            p.add_argument(flag, dest=param.name, type=parse_shape, required=True, metavar="SHAPE",
                           help=f"{param.name} (ints separated by ',' or 'x')")
        elif param.name in ("memory_limit", "machine", "dtype"):
            p.add_argument(flag, dest=param.name, default=param.default,
                           help={"memory_limit": "device budget, bytes or e.g. 512MiB (default: the process default)",
                                 "machine": "plan for this machine model: a file from `pyooc info --save-model`, "
                                            "or a GPU's name (h200)",
                                 "dtype": "element type (float32)"}[param.name])
        elif isinstance(param.default, bool):
            p.add_argument(flag, dest=param.name, action=argparse.BooleanOptionalAction, default=param.default)
        else:
            required = param.default is inspect.Parameter.empty
            p.add_argument(flag, dest=param.name, type=parse_value, required=required,
                           default=None if required else param.default, metavar="VALUE",
                           help=None if required else f"default {param.default}")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")


def add_parser(commands):
    p = subcommand(commands, NAME, "print the plan a call would run (no data needed)",
                   "Prints the Plan a pyooc call would run for these shapes and options, without running "
                   "it: the split, the chunks, device bytes at peak, link traffic, the predicted time and "
                   "the candidates it beat. OP is the plan_* function's name without its prefix.", EXAMPLES)
    operations = p.add_subparsers(dest="operation", required=True, metavar="OP")
    for name, function in plan_functions().items():
        summary = (function.__doc__ or "").strip().split("\n")[0]
        op = operations.add_parser(name, help=summary, description=summary)
        add_operation_options(op, function)


def plan_as_dict(plan):
    return {
        "operation": plan.operation, "backend": plan.backend, "splits": plan.splits, "tiles": plan.tiles,
        "num_chunks": plan.num_chunks, "loop_order": plan.loop_order, "passes": plan.passes,
        "peak_device_bytes": plan.peak_device_bytes, "memory_limit": plan.memory_limit,
        "workspace_bytes": plan.workspace_bytes, "bytes_h2d": plan.bytes_h2d, "bytes_d2h": plan.bytes_d2h,
        "predicted_seconds": plan.predicted_seconds, "candidates_fitting": plan.candidates_fitting,
        "candidates": plan.candidates, "machine": plan.machine,
    }


def run(args):
    from pyooc._plan_log import describe_candidates

    function = plan_functions()[args.operation]
    params = inspect.signature(function).parameters
    positional = [getattr(args, name) for name, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD]
    keywords = {name: getattr(args, name) for name, p in params.items() if p.kind == p.KEYWORD_ONLY}
    plan = function(*positional, **keywords)
    if args.json:
        print(json.dumps(plan_as_dict(plan), indent=2))
    else:
        print(plan)
        print(describe_candidates(plan))
    return 0
