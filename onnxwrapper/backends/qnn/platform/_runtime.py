"""Process-level plumbing of the QNN backend: plugin registration, device facts, the process-global
QNN configuration guard, the native stdout line, and configured copies of ``SessionOptions``.

Facts this module is built on (onnxruntime 1.31.1 + onnxruntime-qnn 2.7.0, x86-64 Linux, measured):

* The QNN EP is a plugin: ``onnxruntime.register_execution_provider_library(name, path)`` once per
  process (a second call raises ``Fail: EP library is already registered under
  QNNExecutionProvider``), then ``SessionOptions.add_provider_for_devices(devices, options)``.
  ``providers=["QNNExecutionProvider"]`` is silently ignored by ORT.
* On x86-64 the QNN ``OrtEpDevice`` reports ``OrtHardwareDeviceType.CPU``: it is the HTP
  simulator. A real Snapdragon NPU reports ``NPU``, but the EP may list a CPU and a GPU device too,
  in any order, and on Linux aarch64 no NPU device at all: :func:`htp_device` picks the one device
  ORT is handed (:mod:`onnxwrapper.backends.qnn.platform._devices` has the facts per platform).
* Before the EP is registered, ``ADSP_LIBRARY_PATH`` is pointed at onnxruntime-qnn's folder (its
  HTP skels) on ARM64 Windows when the user has not set it (:mod:`onnxwrapper.backends._adsp_path`);
  on Linux aarch64 onnxruntime-qnn sets that default itself when the HTP backend loads
  (``QnnBackendManager::LoadBackend``) and warns "Using existing ADSP_LIBRARY_PATH setting …, which
  may cause the HTP backend to fail" when it finds the variable set, so it is left alone there.
  On a Linux aarch64 board whose FastRPC node is the downstream ``/dev/adsprpc-smd`` only,
  ``ORT_QNN_ENABLE_CPU_BACKEND=1`` is set when unset, or the EP would list no device
  (:func:`~onnxwrapper.backends.qnn.platform._devices.cpu_backend_needed`).
* The first QNN session of a process prints ``" # LIBNATIVE: No alternate configuration present in
  libnative_tls.conf …"`` on **stdout** (native code, file descriptor 1). :func:`native_stdout_guard`
  redirects fd 1 into a temporary file around the first QNN session creation only, drops that
  line and writes everything else back to fd 1, so a script's stdout is the same as on CPU.
* The simulator's ``soc_model`` is sticky: a session *without* ``soc_model`` inherits the last
  explicit one of the process (measured). Every QNN session onnxwrapper creates therefore passes
  an explicit ``soc_model`` (:mod:`onnxwrapper.backends.qnn.settings._settings`); compiles run in a worker
  process whose configuration is exactly the requested one (:mod:`onnxwrapper.backends.qnn.workers._workers`),
  and loading a compiled context does not depend on the process configuration (measured: its
  numerics are fixed at compile time). Nothing is pinned per process.
* ``SessionOptions`` cannot be pickled: :func:`session_options_state` reads what can be read back
  into a plain dict (what a compile worker needs), :func:`session_options_from_state` rebuilds it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import threading
from typing import Any, Iterator, Mapping

from onnxwrapper.backends._adsp_path import ensure_adsp_library_path
from onnxwrapper.backends.qnn.platform._devices import (CPU_BACKEND_ENV, HtpDevice, choose_htp_device,
                                                        cpu_backend_needed, dsp_device_nodes)
from onnxwrapper.errors import BackendUnavailableError
from onnxwrapper.kernel import RecordingSessionOptions, host_architecture, recorded_calls, replay_calls

__all__ = ["EP_NAME", "INSTALL_HINT", "qnn_versions", "is_x86_host", "ensure_registered", "htp_device",
           "htp_library_path", "native_stdout_guard", "copy_session_options", "session_options_state",
           "session_options_from_state", "user_qnn_ep_options"]

_log = logging.getLogger("onnxwrapper.qnn")

EP_NAME = "QNNExecutionProvider"
INSTALL_HINT = "pip install 'onnxwrapper[qnn]'"
_LIBNATIVE_MARK = b"# LIBNATIVE:"

_lock = threading.RLock()
_registered = False
_stdout_done = False


def qnn_versions() -> dict[str, str]:
    """``{"onnxruntime": …, "onnxruntime_qnn": …, "qnn_sdk": …}``; raises ImportError without onnxruntime-qnn."""
    import onnxruntime
    import onnxruntime_qnn

    info = getattr(onnxruntime_qnn, "build_and_package_info", None)
    return {"onnxruntime": onnxruntime.__version__, "onnxruntime_qnn": getattr(onnxruntime_qnn, "__version__", "?"),
            "qnn_sdk": str(getattr(info, "qnn_version", "unknown"))}


def is_x86_host() -> bool:
    """True when this *process* is x86-64 / x86 (:func:`onnxwrapper.kernel.host_architecture`), where
    onnxruntime-qnn's HTP is the simulator — also for an x64 Python emulated on ARM64 Windows."""
    return host_architecture().process_arch in ("x86_64", "x86")


