"""`pyooc info`: versions, devices, where cuDNN was loaded from, the effective default budget and
(with a GPU) the link bandwidths measured now; `--save-model FILE` writes this machine's model for
planning elsewhere (plan_*(..., machine=FILE), `pyooc plan ... --machine FILE`)."""

import sys

from pyooc.cli import subcommand

NAME = "info"


def add_parser(commands):
    p = subcommand(commands, NAME, "print versions, devices, budget and link bandwidths",
                   "Prints pyooc's and cuDNN's versions (built against and loaded), the CUDA runtime, "
                   "devices, the default device budget plans use, and on a GPU machine the pinned link "
                   "bandwidths measured now. Warns when the cuDNN loaded is older than the one built against.",
                   "  pyooc info\n  pyooc info --save-model h200.json   (then: pyooc plan ... --machine h200.json)")
    p.add_argument("--save-model", metavar="FILE", help="write this machine's model (link bandwidths, flops, "
                   "overheads, default budget) as JSON, for planning on a machine without this GPU")
    p.add_argument("--no-measure", action="store_true", help="skip measuring the link (GPU machines)")


def machine_model_of_this_machine(measured):
    """This machine's model: the default backend's figures (those its plans are costed with), the
    link as measured now where a GPU is, and the default budget."""
    from pyooc._versions import effective_memory_limit
    from pyooc.layers import plan_activation_forward

    model = dict(plan_activation_forward((1, 1, 1, 1)).machine)
    if measured:
        model.update(h2d_bytes_per_s=measured["h2d"], d2h_bytes_per_s=measured["d2h"],
                     bidir_bytes_per_s=measured["bidir"])
    model["memory_limit"] = effective_memory_limit()
    return model


def run(args):
    import pyooc
    from pyooc._versions import info

    details = info(measure_link=not args.no_measure)
    for key, value in details.items():
        print(f"{key}: {value}")
    if "cudnn_warning" in details:
        print(f"warning: {details['cudnn_warning']}", file=sys.stderr)
    if args.save_model:
        measured = None
        if "link_h2d_GBps" in details:
            measured = {k: details[f"link_{k}_GBps"] * 1e9 for k in ("h2d", "d2h", "bidir")}
        model = machine_model_of_this_machine(measured)
        pyooc.save_machine_model(model, args.save_model)
        where = "this GPU" if pyooc.device_count() > 0 else "the host backend (no GPU here)"
        print(f"saved the machine model of {where} to {args.save_model}")
    return 0
