"""Argument groups of the model workflows (``aipc run MODEL.onnx``, ``aipc diff --model``): the
model, the data loader, the backends, the run itself, golden outputs and ``--gen-script``. Each
ends in public calls of :mod:`onnxwrapper.diff` (:mod:`aipc.args._groups`, :mod:`aipc.args._plan`)."""

from __future__ import annotations

import json
import os

from aipc._exit_codes import UsageError
from aipc.args._groups import ArgGroup, absolute, parse_bracketed
from aipc.args._plan import Call, Plan, Ref
from aipc.args._run_options import add_compile_budget, add_run_options, compile_budget, resolve_settings

__all__ = ["ModelArgs", "DataLoaderArgs", "BackendArgs", "BackendsArgs", "ModelRunArgs", "GoldenArgs",
           "GenScriptArgs", "parse_backend_options", "with_compile_budget", "argv_text"]


def parse_backend_options(items, labels) -> dict:
    """``--backend-option LABEL:KEY=VALUE`` items → ``{label: {key: value}}`` (a value is JSON when it
    parses as JSON, else the string), for ``aipc run MODEL`` and ``aipc diff``.

    Raises:
        UsageError: an item not of that form, or a label that is not one of ``labels``.
    """
    options: dict = {}
    for item in items:
        label, sep, rest = item.partition(":")
        key, eq, value = rest.partition("=")
        if not sep or not eq or not label or not key:
            raise UsageError(f"--backend-option {item!r}: expected LABEL:KEY=VALUE, e.g. qnn:precision=fp32")
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        options.setdefault(label, {})[key] = parsed
    unknown = sorted(set(options) - set(labels))
    if unknown:
        raise UsageError(f"--backend-option for {', '.join(unknown)}, which is not in --backends")
    return options


def with_compile_budget(options: dict, labels, budget) -> dict:
    """``options`` (``{label: {key: value}}``, from :func:`parse_backend_options`) with the compile
    budget (:func:`aipc.args.compile_budget`) added to every run whose backend declares its keys (qnn);
    a key the run's own ``--backend-option`` sets wins. ``labels``: ``{label: backend name}``."""
    if not budget:
        return options
    from onnxwrapper._registry import default_registry  # onnxruntime's import time: only with a budget

    result = {label: dict(given) for label, given in options.items()}
    for label, name in labels.items():
        declared = set(getattr(default_registry().get(name), "options", {}) or {})
        extra = {k: v for k, v in budget.items() if k in declared and k not in result.get(label, {})}
        if extra:
            result.setdefault(label, {}).update(extra)
    return result


class ModelArgs(ArgGroup):
    """Model: the ONNX model to run (a path ending in .onnx; an EPContext model from aipc compile too)"""

    def __init__(self, positional: bool) -> None:
        self.positional = positional
        self.path = ""

    def add_parser_args_impl(self, group) -> None:
        if self.positional:
            group.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
        else:
            group.add_argument("--model", metavar="MODEL.onnx", help="run this ONNX model instead of a script")

    def parse_impl(self, args) -> None:
        path = args.model
        if not path:
            raise UsageError("no model given")
        if not os.path.isfile(path):
            raise UsageError(f"model not found: {path}")
        self.path = os.path.abspath(path)

    def add_to_plan(self, plan: Plan) -> None:
        plan.constant("MODEL", self.path)


