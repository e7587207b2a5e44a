"""aipc inspect: a model's inputs and outputs (dynamic dims marked), opsets, operator histogram, the
partition the backend would make — per node: QNN or CPU, with the reason — and the operator
patches that apply. Without MODEL it lists the backends and their availability here.

usage: aipc inspect [MODEL] [--backend qnn|cpu] [--target T] [--precision P]
                    [--shape NAME=D0,D1,...]... [--dim NAME=N]...
                    [--json] [--all-nodes] [--no-probe]
       aipc inspect MODEL.bin [--json]

A raw QNN context binary (``*.bin``) is described instead: its graphs and their input/output
tensors (QNN names, shapes, data types, scale/offset of quantized tensors), read with the QNN
System library (library: onnxwrapper.toolkit.inspect_binary()).

With the QNN backend available, the partition is measured: a real QNN session is created in a
child process, and the headline is its own count — what
onnxwrapper.InferenceSession(..., backend="qnn").get_partition().summary() prints at the same
shapes — followed by the model's own nodes and, for each node off the NPU, the QNN EP's reason.
Otherwise it is predicted from static rules (marked "predicted, not measured"). A model with
dynamic input shapes is compiled per input shape at run time, so without --shape/--dim nothing is
measured: the headline says so, and the rules' prediction for a fixed shape follows. An EPContext
model (aipc compile's output) is probed from its own folder, whatever the working directory.
Library equivalent: onnxwrapper.toolkit.inspect_model().
"""

from __future__ import annotations

import argparse
import json
import sys

import onnxwrapper
from aipc import _console
from aipc._exit_codes import EXIT_FAILED, EXIT_USAGE
from aipc_loader._report import say
from onnxwrapper.errors import ArtifactError
from onnxwrapper.toolkit import format_binary, inspect_binary, inspect_model, parse_dim_arg, parse_shape_arg

__all__ = ["add_arguments", "main", "add_model_options", "model_options"]


def add_model_options(parser: argparse.ArgumentParser,
                      backend_help: str = "backend whose partition to predict: qnn (default) or cpu") -> None:
    """The options shared by ``inspect`` and ``compile``: backend, target, shapes."""
    group = parser.add_argument_group("backend and shapes")
    group.add_argument("--backend", default="qnn", metavar="NAME", help=backend_help)
    group.add_argument("--target", metavar="T", help="QNN target SoC, e.g. snapdragon-x-elite (default on a host "
                                                     "without NPU), snapdragon-8-gen-3")
    group.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                       help="static shape of input NAME (repeatable), e.g. --shape images=1,3,640,640")
    group.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                       help="value of the named dynamic dim NAME in every input using it (repeatable), e.g. "
                            "--dim batch=1")


def model_options(args: argparse.Namespace) -> tuple[dict, dict, dict]:
    """``(backend_options, shapes, dims)`` from parsed options.

    Raises:
        ValueError: a malformed --shape/--dim (message says what is expected).
    """

    options = {}
    if getattr(args, "target", None):
        options["target"] = args.target
    precision = getattr(args, "precision", None)
    if precision in ("fp16", "fp32"):
        options["precision"] = precision
    shapes = dict(parse_shape_arg(s) for s in args.shape)
    dims = dict(parse_dim_arg(d) for d in args.dim)
    return options, shapes, dims


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``aipc inspect`` (see the module docstring)."""
    parser.add_argument("model", nargs="?", help="ONNX model file, or a QNN context binary (.bin); omit to list "
                                                 "the backends")
    add_model_options(parser)
    parser.add_argument("--precision", choices=("fp16", "fp32"), help="QNN precision of the session probe")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.add_argument("--all-nodes", action="store_true", help="list every node, not only those off the NPU")
    parser.add_argument("--no-probe", action="store_true",
                        help="predict the partition from static rules instead of creating a QNN session")


def _list_backends(as_json: bool) -> int:
    infos = onnxwrapper.get_available_backends()
    if as_json:
        print(json.dumps([{"name": i.name, "available": i.available, "reason": i.reason, "simulated": i.simulated,
                           "real_npu": i.real_npu, "install_hint": i.install_hint} for i in infos], indent=2))
        return 0
    print(infos.describe())  # the details: whole reasons and fixes (print(infos) is one short line each)
    return 0


def _inspect_binary(args: argparse.Namespace) -> int:
    """``aipc inspect MODEL.bin``: exit 0, 64 (no such file, options that need an ONNX model), 1 (unreadable)."""

    if args.shape or args.dim or args.all_nodes:
        say("error: --shape/--dim/--all-nodes apply to ONNX models; a context binary has fixed shapes")
        return EXIT_USAGE
    try:
        info = inspect_binary(args.model)
    except FileNotFoundError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    except ArtifactError as exc:
        say(f"error: {exc}")
        return EXIT_FAILED
    print(json.dumps(info, indent=2) if args.json else _console.clean(format_binary(info)))
    sys.stdout.flush()
    return 0


def main(args: argparse.Namespace) -> int:
    """Run ``aipc inspect``; returns the exit status (64 for bad options)."""
    if not args.model:
        return _list_backends(args.json)
    if args.model.lower().endswith(".bin"):
        return _inspect_binary(args)
    try:
        options, shapes, dims = model_options(args)
    except ValueError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    if args.backend not in ("qnn", "cpu"):
        say(f"error: inspect predicts partitions for --backend qnn or cpu, not {args.backend!r}")
        return EXIT_USAGE
    from google.protobuf.message import DecodeError
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    try:
        result = inspect_model(args.model, backend=args.backend, backend_options=options, shapes=shapes, dims=dims,
                               probe=False if args.no_probe else None)
    except FileNotFoundError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    except DecodeError as exc:  # protobuf cannot read it: as `aipc run MODEL` says it
        say(f"error: {args.model}: not an ONNX model ({type(exc).__name__}: {exc})")
        return EXIT_USAGE
    except (ValueError, InvalidArgument) as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    except RuntimeError as exc:
        say(f"error: {exc}")
        return EXIT_FAILED
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
    else:  # model, node and file names come from elsewhere: shown sanitized
        print(_console.clean(result.format_text(all_nodes=args.all_nodes)))
    sys.stdout.flush()
    return 0
