"""``aipc doctor`` as a library: the field self-test a user runs on a device and attaches to a bug report.

:func:`run_doctor` reports, as data (:class:`DoctorReport`, JSON with :meth:`DoctorReport.to_dict`):

* the host: OS, the architecture of this process and of the OS (an x64 Python emulated on ARM64
  Windows only reaches the simulator: :func:`onnxwrapper.kernel.host_architecture`), glibc;
* package versions (importlib-metadata) and the QNN SDK version of onnxruntime-qnn;
* the QNN backend's view (:func:`onnxwrapper.backends.qnn.qnn_platform_facts`): the EP's devices,
  which one drives the HTP, NPU or simulator, SoC / HTP architecture / FP16, the skel library;
* the compile cache: its path, whether it is writable, its entries;
* the canaries (:mod:`onnxwrapper.toolkit._doctor_canaries`): each tiny model is compiled for the
  HTP (:func:`onnxwrapper.backends.qnn.compile_model`, into a temporary folder), run from its
  EPContext model on the HTP and on onnxruntime's CPU EP, and judged with ``aipc diff``'s rules
  (:func:`onnxwrapper.diff.compare_arrays` with the precision-aware preset of
  :func:`onnxwrapper.diff.precision_for`); compile and run times are reported, and the SoC the
  context binary's header names. A known-bug canary reports "known HTP kernel bug reproduced /
  not reproduced" and never decides the verdict.

The verdict: the HTP is usable when the QNN backend reaches an NPU (or, on an x86-64 host, the
simulator), every capability canary agrees with the CPU and the compile cache can be used;
:attr:`DoctorReport.npu_usable` when that HTP is a real NPU. Every canary's session is closed before
the temporary folder goes (Windows cannot delete a context binary a session still maps).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import onnxruntime

import onnxwrapper
from onnxwrapper.diff import PRESETS, compare_arrays, precision_for
from onnxwrapper.errors import OnnxwrapperError
from onnxwrapper.kernel import ArtifactCache, default_cache_dir, host_architecture
from onnxwrapper.toolkit._doctor_canaries import CANARIES, Canary

__all__ = ["CanaryResult", "DoctorReport", "PACKAGES", "cache_facts", "run_doctor"]

#: distributions whose versions the report lists
PACKAGES = ("onnxwrapper", "onnxruntime", "onnxruntime-qnn", "onnx", "numpy", "qai-appbuilder", "qai-hub",
            "filelock", "platformdirs")
_RUNS = 3


@dataclass
class CanaryResult:
    """One canary's outcome.

    Attributes:
        name, what, known_bug: from the :class:`~onnxwrapper.toolkit._doctor_canaries.Canary`.
        status: ``"pass"`` / ``"fail"`` (capability canaries), ``"bug reproduced"`` /
            ``"bug not reproduced"`` (known-bug canaries), ``"error"`` (compile or run failed),
            ``"skipped"`` (no HTP).
        compile_seconds / run_seconds: compile wall time, median wall time of one HTP run (s).
        outputs: per output ``{"name", "kind", "snr_db", "cosine", "max_abs"}`` (diff's metrics).
        binary_soc_model: ``soc_model`` in the compiled context binary's header, or ``None``.
        message: the error, or the failed thresholds.
    """

    name: str
    what: str
    known_bug: str
    status: str = "skipped"
    compile_seconds: float | None = None
    run_seconds: float | None = None
    outputs: list = field(default_factory=list)
    binary_soc_model: int | None = None
    message: str = ""

    @property
    def decides(self) -> bool:
        """True when this canary counts for the verdict (a capability canary)."""
        return not self.known_bug

    def line(self) -> str:
        """One report line."""
        label = {"bug reproduced": "known HTP kernel bug reproduced",
                 "bug not reproduced": "known HTP kernel bug not reproduced"}.get(self.status, self.status)
        times = ""
        if self.compile_seconds is not None:
            times = f"  compile {self.compile_seconds:.2f} s"
        if self.run_seconds is not None:
            times += f", run {self.run_seconds * 1000:.1f} ms"
        worst = min((o["snr_db"] for o in self.outputs if o.get("snr_db") is not None), default=None)
        snr = f"  SNR {worst:.1f} dB" if worst is not None else ""
        tail = f"  ({self.message})" if self.message and self.status in ("error", "fail") else ""
        return f"{self.name:<22} {label:<36}{snr}{times}{tail}"


@dataclass
class DoctorReport:
    """Everything :func:`run_doctor` found (module docstring). ``usable``: the verdict; ``mode``:
    ``"npu"``, ``"simulator"`` or ``"none"``; ``seconds``: wall time of the doctor."""

    host: dict
    packages: dict
    qnn: dict
    cache: dict
    canaries: list
    mode: str
    usable: bool
    verdict: str
    seconds: float = 0.0

    @property
    def npu_usable(self) -> bool:
        """True when a real NPU is usable (``usable`` and ``mode == "npu"``): ``aipc doctor`` exits 0."""
        return self.usable and self.mode == "npu"

    def to_dict(self) -> dict:
        """JSON-ready dict of every field (canaries as dicts)."""
        return {"verdict": self.verdict, "usable": self.usable, "npu_usable": self.npu_usable, "mode": self.mode,
                "seconds": round(self.seconds, 3),
                "host": self.host, "packages": self.packages, "qnn": self.qnn, "cache": self.cache,
                "canaries": [asdict(c) for c in self.canaries]}

    def format_text(self) -> str:
        """The human-readable report (ASCII punctuation only)."""
        h, q, c = self.host, self.qnn, self.cache
        lines = [f"host        {h['system']} ({h['platform']}); process {h['process_arch']}, OS {h['os_arch']}"
                 + (f"; {h['note']}" if h.get("note") else ""),
                 f"python      {h['python']}" + (f"; glibc {h['glibc']}" if h.get("glibc") else ""),
                 "packages    " + ", ".join(f"{k} {v}" for k, v in self.packages.items()),
                 f"QNN SDK     {q.get('versions', {}).get('qnn_sdk', 'n/a')}",
                 "EP devices  " + ("; ".join(q.get("ep_devices") or []) or "none"),
                 f"HTP         {self.mode}: {q.get('reason', '')}"]
        soc = q.get("soc")
        if soc:
            fp16 = "yes" if q.get("fp16") else "no (quantize: aipc compile --precision w8a16)"
            lines.append(f"SoC         {soc['text']}; FP16 {fp16}")
        if q.get("skel"):
            lines.append(f"skel        {q['skel'].get('verdict', '')}")
        lines.append(f"cache       {c['path']} ({'writable' if c['writable'] else 'NOT usable: ' + c['problem']}"
                     f", {c['entries']} entries)")
        if self.canaries:
            lines.append("canaries    (HTP vs CPU, aipc diff's rules)")
            lines += ["  " + r.line() for r in self.canaries]
        lines.append(f"verdict     {self.verdict}  [{self.seconds:.1f} s]")
        return "\n".join(lines)


def _versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def _host() -> dict:
    arch = host_architecture()
    libc, libc_version = platform.libc_ver()
    return {"system": arch.system, "platform": platform.platform(), "process_arch": arch.process_arch,
            "os_arch": arch.os_arch, "emulated": arch.emulated, "note": arch.note(), "python": arch.python,
            "glibc": libc_version if libc == "glibc" else None}


def cache_facts(root: str | None = None) -> dict:
    """The compile cache: ``{"path", "exists", "writable", "problem", "entries", "size_bytes"}``; writability
    is tested by creating and removing a file in it (or in the folder it would be created in). A cache
    onnxwrapper refuses (not private: another owner, writable by others) is reported with the
    refusal and its fix as ``problem`` (``writable`` False), never raised."""
    path = default_cache_dir(root)
    probe_dir = path
    while not os.path.isdir(probe_dir) and os.path.dirname(probe_dir) != probe_dir:
        probe_dir = os.path.dirname(probe_dir)
    problem = ""
    try:
        with tempfile.NamedTemporaryFile(dir=probe_dir, prefix=".aipc-doctor-"):
            pass
    except OSError as exc:
        problem = f"{type(exc).__name__}: {exc}"
    entries = []
    if os.path.isdir(path):
        try:
            entries = ArtifactCache(path).entries()
        except (OnnxwrapperError, OSError) as exc:
            problem = problem or " ".join(str(exc).split())
    return {"path": path, "exists": os.path.isdir(path), "writable": not problem, "problem": problem,
            "entries": len(entries), "size_bytes": sum(size for _k, size, _u in entries)}


def _judge(canary: Canary, outputs: list, refs: list, names: Sequence[str], ops: set) -> tuple[bool, list, list]:
    tolerance = PRESETS[precision_for("qnn", {}, ops)]
    rows, failed = [], []
    for name, y, r in zip(names, outputs, refs):
        comparison = compare_arrays(y, r, tolerance)
        metrics = comparison.metrics
        rows.append({"name": name, "kind": comparison.kind, "snr_db": metrics.get("snr_db"),
                     "cosine": metrics.get("cosine_similarity"), "max_abs": metrics.get("max_abs_error")})
        failed += [f"{name}: {text}" for text in comparison.failed]
    return not failed, rows, failed


def _run_canary(canary: Canary, folder: str) -> CanaryResult:
    from onnxwrapper.backends.qnn import compile_model, read_binary_info  # the QNN SDK, only when canaries run
    import onnx

    result = CanaryResult(canary.name, canary.what, canary.known_bug)
    data, feeds = canary.build()
    ops = {n.op_type for n in onnx.load_from_string(data).graph.node}
    ctx = os.path.join(folder, f"{canary.name}_ctx.onnx")
    try:
        compiled = compile_model(data, ctx, {"strict": True})
        result.compile_seconds = float(compiled.seconds)
        if compiled.bin_path:
            try:
                result.binary_soc_model = read_binary_info(compiled.bin_path).soc_model
            except OnnxwrapperError:
                result.binary_soc_model = None
        session = onnxwrapper.InferenceSession(ctx, backend="qnn")
        try:
            names = [o.name for o in session.get_outputs()]
            times = []
            for _ in range(_RUNS):
                start = time.perf_counter()
                outputs = session.run(None, feeds)
                times.append(time.perf_counter() - start)
        finally:
            session.close()  # its context binary is mapped (Windows ARM64) until then: the folder goes after
        result.run_seconds = statistics.median(times)
        refs = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    except (OnnxwrapperError, RuntimeError, ValueError, OSError) as exc:
        result.status, result.message = "error", f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        return result
    agree, result.outputs, failed = _judge(canary, outputs, refs, names, ops)
    if canary.known_bug:
        result.status = "bug not reproduced" if agree else "bug reproduced"
    else:
        result.status = "pass" if agree else "fail"
        result.message = "; ".join(failed)[:300]
    return result


def run_doctor(canaries: Sequence[str] | None = None, *, cache_dir: str | None = None,
               progress: Callable[[str], None] | None = None) -> DoctorReport:
    """Run the field self-test (module docstring).

    Args:
        canaries: names of the canaries to run (default: all, :data:`~onnxwrapper.toolkit._doctor_canaries.CANARIES`);
            ``[]`` runs none (facts only).
        cache_dir: the compile cache to report on (default: the user's, ``default_cache_dir()``);
            the canaries compile into a temporary folder, never into the cache.
        progress: called with each canary's name before it runs.

    Returns:
        :class:`DoctorReport`.

    Raises:
        ValueError: an unknown canary name (the message lists the known ones).
    """
    from onnxwrapper.backends.qnn import qnn_platform_facts  # registers the QNN EP: only when the doctor runs

    start = time.perf_counter()
    known = {c.name: c for c in CANARIES}
    wanted = list(known) if canaries is None else list(canaries)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ValueError(f"unknown canary {', '.join(unknown)}; known: {', '.join(known)}")
    facts = qnn_platform_facts()
    mode = facts.get("htp", "none") if facts.get("available") else "none"
    results = [CanaryResult(known[n].name, known[n].what, known[n].known_bug) for n in wanted]
    if mode != "none":
        # every canary's session is closed before the folder goes; a file another process still
        # holds (an antivirus scan on Windows) is left behind rather than ending the report
        with tempfile.TemporaryDirectory(prefix="aipc-doctor-", ignore_cleanup_errors=True) as folder:
            for i, name in enumerate(wanted):
                if progress is not None:
                    progress(name)
                results[i] = _run_canary(known[name], folder)
    deciding = [r for r in results if r.decides]
    bad = [r.name for r in deciding if r.status != "pass"]
    cache = cache_facts(cache_dir)
    usable = mode != "none" and not bad and cache["writable"]
    what = "Hexagon NPU" if mode == "npu" else "HTP simulator (x86-64: device numerics, not device speed)"
    if mode == "none":
        verdict = f"NPU not usable: {facts.get('reason', 'the QNN backend is not available')}"
    elif bad:
        verdict = f"{what} reachable, but canaries disagree with the CPU: {', '.join(bad)}"
    else:
        soc = (facts.get("soc") or {}).get("name") or ""
        ran = f"{len(deciding)} capability canaries agree with the CPU" if deciding else "no capability canary run"
        verdict = f"{'NPU' if mode == 'npu' else 'simulator'} usable: {what}{' ' + soc if soc else ''}; {ran}"
        if mode == "simulator":
            verdict += "; no NPU on this machine"
    if not cache["writable"]:
        verdict += f"; the compile cache cannot be used: {cache['problem']}"
    return DoctorReport(_host(), dict(_versions(), qnn_sdk=facts.get("versions", {}).get("qnn_sdk", "n/a")), facts,
                        cache, results, mode, usable, verdict, time.perf_counter() - start)