class DataLoaderArgs(ArgGroup):
    """Data loader: the inputs — generated (default), or loaded from a file or your own function"""

    def add_parser_args_impl(self, group) -> None:
        group.add_argument("--input-shapes", "--inputs", action="extend", nargs="+", default=[],
                           metavar="NAME:[DIMS]",
                           help="shape of a generated input, e.g. --input-shapes x:[1,3,224,224] (dynamic dims "
                                "default to 1)")
        group.add_argument("--val-range", action="extend", nargs="+", default=[], metavar="[NAME:][LO,HI]",
                           help="value range of generated inputs, all (e.g. [0,1]) or per input (x:[0,255]); "
                                "default by dtype: floats [0,1), uint8 [0,255], int8 [-128,127], other ints [0,1]")
        group.add_argument("--seed", type=int, default=None, help="seed of generated inputs (default 1); "
                                                                   "iteration k uses seed + k")
        group.add_argument("--iterations", "--iters", type=int, default=None, metavar="N",
                           help="number of inputs (iterations) to run (default 1, or all loaded ones)")
        group.add_argument("--load-inputs", metavar="PATH",
                           help="inputs from a file: .npz (aipc's tensor file or numpy.savez), .npy, JSON "
                                "(plain or Polygraphy's) or a capture directory")
        group.add_argument("--data-loader-script", metavar="FILE.py[:FUNC]",
                           help="inputs from your function (default name load_data): no argument, returns or "
                                "yields {input name: array}")

    def parse_impl(self, args) -> None:
        self.shapes = dict(self._named(parse_bracketed(s, "--input-shapes")) for s in args.input_shapes)
        ranges = {}
        for text in args.val_range:
            name, values = parse_bracketed(text, "--val-range", convert=float)
            if len(values) != 2 or values[0] > values[1]:
                raise UsageError(f"--val-range {text!r}: expected [LO,HI] with LO <= HI")
            ranges[name or "*"] = [int(v) if float(v).is_integer() else v for v in values]
        self.val_range = ranges
        self.seed, self.iterations = args.seed, args.iterations
        self.load, self.script = args.load_inputs, args.data_loader_script
        if self.iterations is not None and self.iterations < 1:
            raise UsageError("--iterations must be >= 1")
        if self.load and self.script:
            raise UsageError("give either --load-inputs or --data-loader-script, not both")
        generated = [o for o, v in (("--input-shapes", self.shapes), ("--val-range", self.val_range),
                                    ("--seed", self.seed is not None)) if v]
        if (self.load or self.script) and generated:
            raise UsageError(f"{', '.join(generated)} apply to generated inputs; "
                             f"{'--load-inputs' if self.load else '--data-loader-script'} gives them")

    @staticmethod
    def _named(item: tuple) -> tuple:
        name, dims = item
        if not name:
            raise UsageError("--input-shapes needs NAME:[D0,D1,…], e.g. x:[1,3,224,224]")
        if not dims or any(d <= 0 for d in dims):
            raise UsageError(f"--input-shapes {name}: dims must be positive integers")
        return name, dims

    def add_to_plan(self, plan: Plan) -> None:
        model = Ref("MODEL")
        golden = self.tool[GoldenArgs].inputs_source() if GoldenArgs in self.tool else None
        kwargs = {"iterations": self.iterations} if self.iterations is not None else {}
        if self.load or (golden and not self.script):
            plan.add(Call("diff.load_inputs", (absolute(self.load or golden), model), kwargs, target="inputs",
                          comment="Inputs: loaded" + ("" if self.load else " from the golden file (it records them)")))
        elif self.script:
            path, sep, func = self.script.rpartition(":")
            spec = f"{absolute(path)}:{func}" if sep and not os.path.isfile(self.script) else absolute(self.script)
            plan.add(Call("diff.load_data_loader", (spec, model), kwargs, target="inputs",
                          comment="Inputs: from your data loader"))
        else:
            kwargs = {k: v for k, v in (("shapes", self.shapes), ("val_range", self.val_range),
                                        ("seed", self.seed), ("iterations", self.iterations)) if v}
            plan.add(Call("diff.generate_inputs", (model,), kwargs, target="inputs",
                          comment="Inputs: generated (seed + k for iteration k; dtype-aware value ranges)"))


class BackendArgs(ArgGroup):
    """Backend: the backend that runs the model (aipc run)"""

    def add_parser_args(self, parser) -> None:
        """The run options of ``aipc run script.py`` (:func:`aipc.args.add_run_options`), shared."""
        add_run_options(parser)

    def parse_impl(self, args) -> None:
        from onnxwrapper._registry import default_registry
        from onnxwrapper.errors import BackendNotFoundError

        settings = resolve_settings(args)
        try:
            name = default_registry().resolve(settings.backend)
        except BackendNotFoundError as exc:
            raise UsageError(str(exc)) from exc
        self.verbose = settings.verbose
        self.labels = {name: name}
        declared = set(getattr(default_registry().get(name), "options", {}) or {})
        options = {k: v for k, v in settings.backend_options.items()
                   if k in declared or k not in settings.env_only_options}
        self.options = {name: options} if options else {}


class BackendsArgs(ArgGroup):
    """Backends: the runs to compare (aipc diff --model)"""

    def add_parser_args_impl(self, group) -> None:
        group.add_argument("--backends", default="cpu,qnn", metavar="LIST",
                           help="comma-separated runs, 'label=backend' for a second run of one backend "
                                "(default: cpu,qnn)")
        group.add_argument("--reference", metavar="LABEL",
                           help="the reference run (default: the golden outputs when given, else cpu)")
        group.add_argument("--backend-option", action="append", default=[], metavar="LABEL:KEY=VALUE",
                           help="backend option of one run, e.g. qnn:precision=fp32 (repeatable; VALUE parsed as "
                                "JSON when possible)")
        add_compile_budget(group)  # the run options' budget, for the runs whose backend compiles (qnn)

    def parse_impl(self, args) -> None:
        from onnxwrapper.diff import parse_backends
        from onnxwrapper.errors import BackendNotFoundError

        try:
            self.labels = parse_backends(args.backends)
        except (ValueError, BackendNotFoundError) as exc:
            raise UsageError(str(exc)) from exc
        self.reference = args.reference
        self.options = with_compile_budget(parse_backend_options(args.backend_option, self.labels), self.labels,
                                           compile_budget(args))
        self.verbose = 0


