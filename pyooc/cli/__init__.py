"""`pyooc` on the command line (`python -m pyooc` or the `pyooc` script): one module per
subcommand (plan, bench, info; demo lives in pyooc/demo.py), each with add_parser(subparsers) and
run(args) -> exit status."""

import argparse
import sys

DESCRIPTION = """pyooc: deep-learning layers whose tensors do not fit in GPU memory.

examples:
  pyooc plan conv_forward --x 8,64,128,128,128 --w 64,64,3,3,3 --padding 1 --memory-limit 512MiB
  pyooc bench
  pyooc info --save-model h200.json
  pyooc demo"""


def main(argv=None):
    from pyooc.cli import bench_command, demo_command, info_command, plan_command

    parser = argparse.ArgumentParser(prog="pyooc", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{plan,bench,info,demo}")
    modules = {m.NAME: m for m in (plan_command, bench_command, info_command, demo_command)}
    for module in modules.values():
        module.add_parser(commands)
    args = parser.parse_args(argv)
    try:
        return modules[args.command].run(args)
    except (ValueError, TypeError, MemoryError) as exc:  # bad options or an impossible budget: say so, no traceback
        print(f"pyooc {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


def subcommand(commands, name, help, description, examples):
    """A subparser whose --help says what it does and shows examples."""
    return commands.add_parser(name, help=help, description=f"{description}\n\nexamples:\n{examples}",
                               formatter_class=argparse.RawDescriptionHelpFormatter)
