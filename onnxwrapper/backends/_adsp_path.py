"""``ADSP_LIBRARY_PATH``: where FastRPC looks for the Hexagon skel libraries a runtime sends to the DSP.

The HTP's DSP-side library (``libQnnHtpV<arch>Skel.so``, SNPE's ``libSnpeHtpV<arch>Skel.so``) is
loaded by the FastRPC loader, which searches ``ADSP_LIBRARY_PATH`` plus a few fixed system folders
— not the folder the host-side library (``QnnHtp.dll``, ``libQnnHtp.so``) was loaded from. When
it finds no skel the DSP session fails ("Unable to load Skel Library", QNN error 1002/1008) and, on
Windows ARM64, QNN switches to its user-driver path where newer ops fail validation and land on the
CPU, silently (onnxruntime/onnxruntime-qnn pull request 593, which describes this for the
``win_arm64`` wheel). onnxruntime-qnn sets a default itself on Linux aarch64 only
(``QnnBackendManager::LoadBackend``, when the variable is unset); its Python package does nothing
on Windows. The list separator is ``;`` on every platform (FastRPC does not split on ``:``:
qualcomm/fastrpc report #379, https://github.com/qualcomm/fastrpc/issues/379).

:func:`ensure_adsp_library_path` sets the variable where it applies — an ARM64 process on Windows
or Linux, where a real DSP is driven — and only when the user has not set it. It is called where a
backend prepares a process, never at import: the qnn backend on Windows when it registers its EP
(on Linux aarch64 onnxruntime-qnn's own default is the same folder, and a variable set before it
loads makes it warn "Using existing ADSP_LIBRARY_PATH setting …, which may cause the HTP backend to
fail"), the snpe backend for the environment of its SDK tools.
"""

from __future__ import annotations

import glob
import logging
import os
from typing import MutableMapping, Sequence

from onnxwrapper.kernel import HostArchitecture, host_architecture

__all__ = ["ADSP_LIBRARY_PATH", "add_sdk_skels", "adsp_applies", "ensure_adsp_library_path", "native_host"]

ADSP_LIBRARY_PATH = "ADSP_LIBRARY_PATH"
_log = logging.getLogger("onnxwrapper")


def native_host() -> HostArchitecture:
    """This host as a *native* process sees it (process architecture = the OS's): for SDK tools
    started as their own processes, which run natively whatever this interpreter is."""
    host = host_architecture()
    return host._replace(process_arch=host.os_arch)


def adsp_applies(host: HostArchitecture) -> bool:
    """True for an ARM64 process on Windows or Linux: a Hexagon DSP is driven there through FastRPC."""
    return host.process_arch == "arm64" and host.system in ("Windows", "Linux")


def ensure_adsp_library_path(folders: Sequence[str], host: HostArchitecture,
                             environ: MutableMapping[str, str] | None = None) -> str | None:
    """Set ``ADSP_LIBRARY_PATH`` to ``folders`` (``;``-joined, existing ones only) when it applies
    (:func:`adsp_applies`) and the user has not set it.

    Args:
        folders: folders holding the skel libraries, most specific first.
        host: :func:`onnxwrapper.kernel.host_architecture`.
        environ: the environment to change (``os.environ``, or a child process's environment dict).

    Returns:
        The value now set by this call, or ``None`` when nothing was changed (not applicable, set by
        the user already, or no folder exists).
    """
    env = os.environ if environ is None else environ
    if not adsp_applies(host) or env.get(ADSP_LIBRARY_PATH):
        return None
    existing = [os.path.abspath(f) for f in folders if f and os.path.isdir(f)]
    if not existing:
        return None
    value = ";".join(dict.fromkeys(existing))
    env[ADSP_LIBRARY_PATH] = value
    _log.info("onnxwrapper: %s set to %s (the Hexagon skel libraries; set it yourself to override)",
              ADSP_LIBRARY_PATH, value)
    return value


def add_sdk_skels(environ: MutableMapping[str, str], sdk_root: str) -> str | None:
    """:func:`ensure_adsp_library_path` in ``environ`` (an SDK tool's environment) with the QAIRT SDK's
    DSP skel folders ``<sdk_root>/lib/hexagon-v*/unsigned``, newest architecture first; the tool runs
    natively, so the OS's architecture decides (:func:`native_host`)."""
    folders = sorted(glob.glob(os.path.join(glob.escape(sdk_root), "lib", "hexagon-v*", "unsigned")), reverse=True)
    return ensure_adsp_library_path(folders, native_host(), environ)
