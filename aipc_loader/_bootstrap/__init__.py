"""How the processes an aipc run starts inherit the patch: a ``sitecustomize`` on ``PYTHONPATH``.

Mechanism
---------
The aipc command (and :func:`aipc_loader.run_script` / :func:`~aipc_loader.run_module`) puts two
things in ``os.environ`` before the script runs, so every process the script starts inherits them:

* ``AIPC_ACTIVE`` — the activation (backend, options, verbosity) as JSON
  (:func:`aipc_loader._env.encode_child_config`);
* ``PYTHONPATH`` — this directory first. It holds a ``sitecustomize.py``, which Python's ``site``
  module imports at start-up of every interpreter that sees it (``subprocess.run([sys.executable,
  …])``, multiprocessing ``spawn`` and ``forkserver`` children). It removes this directory from
  ``sys.path`` again (the child's script sees the ``sys.path`` plain Python gives it), imports the
  ``sitecustomize`` that would have run without us (a distribution's or a virtual environment's),
  and then calls :func:`activate_from_environment`, which registers the same post-import hook as
  the parent (cheap: onnxruntime is imported only if and when the child imports it).

``fork`` children need nothing: they inherit the patched class from the parent's memory.

Why not a ``.pth`` file in site-packages: setuptools cannot install one from ``pyproject.toml``
(neither for wheels nor for editable installs) without a custom build step, and it would run in
every Python process of the environment. With this directory, only processes of an aipc tree can
ever load the bootstrap, and even there nothing is patched unless ``AIPC_ACTIVE`` is set: a
process started with a cleaned environment, ``python -E`` or ``python -I`` (which ignore
``PYTHONPATH``), or ``python -S`` (no ``site``) is not patched. A child interpreter that cannot
import aipc_loader (another Python installation) runs unpatched; with ``-v`` it says so on stderr.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, MutableMapping

from aipc_loader import _patch
from aipc_loader._env import ACTIVE_VARIABLE, ChildConfig, decode_child_config, encode_child_config
from aipc_loader._report import SessionReporter
from aipc_loader._verbosity import configure

__all__ = ["BOOTSTRAP_DIR", "export_to_environment", "activate_from_environment"]

#: the directory that holds the child-process ``sitecustomize.py``.
BOOTSTRAP_DIR = os.path.dirname(os.path.abspath(__file__))


def export_to_environment(config: ChildConfig,
                          environ: MutableMapping[str, str] | None = None) -> Callable[[], None]:
    """Make processes started from now on (with ``environ``) activate ``config``.

    Sets ``AIPC_ACTIVE`` and prepends :data:`BOOTSTRAP_DIR` to ``PYTHONPATH`` (once).

    Args:
        config: what children activate.
        environ: the environment to edit; defaults to ``os.environ``.

    Returns:
        A function that restores both variables to their previous values.

    Raises:
        TypeError: an option value is not JSON-serialisable.
    """
    env = os.environ if environ is None else environ
    saved = {name: env.get(name) for name in (ACTIVE_VARIABLE, "PYTHONPATH")}
    env[ACTIVE_VARIABLE] = encode_child_config(config)
    entries = [p for p in (env.get("PYTHONPATH") or "").split(os.pathsep) if p]
    if not entries or not _same_dir(entries[0], BOOTSTRAP_DIR):
        env["PYTHONPATH"] = os.pathsep.join([BOOTSTRAP_DIR, *entries])

    def restore() -> None:
        for name, value in saved.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value

    return restore


def activate_from_environment(environ=None) -> bool:
    """Activate the patch if ``AIPC_ACTIVE`` asks for it (called by the bootstrap ``sitecustomize``).

    Does not validate the backend (the parent did) and does not import onnxruntime.

    Returns:
        True when the patch is now active.

    Raises:
        aipc_loader._env.EnvError: ``AIPC_ACTIVE`` is malformed.
    """
    env = os.environ if environ is None else environ
    text = env.get(ACTIVE_VARIABLE)
    if not text:
        return False
    config = decode_child_config(text)

    _patch._activate(_patch.Activation(config.backend, dict(config.backend_options)))
    configure(config.verbose, prefix=f"aipc[{os.getpid()}]: ")
    SessionReporter(verbose=config.verbose, report_partition=config.report_partition,
                    prefix=f"aipc[{os.getpid()}]: ").start()
    return True


def remove_from_sys_path(path_list: list | None = None) -> None:
    """Drop :data:`BOOTSTRAP_DIR` from ``sys.path`` (every occurrence)."""
    paths = sys.path if path_list is None else path_list
    paths[:] = [p for p in paths if not _same_dir(p, BOOTSTRAP_DIR)]


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))
    except (OSError, ValueError):
        return False