def htp_library_path() -> str | None:
    """onnxruntime-qnn's HTP backend library (``libQnnHtp.so`` / ``QnnHtp.dll``), or ``None``."""
    try:
        import onnxruntime_qnn  # optional SDK
    except ImportError:
        return None
    folder = os.path.dirname(onnxruntime_qnn.get_library_path())
    name = "QnnHtp.dll" if sys.platform == "win32" else "libQnnHtp.so"
    return os.path.join(folder, name) if os.path.isfile(os.path.join(folder, name)) else None


def htp_device() -> HtpDevice:
    """Register the QNN plugin EP (:func:`ensure_registered`'s registration) and decide which of its
    ``OrtEpDevice`` objects drives the HTP (:func:`~onnxwrapper.backends.qnn.platform._devices.choose_htp_device`).

    Raises:
        BackendUnavailableError: onnxruntime-qnn is missing or its library cannot be loaded.
    """
    import onnxruntime

    _register()
    listed = [d for d in onnxruntime.get_ep_devices() if d.ep_name == EP_NAME]
    return choose_htp_device(listed, host_architecture(), dsp_device_nodes(), os.environ.get(CPU_BACKEND_ENV))


def ensure_registered() -> list:
    """Register the QNN plugin EP once per process (thread-safe) and return the ``OrtEpDevice`` list to
    hand ``add_provider_for_devices``: the one device that drives the HTP (:func:`htp_device`) — the
    NPU device wherever the EP lists one, never a GPU device.

    Tolerates a registration made by the user (or another library) before.

    Raises:
        BackendUnavailableError: onnxruntime-qnn is missing, its library cannot be loaded, or no
            listed device reaches an HTP (the reason says which and what to do).
    """
    choice = htp_device()
    if not choice.devices:
        raise BackendUnavailableError(f"The QNN execution provider reaches no HTP here: {choice.reason}.",
                                      backend="qnn", reason=choice.reason, install_hint="")
    return list(choice.devices)


def _register() -> None:
    """Register the QNN plugin EP once per process (thread-safe), after preparing the environment it
    reads (module docstring: ``ADSP_LIBRARY_PATH`` on Windows ARM64, ``ORT_QNN_ENABLE_CPU_BACKEND`` on
    a downstream-kernel Linux board)."""
    global _registered
    import onnxruntime

    with _lock:
        if not _registered:
            try:
                import onnxruntime_qnn
            except ImportError as exc:
                raise BackendUnavailableError(
                    f"Backend 'qnn' needs onnxruntime-qnn, which cannot be imported ({exc}). To fix: {INSTALL_HINT}.",
                    backend="qnn", reason=f"onnxruntime-qnn is not installed ({exc})",
                    install_hint=INSTALL_HINT) from exc
            _prepare_environment(os.path.dirname(onnxruntime_qnn.get_library_path()))
            if not any(d.ep_name == EP_NAME for d in onnxruntime.get_ep_devices()):
                try:
                    onnxruntime.register_execution_provider_library(EP_NAME, onnxruntime_qnn.get_library_path())
                except Exception as exc:  # ORT raises its own Fail class
                    if "already registered" not in str(exc):
                        raise BackendUnavailableError(
                            f"The QNN execution provider library could not be registered: {exc}",
                            backend="qnn", reason=str(exc), install_hint=INSTALL_HINT) from exc
            _registered = True


def _prepare_environment(folder: str) -> None:
    """What the QNN EP reads from the environment when it is registered (module docstring)."""
    host = host_architecture()
    if host.system == "Windows":
        ensure_adsp_library_path([folder], host)
    if cpu_backend_needed(host, dsp_device_nodes(), os.environ):
        os.environ[CPU_BACKEND_ENV] = "1"
        _log.info("onnxwrapper qnn: %s=1 set: this board's FastRPC node is /dev/adsprpc-smd, for which "
                  "onnxruntime-qnn lists no NPU device; its CPU device drives the HTP with backend_type=htp",
                  CPU_BACKEND_ENV)


def _fflush_all() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # Windows or no libc symbol: nothing buffered to flush
        pass


