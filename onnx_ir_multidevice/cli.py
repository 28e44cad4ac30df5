"""The command lines as Python functions: ``omny`` and ``omny-oaax-toolchain``, in process.

Each function takes the arguments a shell would pass (without the program name), prints what
the command prints and returns its exit status instead of exiting, so a program, a test or a
documentation page runs a command exactly as a user would. The commands are documented in
the docs' *Command line* page. ``python -m onnx_ir_multidevice.cli ARGS`` runs ``omny ARGS``
(where the ``omny`` script is not on the ``PATH``).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["main", "oaax_toolchain", "subcommands"]

import sys
from collections.abc import Sequence

from onnx_ir_multidevice import _cli
from onnx_ir_multidevice._cli import oaax_convert as _oaax_convert


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``omny`` command line.

    Args:
        argv: Arguments without the program name, as a shell splits them (default:
            ``sys.argv[1:]``), e.g. ``["check", "model.omny", "--json"]``.

    Returns:
        The exit status: 0 ok, 1 findings, 2 unreadable input or bad usage.
    """
    return _cli.main(argv)


def oaax_toolchain(argv: Sequence[str] | None = None) -> int:
    """Run the ``omny-oaax-toolchain`` command line: exactly ``INPUT OUTDIR``.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 converted, 1 cannot be converted, 2 unreadable input or bad usage.
    """
    return _oaax_convert.main(argv)


def subcommands() -> list[str]:
    """Return the names of the ``omny`` subcommands, in the order ``omny --help`` lists them."""
    parser = _cli.build_parser()
    return [
        name
        for action in parser._actions
        if action.dest == "command"
        for name in action.choices  # type: ignore[union-attr]  # the subparsers action has them
    ]


if __name__ == "__main__":
    sys.exit(main())
