"""Command line entry point: ``vllm-frontend {frontend,serve,mock-engine}``."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level argument parser (subcommands are added by their modules)."""
    parser = argparse.ArgumentParser(prog="vllm-frontend", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_subparsers(dest="command")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from vllm_frontend import __version__

        print(__version__)
        return 0
    parser.print_help(sys.stderr)
    return 2