@contextlib.contextmanager
def native_stdout_guard() -> Iterator[None]:
    """Around the first QNN session creation of the process: keep native stdout noise out of fd 1.

    Everything written to file descriptor 1 during the block is captured in a temporary file;
    afterwards lines containing ``# LIBNATIVE:`` are dropped (and logged at DEBUG) and the rest is
    written back to fd 1 unchanged. Python's ``sys.stdout`` is flushed first so ordering holds.
    Later calls are no-ops (the line is printed once per process). If fd 1 is not usable the
    block runs unguarded.
    """
    global _stdout_done
    if _stdout_done:
        yield
        return
    with _lock:
        if _stdout_done:
            yield
            return
        try:
            sys.stdout.flush()
        except (AttributeError, ValueError, OSError):
            pass
        _fflush_all()
        try:
            saved = os.dup(1)
        except OSError:
            _stdout_done = True
            yield
            return
        capture = tempfile.TemporaryFile()
        try:
            os.dup2(capture.fileno(), 1)
            try:
                yield
            finally:
                try:
                    sys.stdout.flush()
                except (AttributeError, ValueError, OSError):
                    pass
                _fflush_all()
                os.dup2(saved, 1)
                _stdout_done = True
                _reemit(capture)
        finally:
            os.close(saved)
            capture.close()


def _reemit(capture) -> None:
    """Write the captured bytes back to fd 1, minus the ``# LIBNATIVE:`` line(s)."""
    capture.seek(0)
    kept = []
    for line in capture.read().splitlines(keepends=True):
        if _LIBNATIVE_MARK in line:
            _log.debug("onnxwrapper qnn: native stdout line kept off stdout: %s", line.decode(errors="replace").strip())
        else:
            kept.append(line)
    if kept:
        os.write(1, b"".join(kept))


#: SessionOptions attributes copied to the configured copy (all read/write pybind properties)
_ATTRIBUTES = ("graph_optimization_level", "intra_op_num_threads", "inter_op_num_threads", "execution_mode",
               "execution_order", "enable_profiling", "profile_file_prefix", "log_severity_level",
               "log_verbosity_level", "logid", "enable_mem_pattern", "enable_mem_reuse", "enable_cpu_mem_arena",
               "use_deterministic_compute", "use_per_session_threads")
#: documented ORT session config keys copied when set (ORT has no API to list the entries)
_CONFIG_KEYS = ("session.disable_prepacking", "session.use_env_allocators", "session.set_denormal_as_zero",
                "session.disable_quant_qdq", "session.disable_double_qdq_remover", "session.enable_quant_qdq_cleanup",
                "session.disable_aot_function_inlining", "session.inter_op.allow_spinning",
                "session.intra_op.allow_spinning", "session.intra_op_thread_affinities", "session.dynamic_block_base",
                "session.force_spinning_stop", "session.strict_shape_type_inference",
                "session.allow_released_opsets_only", "session.use_device_allocator_for_initializers",
                "session.qdqisint8allowed", "session.x64quantprecision", "session.disable_specified_optimizers",
                "optimization.enable_gelu_approximation", "optimization.disable_specified_optimizers",
                "session.model_external_initializers_file_folder_path", "ep.share_ep_contexts",
                "session.enable_cast_chain_elimination", "session.debug_layout_transformation")
#: QNN EP option keys looked up as ``ep.qnnexecutionprovider.<key>`` in the user's SessionOptions
_QNN_KEYS = ("backend_type", "soc_model", "htp_arch", "enable_htp_fp16_precision", "htp_performance_mode",
             "qnn_context_priority", "device_id", "vtcm_mb", "htp_graph_finalization_optimization_mode",
             "profiling_level", "profiling_file_path", "rpc_control_latency", "enable_htp_spill_fill_buffer",
             "offload_graph_io_quantization", "enable_htp_shared_memory_allocator", "backend_path")


def _config_entry(so, key: str) -> str | None:
    try:
        return so.get_session_config_entry(key)
    except RuntimeError:  # "SessionOptions does not have configuration with key: …"
        return None


def session_options_state(user) -> dict[str, Any]:
    """What can be read back from ``user`` (an ``onnxruntime.SessionOptions`` or ``None``), as plain data.

    Returns:
        ``{"attributes": {name: value}, "configs": {key: value}, "calls": [(method, args)]}`` — the
        attributes in ``_ATTRIBUTES``, the documented config entries in ``_CONFIG_KEYS`` that are set
        (enums as ints) and the recorded calls (:func:`onnxwrapper.kernel.recorded_calls`) with their
        ``OrtValue`` arguments as numpy arrays and buffers as bytes. Picklable, so a compile worker
        can rebuild the options (:func:`session_options_from_state`).
    """
    attributes: dict[str, Any] = {}
    configs: dict[str, str] = {}
    if user is not None:
        for name in _ATTRIBUTES:
            try:
                value = getattr(user, name)
            except (AttributeError, TypeError):
                continue
            attributes[name] = int(value) if name in _ENUM_ATTRIBUTES else value
        for key in _CONFIG_KEYS:
            value = _config_entry(user, key)
            if value is not None:
                configs[key] = value
    calls = [(method, _plain_args(method, args)) for method, args in recorded_calls(user)]
    return {"attributes": attributes, "configs": configs, "calls": calls}


