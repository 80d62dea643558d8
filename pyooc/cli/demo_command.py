"""`pyooc demo`: an out-of-core convolution checked against a float64 reference (pyooc/demo.py)."""

from pyooc.cli import subcommand

NAME = "demo"


def add_parser(commands):
    p = subcommand(commands, NAME, "run an out-of-core convolution and check it",
                   "Runs an out-of-core convolution through a small budget and checks it against a float64 reference.",
                   "  pyooc demo\n  pyooc demo --backend host --memory-limit 64MiB")
    p.add_argument("--backend", choices=("auto", "cuda", "host"), default="auto")
    p.add_argument("--memory-limit", default=None, help="device budget, e.g. 512MiB (default: per backend)")
    p.add_argument("--seed", type=int, default=None)


def run(args):
    from pyooc import demo

    return demo.run(backend=args.backend, memory_limit=args.memory_limit, seed=args.seed)
