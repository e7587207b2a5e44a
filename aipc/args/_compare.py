"""Argument groups of comparisons, shared by ``aipc diff script.py`` and ``aipc diff --model`` /
``aipc run MODEL.onnx --load-outputs``: tolerances, localization, reports (:mod:`aipc.args._groups`).

The comparison depends on the run groups (:mod:`aipc.args._model`: which runs, which golden
outputs), never the other way round."""

from __future__ import annotations

from aipc._exit_codes import UsageError
from aipc.args._groups import ArgGroup, absolute
from aipc.args._model import BackendArgs, BackendsArgs, GoldenArgs
from aipc.args._plan import Call, Plan, Ref

__all__ = ["ToleranceArgs", "LocalizeArgs", "ReportArgs", "CompareArgs"]


class ToleranceArgs(ArgGroup):
    """Tolerances: how far an output may be from the reference's (default: SNR bar by precision, docs/diff.md)"""

    def add_parser_args_impl(self, tol) -> None:
        tol.add_argument("--preset", choices=("auto", "fp32", "fp16", "quantized"), default="auto",
                         help="tolerance defaults (default: auto, from each backend's precision)")
        tol.add_argument("--atol", type=float, help="absolute tolerance")
        tol.add_argument("--rtol", type=float, help="relative tolerance (relative to the reference)")
        tol.add_argument("--error-stat", choices=("elementwise", "max", "mean", "median", "quantile", "none"),
                         help="how atol/rtol are checked")
        tol.add_argument("--quantile", type=float, help="quantile for --error-stat quantile (default 0.99)")
        tol.add_argument("--tol", action="append", default=[], metavar="NAME=ATOL:RTOL[:STAT]",
                         help="per-output override; NAME is a glob on the output name or 'model/output' (repeatable)")
        tol.add_argument("--min-cosine", type=float, metavar="C", help="require cosine similarity ≥ C")
        tol.add_argument("--min-snr", type=float, metavar="DB", help="require SNR ≥ DB dB")
        tol.add_argument("--min-psnr", type=float, metavar="DB", help="require PSNR ≥ DB dB")
        tol.add_argument("--min-top1", type=float, metavar="F", help="require top-1 agreement ≥ F (class scores)")
        tol.add_argument("--allow-nonfinite", action="store_true", help="do not fail on NaN/Inf mismatches")

    def parse_impl(self, args) -> None:
        from onnxwrapper.diff import PRESETS, Tolerances, parse_tol_override

        changes = {}
        for name, value in (("atol", args.atol), ("rtol", args.rtol), ("check", args.error_stat),
                            ("quantile", args.quantile), ("min_cosine", args.min_cosine), ("min_snr_db", args.min_snr),
                            ("min_psnr_db", args.min_psnr), ("min_top1", args.min_top1)):
            if value is not None:
                changes[name] = value
        if args.allow_nonfinite:
            changes["allow_nonfinite"] = True
        try:
            overrides = [parse_tol_override(t) for t in args.tol]
            tols = Tolerances(default=None if args.preset == "auto" else PRESETS[args.preset], overrides=overrides,
                              changes=changes)
            tols.base_for("fp32").with_()  # validates the changes (check mode, ranges)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        self.preset, self.changes, self.overrides, self.tolerances = args.preset, changes, overrides, tols

    def plan_value(self):
        """The ``diff.Tolerances(...)`` call of the plan, or ``None`` for the defaults."""
        kwargs = {}
        if self.preset != "auto":
            kwargs["default"] = Call("diff.PRESETS.get", (self.preset,))
        if self.overrides:
            kwargs["overrides"] = [tuple(o) for o in self.overrides]
        if self.changes:
            kwargs["changes"] = dict(self.changes)
        return Call("diff.Tolerances", (), kwargs) if kwargs else None


class LocalizeArgs(ArgGroup):
    """Localization: name the cause inside a failing model"""

    def add_parser_args_impl(self, loc) -> None:
        loc.add_argument("--localize", action="store_true",
                         help="for each failing model, name the cause: the node that breaks, the FP16 overflow, "
                              "or error accumulating through the graph")
        loc.add_argument("--localize-max-tensors", type=int, default=256, metavar="N",
                         help="tensors exposed per round; larger graphs are bisected (default: 256)")

    def parse_impl(self, args) -> None:
        if args.localize_max_tensors < 1:
            raise UsageError("--localize-max-tensors must be >= 1")
        self.localize, self.max_tensors = args.localize, args.localize_max_tensors


class ReportArgs(ArgGroup):
    """Reports: where the JSON and HTML reports go"""

    def __init__(self, default_reports: bool) -> None:
        self.default_reports = default_reports

    def add_parser_args_impl(self, rep) -> None:
        where = "DIR/report.json" if self.default_reports else "not written"
        rep.add_argument("--json", metavar="PATH", help=f"JSON report (default: {where})")
        rep.add_argument("--html", metavar="PATH", help=f"HTML report (default: {where.replace('json', 'html')})")
        rep.add_argument("--no-html", action="store_true", help="do not write the HTML report")

    def parse_impl(self, args) -> None:
        self.json, self.html, self.no_html = absolute(args.json), absolute(args.html), args.no_html


class CompareArgs(ArgGroup):
    """Comparison: judge the runs and golden outputs (needs Tolerances, Localization, Reports, Golden outputs)"""

    def add_parser_args(self, parser) -> None:
        """No options of its own: it combines its peers into the comparison step."""

    def parse_impl(self, args) -> None:
        self.progress = None  # set by the command

    def needed(self) -> bool:
        """Whether there is anything to compare (a second run or golden outputs)."""
        backends = self.tool[BackendArgs] if BackendArgs in self.tool else self.tool[BackendsArgs]
        return len(backends.labels) > 1 or bool(self.tool[GoldenArgs].items)

    def add_to_plan(self, plan: Plan) -> None:
        """The comparison, its table and reports, or (with nothing to compare) the runs' table."""
        if not self.needed():
            plan.add(Call("print", (Call("runs.table"),), comment="What ran: outputs, partition, timing"))
            plan.exit_with("runs.exit_status")
            return
        kwargs: dict = {}
        reference = self.tool[BackendsArgs].reference if BackendsArgs in self.tool else None
        if reference:
            kwargs["reference"] = reference
        golden = self.tool[GoldenArgs].golden_arg()
        if golden:
            kwargs["golden"] = golden
        tolerances = self.tool[ToleranceArgs].plan_value()
        if tolerances is not None:
            kwargs["tolerances"] = tolerances
        loc = self.tool[LocalizeArgs]
        if loc.localize:
            kwargs["localize"] = True
        plan.add(Call("diff.compare_model_runs", (Ref("runs"),), kwargs, target="result",
                      comment="Compare: the verdict, tolerances and exit status of aipc diff",
                      cli_only={"progress": self.progress} if self.progress else {}))
        plan.add(Call("print", (Call("result.table"),)))
        rep = self.tool[ReportArgs]
        json_path = rep.json or (Call("os.path.join", (Ref("runs.directory"), "report.json"))
                                 if rep.default_reports else None)
        html_path = rep.html or (Call("os.path.join", (Ref("runs.directory"), "report.html"))
                                 if rep.default_reports else None)
        if json_path:
            plan.add(Call("result.write_json", (json_path,), comment="Reports"))
        if html_path and not rep.no_html:
            plan.add(Call("result.write_html", (html_path,)))
        plan.exit_with("result.exit_status")
