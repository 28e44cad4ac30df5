"""``omny view FILE [--configuration N] [--write DIR] [--port P]``: see the plan in Model Explorer.

Shows a ``.omny`` plan, an annotated IR v11 model or a split folder in Google's Model Explorer
with the plan as node data: per node its pipeline stage (one colour per stage), its device,
its stage's share of the memory and of the compute, the sharding of its weight under a
tensor-parallel plan, and the values crossing a cut (in red). ``--write DIR`` only writes the
node-data files (one per configuration, Model Explorer's JSON format) for a Model Explorer run
by hand; without it the viewer starts (the ``view`` extra: ``pip install
onnx-ir-multidevice[view]``) and its address is printed. ``--json`` prints what was written:
per model, the model file written for the viewer (``null`` with ``--write``, which writes none)
and its node-data files.
"""

from __future__ import annotations

__all__ = ["register", "run"]

import argparse
from pathlib import Path
from typing import Any

from onnx_ir_multidevice._cli import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    error,
    help_description,
    in_cli_words,
    print_json,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``view`` subcommand."""
    parser = subparsers.add_parser(
        "view",
        help="show the plan on the graph in Google's Model Explorer (node-data overlays)",
        description=help_description(__doc__),
    )
    parser.add_argument(
        "file", type=Path, help="an .omny plan, an annotated .onnx model or a split folder"
    )
    parser.add_argument(
        "--configuration",
        metavar="ID",
        help="index or IR v11 name of the configuration to show (default: all, one file each)",
    )
    parser.add_argument(
        "--write",
        metavar="DIR",
        type=Path,
        help="only write the node-data files into DIR (created if absent); start no viewer",
    )
    parser.add_argument("--port", type=int, default=8080, help="the viewer's port (8080)")
    parser.add_argument("--host", default="localhost", help="the viewer's host (localhost)")
    parser.add_argument("--json", action="store_true", help="print the files as one JSON document")
    parser.set_defaults(func=run)


def _document(overlays: list) -> dict:
    return {
        "models": [
            {
                # null with --write: no model file is written, only the node data
                "model": None if o.model_path is None else str(o.model_path),
                "node_data": [
                    {
                        "configuration": f.configuration,
                        "num_stages": f.num_stages,
                        "path": str(f.path),
                    }
                    for f in o.node_data
                ],
            }
            for o in overlays
        ]
    }


def run(args: argparse.Namespace) -> int:
    """Write the overlays of ``args.file``; start the viewer unless ``--write``."""
    # lazy: the implementation loads models, which `omny --help` does not need
    from onnx_ir_multidevice._errors import ViewError
    from onnx_ir_multidevice.view.viewer import prepare

    if not args.file.exists():
        error(f"{args.file}: no such file or folder")
        return EXIT_USAGE
    try:
        return _view(args, prepare)
    except ViewError as exc:  # no plan, or no such configuration: as the other commands, 1
        message = in_cli_words(str(exc))
        error(message if str(args.file) in message else f"{args.file}: {message}")
        return EXIT_FINDINGS


def _view(args: argparse.Namespace, prepare: Any) -> int:
    # lazy: `omny --help` needs no temporary folder
    import tempfile

    if args.write is not None:
        overlays = prepare(
            args.file, args.write, configuration=args.configuration, write_model=False
        )
        if args.json:
            print_json(_document(overlays))
        else:
            for overlay in overlays:
                for item in overlay.node_data:
                    print(f"{item.path}: {item.configuration} ({item.num_stages} stages)")
        return EXIT_OK
    try:
        import model_explorer  # the `view` extra
    except ImportError:
        error(
            "Model Explorer is not installed: pip install 'onnx-ir-multidevice[view]' "
            "(or write the overlays with --write DIR)"
        )
        return EXIT_USAGE
    with tempfile.TemporaryDirectory(prefix="omny-view-") as folder:
        overlays = prepare(args.file, folder, configuration=args.configuration)
        config = model_explorer.config()
        for overlay in overlays:
            model_path = overlay.model_path
            assert model_path is not None  # prepare wrote it (write_model=True)
            config.add_model_from_path(str(model_path))
            for item in overlay.node_data:
                config.add_node_data_from_path(str(item.path), model_name=model_path.name)
        if args.json:
            print_json(_document(overlays))
        address = f"http://{args.host}:{args.port}/?data={config.to_url_param_value()}"
        print(f"Model Explorer: {address} (Ctrl-C to stop)", flush=True)
        model_explorer.visualize_from_config(
            config=config,
            host=args.host,
            port=args.port,
            extensions=["model_explorer_onnx"],
            no_open_in_browser=True,
        )
    return EXIT_OK