class ModelRunArgs(ArgGroup):
    """Model run: warm-up, timing, where the runs go, inputs and outputs to save"""

    def __init__(self, command: str) -> None:
        self.command = command  # names the default folder: ./aipc-<command>-<date-time> (diff.default_directory)
        self.progress = None  # set by the command: tqdm bars, not written to the script

    def add_parser_args_impl(self, group) -> None:
        group.add_argument("--warm-up", type=int, default=0, metavar="N",
                           help="unrecorded runs of the first input before the timed iterations (default 0)")
        group.add_argument("--timeout", type=float, metavar="SECONDS", help="limit per backend run")
        group.add_argument("--dir", metavar="DIR",
                           help=f"run directory (default: ./aipc-{self.command}-<date-time>, printed)")
        group.add_argument("--save-inputs", metavar="FILE.npz", help="save the inputs (aipc's tensor file)")
        group.add_argument("--save-outputs", metavar="FILE.npz",
                           help="save the outputs with their inputs (aipc's tensor file; with several runs one file "
                                "per run: FILE-<label>.npz) — what --load-outputs reads on another machine")
        group.add_argument("-q", "--quiet", action="store_true", help="no progress bars")

    def parse_impl(self, args) -> None:
        if args.warm_up < 0:
            raise UsageError("--warm-up must be >= 0")
        self.warm_up, self.timeout, self.quiet = args.warm_up, args.timeout, args.quiet
        self.dir, self.save_inputs, self.save_outputs = args.dir, args.save_inputs, args.save_outputs

    def add_to_plan(self, plan: Plan) -> None:
        backends = self.tool[BackendArgs] if BackendArgs in self.tool else self.tool[BackendsArgs]
        if self.save_inputs:
            plan.add(Call("diff.save_tensors", (absolute(self.save_inputs), Ref("inputs.iterations")),
                          comment="Save the inputs"))
        directory = absolute(self.dir) if self.dir else Call("diff.default_directory", kwargs={"command": self.command})
        kwargs = {"backends": ",".join(f"{lb}={b}" if lb != b else b for lb, b in backends.labels.items())}
        if backends.options:
            kwargs["backend_options"] = backends.options
        kwargs.update({k: v for k, v in (("warm_up", self.warm_up), ("directory", directory),
                                         ("timeout", self.timeout)) if v})
        plan.add(Call("diff.run_model", (Ref("MODEL"), Ref("inputs")), kwargs, target="runs",
                      comment="Run: one process per backend, the same inputs",
                      cli_only={"progress": self.progress} if self.progress else {}))
        if self.save_outputs:
            labels = list(backends.labels)
            for label in labels:
                path = absolute(self.save_outputs)
                if len(labels) > 1:
                    stem, ext = os.path.splitext(path)
                    path = f"{stem}-{label}{ext or '.npz'}"
                plan.add(Call("runs.save_outputs", (path, label), comment=f"Save {label}'s outputs with their inputs"))


class GoldenArgs(ArgGroup):
    """Golden outputs: outputs saved elsewhere (another machine, a device, the training framework) to compare with"""

    def add_parser_args_impl(self, group) -> None:
        group.add_argument("--load-outputs", "--golden", action="append", default=[], metavar="[LABEL=]PATH",
                           help="golden outputs: aipc's tensor file (--save-outputs; it carries its inputs, which "
                                "are then used), numpy .npz/.npy, JSON (plain or Polygraphy's RunResults) or a "
                                "capture directory; label 'golden' by default (repeatable)")

    def parse_impl(self, args) -> None:
        self.items: dict[str, str] = {}
        for k, item in enumerate(args.load_outputs):
            label, sep, path = item.partition("=")
            if not sep or os.path.exists(item):
                label, path = ("golden" if k == 0 else f"golden{k + 1}"), item
            if not os.path.exists(path):
                raise UsageError(f"--load-outputs {item}: no such file or directory")
            if label in self.items:
                raise UsageError(f"--load-outputs: label '{label}' given twice")
            self.items[label] = os.path.abspath(path)

    def inputs_source(self) -> str | None:
        """The first golden file that records its inputs (they are used when no input option is given)."""
        from onnxwrapper.diff import read_tensors

        for path in self.items.values():
            try:
                if read_tensors(path, role="outputs").inputs:
                    return path
            except (OSError, ValueError):
                continue
        return None

    def golden_arg(self):
        """The ``golden=`` argument of ``diff.compare_model_runs``: ``None`` without golden outputs, the
        path of the one labelled ``golden``, else ``{label: path}``."""
        if not self.items:
            return None
        return self.items["golden"] if list(self.items) == ["golden"] else dict(self.items)


class GenScriptArgs(ArgGroup):
    """Script: write the equivalent Python instead of running"""

    def add_parser_args_impl(self, group) -> None:
        group.add_argument("--gen-script", "--gen", metavar="FILE.py",
                           help="write a standalone Python script that does what this command does through "
                                "onnxwrapper's public API, and exit without running ('-' prints it)")

    def parse_impl(self, args) -> None:
        self.path = args.gen_script


def argv_text(argv: list[str]) -> str:
    """The command line, quoted for a shell, for the generated script's docstring."""
    import shlex

    return " ".join(shlex.quote(a) for a in argv)
