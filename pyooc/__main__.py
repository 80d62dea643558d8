"""Command line: `python -m pyooc demo` runs an out-of-core convolution; `python -m pyooc info`
prints versions, devices and where cuDNN was found."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="pyooc", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run an out-of-core convolution and check it")
    demo.add_argument("--backend", choices=("auto", "cuda", "host"), default="auto")
    demo.add_argument("--memory-limit", default=None, help="device budget, e.g. 512MiB (default: per backend)")
    demo.add_argument("--seed", type=int, default=None)
    commands.add_parser("info", help="print versions, devices and the cuDNN library path")
    args = parser.parse_args(argv)

    if args.command == "info":
        import pyooc

        for key, value in pyooc.info().items():
            print(f"{key}: {value}")
        return 0
    from pyooc import demo as demo_module

    return demo_module.run(backend=args.backend, memory_limit=args.memory_limit, seed=args.seed)


if __name__ == "__main__":
    sys.exit(main())
