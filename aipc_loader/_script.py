"""Run a script or module exactly as ``python script.py args…`` / ``python -m module args…`` would.

What the code sees (measured against CPython 3.11's own launcher, and tested against it):

* script file: ``sys.argv == [path as given, *args]``; ``sys.path[0]`` = the directory of the
  script with symlinks resolved (``os.path.dirname(os.path.realpath(path))``); ``__file__`` and
  the code's filename = the path joined to the working directory (not normalised, as Python
  does); globals ``__name__ == "__main__"``, ``__spec__ = None``, ``__package__ = None``,
  ``__cached__ = None``, ``__loader__`` a ``SourceFileLoader("__main__", __file__)``,
  ``__builtins__`` the builtins module; the module is ``sys.modules["__main__"]`` (so pickling
  and multiprocessing ``spawn`` find it). The source is compiled with ``dont_inherit=True``.
* directory or zip file with a ``__main__.py``: ``sys.path[0]`` = the path joined to the working
  directory; ``__main__`` runs with its spec (name ``"__main__"``); ``sys.argv[0]`` as given.
* ``-m module``: ``sys.path[0]`` = the working directory (set before the module is looked up,
  so modules there are found); ``sys.argv[0]`` is ``"-m"`` during the lookup, then the module's
  file; a package runs its ``__main__`` submodule; globals as ``runpy`` sets them (``__spec__``
  the module's spec, ``__package__`` its parent).
* With ``python -P`` / ``PYTHONSAFEPATH`` nothing is put in ``sys.path[0]`` (as Python);
  ``safe_path=False`` runs the code as plain ``python`` would even in a safe-path interpreter (the
  path is then inserted first: aipc's own children start with ``-P`` so that they import nothing
  from their working directory, and still run the user's script as the user would).
* ``sha256=HEX`` (a script file only): the bytes read are compiled only when they have that digest,
  else :class:`LaunchError` — a script checked earlier and swapped since never runs.

Exit status (as the interpreter computes it): 0 when the code returns; ``SystemExit(None)`` → 0,
``SystemExit(int)`` → that int, any other ``SystemExit`` value is written to ``sys.stderr`` and
gives 1; an uncaught exception is printed with ``sys.excepthook`` (a normal traceback that starts
at the script's frame) and gives 1; ``KeyboardInterrupt`` (Ctrl-C) prints one line, where the
script was (``aipc: interrupted (Ctrl-C) at app.py, line 12``), not a traceback through
onnxwrapper's compile frames, and gives 130 (what a shell shows for Python, which re-kills itself
with SIGINT).

Differences that remain: ``sys.orig_argv``, ``sys.modules`` (aipc's own modules are loaded),
``sys.meta_path`` (wrapt's import-hook finder), ``os.environ`` (``AIPC_ACTIVE`` and
``PYTHONPATH``, see :mod:`aipc_loader._bootstrap`), and ``-m`` tracebacks, which omit the two
``<frozen runpy>`` frames Python shows.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import types
import zipfile
from typing import Any, Iterator, Mapping, Sequence

from aipc_loader import _patch
from aipc_loader._bootstrap import export_to_environment
from aipc_loader._env import ChildConfig

__all__ = ["LaunchError", "run_script", "run_module", "run_path_as_main", "run_module_as_main",
           "aipc_environment", "EXIT_INTERRUPTED"]

#: exit status for an uncaught KeyboardInterrupt (128 + SIGINT, what a shell shows for Python).
EXIT_INTERRUPTED = 130
_OWN_FRAMES = frozenset({__name__})


class LaunchError(Exception):
    """The script or module could not be started (nothing of it ran).

    Attributes:
        exit_status: what Python exits with in the same case (2 for a file it cannot open, 1 for
            a module it cannot find).
    """

    def __init__(self, message: str, exit_status: int) -> None:
        super().__init__(message)
        self.exit_status = exit_status


@dataclasses.dataclass
class _Prepared:
    code: Any
    globals: dict
    argv0: str


# -- public API -----------------------------------------------------------------------------------
def run_script(path, args: Sequence[str] = (), *, backend: str | None = "qnn",
               backend_options: Mapping[str, Any] | None = None, safe_path: bool | None = None,
               sha256: str | None = None) -> int:
    """Run ``path`` as ``python path *args`` would, with the aipc patch active on ``backend``.

    While it runs, ``onnxruntime.InferenceSession`` builds onnxwrapper sessions on ``backend``
    (see :mod:`aipc_loader._patch`) and Python children it starts inherit that
    (:mod:`aipc_loader._bootstrap`). Afterwards ``sys.argv``, ``sys.path``,
    ``sys.modules["__main__"]``, the patch and the environment are as before.

    Args:
        path: script file (``str`` or ``os.PathLike``), or a directory / zip file holding a
            ``__main__.py``.
        args: the script's arguments (``sys.argv[1:]``).
        backend: backend name or alias; ``None`` runs the script without the patch.
        backend_options: options for that backend (``target``, ``precision``, …).
        safe_path: ``None``: as this interpreter (``sys.flags.safe_path``); ``False``: the
            script's directory first on ``sys.path`` as plain ``python`` puts it; ``True``: nothing.
        sha256: run the script file only when its bytes have this hex digest (module docstring).

    Returns:
        The exit status ``python path *args`` would have (module docstring); the script's
        exceptions never propagate (they are printed as Python prints them).

    Raises:
        LaunchError: the script cannot be opened or has no ``__main__``, or (``sha256``) its bytes
            have another digest.
        onnxwrapper.BackendNotFoundError, onnxwrapper.BackendOptionError,
        onnxwrapper.BackendUnavailableError: bad or unavailable backend (checked before the
        script starts).
    """
    config = None if backend is None else ChildConfig(backend, dict(backend_options or {}))
    with aipc_environment(config):
        return run_path_as_main(path, args, safe_path=safe_path, sha256=sha256)


def run_module(name: str, args: Sequence[str] = (), *, backend: str | None = "qnn",
               backend_options: Mapping[str, Any] | None = None, safe_path: bool | None = None) -> int:
    """Run module ``name`` as ``python -m name *args`` would, with the aipc patch active.

    Same contract as :func:`run_script` (``safe_path``: the working directory first on
    ``sys.path`` or not); ``LaunchError`` (status 1) when the module or a package's ``__main__``
    cannot be found.
    """
    config = None if backend is None else ChildConfig(backend, dict(backend_options or {}))
    with aipc_environment(config):
        return run_module_as_main(name, args, safe_path=safe_path)


@contextlib.contextmanager
def aipc_environment(config: ChildConfig | None, *, restore: bool = True) -> Iterator[ChildConfig | None]:
    """Validate ``config``, activate the patch and export it to child processes.

    Args:
        config: the activation; ``None`` does nothing.
        restore: put the previous activation and environment back on exit (the CLI passes
            False: the process ends with the script).

    Yields:
        ``config`` with the canonical backend name.

    Raises:
        As :func:`aipc_loader.install`.
    """
    if config is None:
        yield None
        return

    name = _patch.validate(config.backend, config.backend_options)
    config = dataclasses.replace(config, backend=name)
    previous = _patch.current_activation()
    undo_env = export_to_environment(config)
    _patch._activate(_patch.Activation(name, dict(config.backend_options)))
    try:
        yield config
    finally:
        if restore:
            undo_env()
            if previous is None:
                _patch.uninstall()
            else:
                _patch._activate(previous)


def run_path_as_main(path, args: Sequence[str] = (), *, restore: bool = True, safe_path: bool | None = None,
                     sha256: str | None = None) -> int:
    """Run a script file, directory or zip file as Python does, without touching the patch.

    Args:
        restore: put ``sys.argv``, ``sys.path`` and ``sys.modules["__main__"]`` back afterwards.
        safe_path / sha256: as :func:`run_script`.

    Returns:
        The exit status (module docstring).

    Raises:
        LaunchError: as Python refuses to start (cannot open the file: status 2; no
            ``__main__`` in a directory/zip: status 1); a script whose bytes do not have
            ``sha256`` (status 2).
    """
    fs_path = os.fspath(path)
    joined = fs_path if os.path.isabs(fs_path) else os.path.join(os.getcwd(), fs_path)
    if os.path.isdir(fs_path) or (os.path.isfile(fs_path) and zipfile.is_zipfile(fs_path)):
        if sha256 is not None:
            raise LaunchError(f"{joined!r} is a directory or zip file: only a script file has a content digest", 2)
        return _execute(lambda: _prepare_main_package(fs_path, joined), [fs_path, *args], joined, restore, safe_path)
    return _execute(lambda: _prepare_file(fs_path, joined, sha256), [fs_path, *args],
                    os.path.dirname(os.path.realpath(fs_path)), restore, safe_path)


def run_module_as_main(name: str, args: Sequence[str] = (), *, restore: bool = True,
                       safe_path: bool | None = None) -> int:
    """Run a module as ``python -m name`` does, without touching the patch (see
    :func:`run_path_as_main` for ``restore``, ``safe_path``, return value and errors)."""
    return _execute(lambda: _prepare_module(name), ["-m", *args], os.getcwd(), restore, safe_path)


# -- preparation ----------------------------------------------------------------------------------
def _prepare_file(fs_path: str, joined: str, sha256: str | None = None) -> _Prepared:
    try:
        with open(fs_path, "rb") as handle:
            source = handle.read()
    except OSError as exc:
        raise LaunchError(f"can't open file {joined!r}: [Errno {exc.errno}] {exc.strerror}", 2) from exc
    if sha256 is not None and hashlib.sha256(source).hexdigest() != sha256:
        raise LaunchError(f"{joined!r} is no longer the script whose sha256 was checked ({sha256[:12]}…): it "
                          f"changed since; nothing of it ran", 2)
    g = {"__name__": "__main__", "__doc__": None, "__package__": None,
         "__loader__": importlib.machinery.SourceFileLoader("__main__", joined), "__spec__": None,
         "__builtins__": builtins, "__file__": joined, "__cached__": None}
    if sys.version_info < (3, 14):
        g["__annotations__"] = {}
    return _Prepared(_CompileLater(source, joined), g, fs_path)


def _prepare_main_package(fs_path: str, joined: str) -> _Prepared:
    spec = importlib.machinery.PathFinder.find_spec("__main__", [joined])
    if spec is None or spec.loader is None:
        raise LaunchError(f"can't find '__main__' module in {joined!r}", 1)
    return _from_spec("__main__", spec, fs_path)


def _prepare_module(name: str) -> _Prepared:
    def find(mod_name: str):
        try:
            return importlib.util.find_spec(mod_name)
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            raise LaunchError(f"Error while finding module specification for {mod_name!r} "
                              f"({type(exc).__name__}: {exc})", 1) from exc

    if not name or name.startswith("."):
        raise LaunchError("Relative module names not supported", 1)
    spec = find(name)
    if spec is None:
        raise LaunchError(f"No module named {name}", 1)
    if spec.submodule_search_locations is not None:
        main_name = name + ".__main__"
        spec = find(main_name)
        if spec is None:
            raise LaunchError(f"No module named {main_name}; {name!r} is a package and cannot be "
                              f"directly executed", 1)
        name = main_name
    if spec.loader is None:
        raise LaunchError(f"No module named {name}", 1)
    return _from_spec(name, spec, spec.origin if spec.has_location and spec.origin else "-m")


def _from_spec(name: str, spec, argv0: str) -> _Prepared:
    try:
        code = spec.loader.get_code(name)
    except ImportError as exc:
        raise LaunchError(f"{exc}", 1) from exc
    if code is None:
        raise LaunchError(f"No code object available for {name}", 1)
    g = {"__name__": "__main__", "__doc__": None, "__package__": spec.parent, "__loader__": spec.loader,
         "__spec__": spec, "__builtins__": builtins,
         "__file__": spec.origin if spec.has_location else None, "__cached__": spec.cached}
    if not spec.has_location:
        del g["__file__"]
    if sys.version_info < (3, 14):
        g["__annotations__"] = {}
    return _Prepared(code, g, argv0)


class _CompileLater:
    """Source to compile inside the run (so a SyntaxError is reported as Python reports it)."""

    def __init__(self, source: bytes, filename: str) -> None:
        self.source, self.filename = source, filename

    def compile(self) -> types.CodeType:
        return compile(self.source, self.filename, "exec", dont_inherit=True)


# -- execution ------------------------------------------------------------------------------------
def _execute(prepare, argv: list, path0: str, restore: bool, safe_path: bool | None = None) -> int:
    saved_argv, saved_path = sys.argv, list(sys.path)
    saved_main = sys.modules.get("__main__")
    own_slot = not getattr(sys.flags, "safe_path", False)  # this interpreter put its own path0 first
    try:
        sys.argv = list(argv)
        if not (sys.flags.safe_path if safe_path is None else safe_path):
            if sys.path and own_slot:
                sys.path[0] = path0
            else:
                sys.path.insert(0, path0)
        prepared = prepare()
        sys.argv[0] = prepared.argv0
        module = types.ModuleType("__main__")
        module.__dict__.update(prepared.globals)
        sys.modules["__main__"] = module
        return _run_code(prepared.code, module.__dict__)
    finally:
        if restore:
            sys.argv = saved_argv
            sys.path[:] = saved_path
            if saved_main is not None:
                sys.modules["__main__"] = saved_main


def _run_code(code, run_globals: dict) -> int:
    try:
        if isinstance(code, _CompileLater):
            code = code.compile()
        exec(code, run_globals)
    except SystemExit as exc:
        return _system_exit_status(exc)
    except KeyboardInterrupt as exc:
        _say_interrupted(exc, run_globals.get("__file__"))
        return EXIT_INTERRUPTED
    except BaseException as exc:  # noqa: BLE001 - the interpreter's top level catches everything
        _print_exception(exc)
        return 1
    return 0


def _say_interrupted(exc: KeyboardInterrupt, script: str | None) -> None:
    """Ctrl-C in one line, not Python's traceback through onnxwrapper's frames: where the script was."""
    from aipc_loader._report import say

    line = None
    tb = exc.__traceback__
    while tb is not None:
        if script and tb.tb_frame.f_code.co_filename == script:
            line = tb.tb_lineno
        tb = tb.tb_next
    where = f" at {os.path.basename(script)}, line {line}" if script and line else ""
    say(f"interrupted (Ctrl-C){where}")


def _system_exit_status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code)
    try:
        sys.stderr.write(f"{code}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - as Python, a broken stderr does not change the status
        pass
    return 1


def _print_exception(exc: BaseException) -> None:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__") in _OWN_FRAMES:
        tb = tb.tb_next
    exc.__traceback__ = tb  # the default excepthook prints the exception's own traceback
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass
    try:
        sys.excepthook(type(exc), exc, tb)
    except Exception:  # noqa: BLE001 - a broken excepthook: Python falls back to the default printer
        import traceback

        traceback.print_exception(type(exc), exc, tb, file=sys.__stderr__)
