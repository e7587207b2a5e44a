"""Model workflows: ``aipc run MODEL.onnx`` and ``aipc diff --model MODEL.onnx`` (Polygraphy's
``polygraphy run model.onnx --onnxrt --trt``, with QNN, partitions and localization).

usage:
  aipc run MODEL.onnx [--backend qnn] [data loader options] [--warm-up N] [--save-outputs F.npz]
                      [--load-outputs GOLDEN] [tolerances] [--gen-script F.py]
  aipc diff --model MODEL.onnx [--backends cpu,qnn] [data loader options] [--load-outputs GOLDEN] …

The model runs once per backend, each in its own process, with the same inputs: generated
(--input-shapes, --val-range, --seed, --iterations), loaded (--load-inputs) or from your function
(--data-loader-script). `run` prints each output's dtype, shape and range, the partition and a
timing summary (min / median / max per iteration, after --warm-up runs); with --load-outputs (or
in `diff`, with a second backend) the outputs are judged exactly as `aipc diff` judges a script's:
same tolerances, same table, JSON and HTML reports, same exit statuses — 0 pass, 1 mismatch, 2 a
run failed or nothing was compared, 64 usage error. --gen-script writes the Python that does the
same through onnxwrapper's public API. Details and the comparison with Polygraphy: docs/model.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from aipc._exit_codes import EXIT_USAGE, UsageError
from aipc.args import (BackendArgs, BackendsArgs, CommandParser, CompareArgs, DataLoaderArgs, GenScriptArgs, GoldenArgs,
                       LocalizeArgs, ModelArgs, ModelRunArgs, Plan, ReportArgs, ToleranceArgs, Tool, argv_text)
from aipc.commands._progress import progress_bars
from aipc_loader._report import say
from onnxwrapper.diff import default_directory

__all__ = ["run_model_command", "diff_model_command", "is_model_path", "build_tool"]


def is_model_path(token: str) -> bool:
    """True for a path that names an ONNX model (ends in ``.onnx``): never run as a script."""
    return token.lower().endswith(".onnx")


def build_tool(command: str) -> Tool:
    """The argument groups of ``aipc run MODEL`` (``command="run"``) or ``aipc diff --model``."""
    run = command == "run"
    return Tool(ModelArgs(positional=run or command == "diff-positional"), DataLoaderArgs(),
                BackendArgs() if run else BackendsArgs(), ModelRunArgs("run" if run else "diff"), GoldenArgs(),
                ToleranceArgs(), LocalizeArgs(), ReportArgs(default_reports=not run), CompareArgs(), GenScriptArgs())


def _parser(prog: str, tool: Tool, usage: str) -> argparse.ArgumentParser:
    parser = CommandParser(prog=prog, usage=usage, description=__doc__.split("\n\n", 2)[2].strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    tool.add_parser_args(parser)
    return parser


def run_model_command(argv: Sequence[str]) -> int:
    """``aipc run MODEL.onnx …`` (``argv``: everything after ``run``). Returns the exit status."""
    return _main("run", list(argv), "aipc run", "aipc run MODEL.onnx [options]")


def diff_model_command(argv: Sequence[str]) -> int:
    """``aipc diff --model MODEL.onnx …`` or ``aipc diff MODEL.onnx …`` (``argv``: after ``diff``)."""
    argv = list(argv)
    positional = "--model" not in argv and not any(a.startswith("--model=") for a in argv)
    return _main("diff-positional" if positional else "diff", argv, "aipc diff",
                 "aipc diff --model MODEL.onnx [--backends cpu,qnn] [options]")


def _main(command: str, argv: list[str], prog: str, usage: str) -> int:
    tool = build_tool(command)
    parser = _parser(prog, tool, usage)
    prefix = f"{prog}: "  # errors name the command, as `aipc diff SCRIPT`'s do
    try:
        args = parser.parse_args(argv)
        tool.parse(args)
        if command == "run" and tool[BackendArgs].verbose:
            say(f"backend '{next(iter(tool[BackendArgs].labels))}', options {tool[BackendArgs].options or '{}'}")
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        say(f"error: {exc}", prefix)
        say(f"try '{prog} --help'", prefix)
        return EXIT_USAGE
    if tool[GenScriptArgs].path:
        return _write_script(tool, prog, argv)
    runs_args = tool[ModelRunArgs]
    runs_args.dir = os.path.abspath(runs_args.dir or default_directory(command=runs_args.command))
    say(f"results in {runs_args.dir}", prefix)
    close = _progress(tool)
    plan = tool.plan(Plan())
    try:
        status = plan.run()
    except UsageError as exc:
        say(f"error: {exc}", prefix)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the API's input errors are usage errors here
        if not _is_usage_problem(exc):
            raise
        say(f"error: {exc}", prefix)
        return EXIT_USAGE
    finally:
        close()
    runs, result = plan.namespace.get("runs"), plan.namespace.get("result")
    written = [p for p in (getattr(result, "directory", None) and os.path.join(result.directory, n)
                           for n in ("report.json", "report.html")) if p and os.path.exists(p)]
    if runs is not None:
        say(f"run directory: {runs.directory}" + (f"; reports: {', '.join(written)}" if written else ""), prefix)
    return int(status or 0)


def _is_usage_problem(exc: BaseException) -> bool:
    from onnxwrapper.errors import BackendNotFoundError, BackendOptionError

    if isinstance(exc, (ValueError, FileNotFoundError, BackendNotFoundError, BackendOptionError)):
        return True
    return type(exc).__name__ in ("InvalidArgument", "InvalidGraph")  # onnxruntime's, for feeds that do not fit


def _progress(tool: Tool):
    progress, close = progress_bars(tool[ModelRunArgs].quiet)
    tool[ModelRunArgs].progress = progress
    tool[CompareArgs].progress = progress
    return close


def _write_script(tool: Tool, prog: str, argv: list[str]) -> int:
    model = os.path.basename(tool[ModelArgs].path)
    backends = tool[BackendArgs] if BackendArgs in tool else tool[BackendsArgs]
    title = (f"Run {model} on {', '.join(backends.labels)}"
             + (" and compare the outputs" if tool[CompareArgs].needed() else "") + ".")
    args = [a for a in argv if not a.startswith(("--gen-script", "--gen"))]
    if "--gen-script" in argv or "--gen" in argv:
        flag = "--gen-script" if "--gen-script" in argv else "--gen"
        i = argv.index(flag)
        args = argv[:i] + argv[i + 2:]
    text = tool.plan(Plan()).render(title=title, command=f"{prog} {argv_text(args)}")
    path = tool[GenScriptArgs].path
    if path == "-":
        sys.stdout.write(text)
        return 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    say(f"wrote {os.path.abspath(path)} (run it with: python {path})")
    return 0
