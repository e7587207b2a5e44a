"""aipc_loader: run unchanged onnxruntime scripts on onnxwrapper backends.

Public API::

    install(backend="qnn", **backend_options) -> None     # activate the hot patch
    uninstall() -> None                                    # restore onnxruntime exactly
    activated(backend="qnn", **backend_options)            # context manager (nests)
    is_active() -> bool
    run_script(path, args, *, backend="qnn", backend_options=None) -> int
    run_module(name, args, *, backend="qnn", backend_options=None) -> int
    LaunchError                                            # run_* could not start the code
    add_session_listener(listener) -> remove               # called after each redirected session

While active, ``onnxruntime.InferenceSession(...)`` — however the name was reached, before or
after activation — builds an :class:`onnxwrapper.InferenceSession` on the chosen backend, except
for onnxruntime's own internal sessions; nothing else in onnxruntime changes. See
:mod:`aipc_loader._patch` (the patch), :mod:`aipc_loader._script` (Python's script semantics),
:mod:`aipc_loader._bootstrap` (child processes), :mod:`aipc_loader._diff_child` (the per-backend
child of ``aipc diff``) and :mod:`aipc.cli` (the ``aipc`` command). Importing this package patches
nothing and does not import onnxruntime.
"""

from __future__ import annotations

from aipc_loader._patch import activated, add_session_listener, install, is_active, uninstall
from aipc_loader._script import LaunchError, run_module, run_script

__all__ = [
    "LaunchError",
    "activated",
    "add_session_listener",
    "install",
    "is_active",
    "run_module",
    "run_script",
    "uninstall",
]