_ENUM_ATTRIBUTES = {"graph_optimization_level": "GraphOptimizationLevel", "execution_mode": "ExecutionMode",
                    "execution_order": "ExecutionOrder"}


def _plain_args(method: str, args: tuple) -> tuple:
    """The picklable form of a recorded call's arguments (OrtValues → numpy arrays, buffers → bytes)."""
    if method == "add_initializer":
        return args[0], args[1].numpy()
    if method == "add_external_initializers":
        return list(args[0]), [v.numpy() for v in args[1]]
    if method == "add_external_initializers_from_files_in_memory":
        return list(args[0]), [bytes(memoryview(b))[:int(n)] for b, n in zip(args[1], args[2])], list(args[2])
    return tuple(args)


def _native_args(method: str, args: tuple) -> tuple:
    """The inverse of :func:`_plain_args` (new OrtValues over the arrays)."""
    import onnxruntime

    if method == "add_initializer":
        return args[0], onnxruntime.OrtValue.ortvalue_from_numpy(args[1])
    if method == "add_external_initializers":
        return args[0], [onnxruntime.OrtValue.ortvalue_from_numpy(v) for v in args[1]]
    return tuple(args)


def session_options_from_state(state: Mapping[str, Any] | None):
    """A new ``SessionOptions`` (:class:`onnxwrapper.kernel.RecordingSessionOptions`, so that copies
    replay the calls) from :func:`session_options_state`'s dict (``None``: defaults).

    Without a chosen log severity (``-1``) the options use 3 (errors only), keeping the QNN EP's two
    warning lines per session off stderr.
    """
    import onnxruntime

    so = RecordingSessionOptions()
    for name, value in (state or {}).get("attributes", {}).items():
        if name in _ENUM_ATTRIBUTES:
            value = getattr(onnxruntime, _ENUM_ATTRIBUTES[name])(value)
        try:
            setattr(so, name, value)
        except (AttributeError, TypeError):
            continue
    for key, value in (state or {}).get("configs", {}).items():
        so.add_session_config_entry(key, value)
    for method, args in (state or {}).get("calls", ()):
        getattr(so, method)(*_native_args(method, args))
    if so.log_severity_level == -1:
        so.log_severity_level = 3
    return so


def copy_session_options(user, *, skip_recorded=()):
    """A new ``onnxruntime.SessionOptions`` configured like ``user`` (never mutated).

    Copied: the attributes in ``_ATTRIBUTES``, the documented config entries in ``_CONFIG_KEYS``,
    and the calls ORT cannot read back but onnxwrapper recorded
    (:func:`onnxwrapper.kernel.replay_calls`: ``add_initializer``, ``add_external_initializers``
    and its in-memory variant, free-dimension overrides, custom-op libraries; recorded on
    ``onnxwrapper.SessionOptions`` objects, and on every ``onnxruntime.SessionOptions`` while the
    ``aipc`` hot patch is active). Not copied: other config entries, provider-selection policies,
    execution providers (QNN options set with ``add_provider_for_devices`` are read separately by
    :func:`user_qnn_ep_options`), ``optimized_model_filepath`` (the caller decides where it
    applies). If the user did not choose a log severity (``log_severity_level == -1``) the copy
    uses 3 (errors only), keeping the QNN EP's two warning lines per session off stderr.

    Args:
        user: ``onnxruntime.SessionOptions`` or ``None``.
        skip_recorded: recorded methods not to replay (e.g. the external initializers on the
            session of an EPContext model, which holds their data already).

    Returns:
        ``(SessionOptions, {config key: value})`` — the copy and the config entries copied (part
        of the compile-cache key).
    """
    import onnxruntime

    so = onnxruntime.SessionOptions()
    entries: dict[str, str] = {}
    if user is not None:
        for name in _ATTRIBUTES:
            try:
                setattr(so, name, getattr(user, name))
            except (AttributeError, TypeError):
                continue
        for key in _CONFIG_KEYS:
            value = _config_entry(user, key)
            if value is not None:
                so.add_session_config_entry(key, value)
                entries[key] = value
        replay_calls(user, so, skip=skip_recorded)
    if so.log_severity_level == -1:
        so.log_severity_level = 3
    return so, entries


def user_qnn_ep_options(user) -> dict[str, str]:
    """QNN EP options the user set with ``add_provider_for_devices`` on their own SessionOptions
    (stored by ORT as config entries ``ep.qnnexecutionprovider.<key>``), for known keys."""
    if user is None or not user.has_providers():
        return {}
    found = {}
    for key in _QNN_KEYS:
        value = _config_entry(user, f"ep.qnnexecutionprovider.{key}")
        if value is not None:
            found[key] = value
    return found
