"""What the QNN backend finds on this host, as plain data: the field report of ``aipc doctor``.

:func:`qnn_platform_facts` registers the QNN plugin EP (once per process) and reports its versions,
every ``OrtEpDevice`` it lists, which one drives the HTP and why
(:mod:`onnxwrapper.backends.qnn.platform._devices`), NPU or simulator, the SoC
(:mod:`onnxwrapper.backends.qnn.platform._soc`: the device's on a real NPU; on the simulator what its QNN platform info reports and the target
sessions emulate by default), FP16 support, and whether the HTP skel library for that
architecture is where FastRPC will look (``ADSP_LIBRARY_PATH``; :mod:`onnxwrapper.backends._adsp_path`).
Whether the skel really *loads* is proven only by running a graph on the NPU (the doctor's canaries).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from onnxwrapper.backends._adsp_path import ADSP_LIBRARY_PATH, adsp_applies
from onnxwrapper.backends.qnn.platform._runtime import htp_device, htp_library_path, native_stdout_guard, qnn_versions
from onnxwrapper.backends.qnn.platform._soc import detected_soc, qnn_platform_soc, target_for_soc
from onnxwrapper.backends.qnn.platform._targets import DEFAULT_SIMULATOR_TARGET, TARGETS
from onnxwrapper.errors import BackendUnavailableError
from onnxwrapper.kernel import host_architecture

__all__ = ["qnn_platform_facts", "skel_facts"]


def skel_facts(htp_arch: int | None, folder: str | None, environ=None, ort_default: bool = False) -> dict[str, Any]:
    """Where the HTP skel for ``htp_arch`` is and whether FastRPC's search path covers it.

    Args:
        htp_arch: the device's HTP architecture (``None``: unknown). folder: onnxruntime-qnn's
            library folder. environ: the environment to read (defaults to ``os.environ``).
        ort_default: onnxruntime-qnn itself sets ``ADSP_LIBRARY_PATH`` to ``folder`` when it is unset
            (Linux aarch64: ``QnnBackendManager::LoadBackend``).

    Returns:
        ``{"skel": file name or None, "skel_present": bool, "adsp_library_path": str or None,
        "on_search_path": bool, "verdict": one line}``.
    """
    env = os.environ if environ is None else environ
    name = None if htp_arch is None else f"libQnnHtpV{htp_arch}Skel.so"
    present = bool(name and folder and os.path.isfile(os.path.join(folder, name)))
    value = env.get(ADSP_LIBRARY_PATH)
    searched = [os.path.normcase(os.path.abspath(p)) for p in (value or "").split(";") if p]
    on_path = bool(folder) and (os.path.normcase(os.path.abspath(folder)) in searched or (ort_default and not value))
    if name is None:
        verdict = "unknown HTP architecture: cannot name the skel"
    elif not present:
        verdict = f"{name} is not in onnxruntime-qnn's folder: this wheel does not support HTP v{htp_arch}"
    elif not on_path:
        verdict = (f"{name} is present but not on {ADSP_LIBRARY_PATH} ({value or 'unset'}): FastRPC may not find it "
                   f"(set {ADSP_LIBRARY_PATH} to {folder})")
    elif not value:
        verdict = f"{name} present; onnxruntime-qnn sets {ADSP_LIBRARY_PATH} to its folder when the HTP backend loads"
    else:
        verdict = f"{name} present and on {ADSP_LIBRARY_PATH}"
    return {"skel": name, "skel_present": present, "adsp_library_path": value, "on_search_path": on_path,
            "verdict": verdict}


def qnn_platform_facts() -> dict[str, Any]:
    """The QNN backend's view of this host (module docstring), JSON-ready.

    Returns:
        ``{"available": bool, "versions": {...}, "ep_devices": [str], "htp": "npu"|"simulator"|"none",
        "reason": str, "soc": {...} or None, "fp16": bool or None, "skel": {...} or None,
        "libraries": {...}}``; ``available`` False (with ``reason``) when onnxruntime-qnn is
        missing or reaches no HTP.
    """
    try:
        versions = qnn_versions()
    except ImportError as exc:
        return {"available": False, "reason": f"onnxruntime-qnn is not installed ({exc})", "versions": {},
                "ep_devices": [], "htp": "none", "soc": None, "fp16": None, "skel": None, "libraries": {}}
    import onnxruntime_qnn  # optional SDK, present (qnn_versions imported it)

    library = htp_library_path()
    folder = os.path.dirname(onnxruntime_qnn.get_library_path())
    facts: dict[str, Any] = {"versions": versions, "libraries": {"ep": onnxruntime_qnn.get_library_path(),
                                                                 "htp": library}}
    try:
        choice = htp_device()
    except BackendUnavailableError as exc:
        return dict(facts, available=False, reason=exc.reason or str(exc), ep_devices=[], htp="none", soc=None,
                    fp16=None, skel=None)
    facts.update(available=bool(choice.devices), ep_devices=list(choice.listed), htp=choice.kind,
                 reason=choice.reason)
    if choice.real_npu:
        with native_stdout_guard():  # loading the HTP library prints QNN's LIBNATIVE line once
            soc = detected_soc(library)
        arch = soc.htp_arch if soc else None
        facts["soc"] = None if soc is None else {"soc_model": soc.soc_model, "htp_arch": arch, "vtcm_mb": soc.vtcm_mb,
                                                 "name": soc.name, "source": soc.source, "text": soc.describe()}
        facts["fp16"] = None if soc is None else soc.fp16
        host = host_architecture()
        facts["skel"] = (skel_facts(arch, folder, ort_default=host.system == "Linux") if adsp_applies(host) else
                         {"verdict": f"not checked on {sys.platform}"})
        return facts
    target = TARGETS[DEFAULT_SIMULATOR_TARGET]
    reported = None
    if library:
        with native_stdout_guard():
            reported = qnn_platform_soc(library)
    known = target_for_soc(reported.soc_model) if reported else None
    facts["soc"] = {"soc_model": target.soc_model, "htp_arch": target.htp_arch, "vtcm_mb": None, "name": target.chip,
                    "source": f"the simulator's default target ({target.title}; any target can be chosen)",
                    "text": f"simulator emulating {target.title} (soc_model {target.soc_model}, HTP v{target.htp_arch})",
                    "qnn_platform_info": None if reported is None else {
                        "soc_model": reported.soc_model, "htp_arch": reported.htp_arch, "vtcm_mb": reported.vtcm_mb,
                        "name": known.chip if known else ""}}
    facts["fp16"] = target.fp16
    facts["skel"] = {"verdict": "not used: the simulator runs on this CPU, no DSP"}
    return facts
