"""The ``lazy-mlir`` command line."""
from __future__ import annotations

import argparse
import sys


def _demo(args) -> int:
    from .demo import run_demo
    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lazy-mlir",
        description="Lazy tensors for PyTorch, compiled through MLIR and IREE.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser("demo", help="train the LTC tutorial's MNIST CNN on handwritten digits "
                                    "on the lazy device and compare with eager PyTorch")
    d.add_argument("--epochs", type=int, default=3, help="passes over the training set (3)")
    d.add_argument("--batch-size", type=int, default=64, help="training batch size (64)")
    d.add_argument("--target", default=None, help="cpu (default; also LAZY_MLIR_TARGET)")
    d.add_argument("--steps", type=int, default=None,
                   help="stop after this many training steps (default: all)")
    d.add_argument("--plain", action="store_true",
                   help="train with the plain loop (device + mark_step) instead of "
                        "lm.compile_train_step")
    d.set_defaults(func=_demo)
    from .cache_cmd import add_parser as add_cache
    from .coverage_cmd import add_parser as add_coverage
    from .dump_cmd import add_parsers as add_dump
    from .doctor import add_parser as add_doctor
    from .export_cmd import add_parsers as add_export
    add_cache(sub)
    add_dump(sub)
    add_export(sub)
    add_doctor(sub)
    add_coverage(sub)
    from .explain_cmd import add_parser as add_explain; add_explain(sub)  # noqa: E702
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args = []
    if "--" in argv:  # everything after -- belongs to the user's script
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    args.script_args = script_args
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from .errors import UsageError
    try:
        return args.func(args) or 0
    except UsageError as e:
        print(f"lazy-mlir: {e}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as e:
        message = " ".join(str(e).split()).removeprefix("lazy-mlir: ")
        print(f"lazy-mlir: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
