"""aipc's child-process bootstrap; Python's ``site`` imports it only in processes of an aipc run.

It is on ``PYTHONPATH`` only there (see :mod:`aipc_loader._bootstrap`). In order: remove this
directory from ``sys.path``, run the ``sitecustomize`` that would have run without aipc (if
any; an error in it is re-raised afterwards, so ``site`` reports it as usual), then activate the
patch if ``AIPC_ACTIVE`` is set. A failure to activate never stops the interpreter; it is
reported on stderr when aipc runs with ``-v``.
"""


def _aipc_bootstrap() -> None:
    import importlib
    import json
    import os
    import sys

    here = os.path.normcase(os.path.realpath(os.path.dirname(os.path.abspath(__file__))))

    def is_here(path):
        try:
            return os.path.normcase(os.path.realpath(path or os.curdir)) == here
        except (OSError, ValueError):
            return False

    sys.path[:] = [p for p in sys.path if not is_here(p)]

    # chain to the sitecustomize this interpreter would have imported without us
    me = sys.modules.pop("sitecustomize", None)
    chained_error = None
    try:
        importlib.import_module("sitecustomize")
    except ImportError as exc:
        if exc.name != "sitecustomize":
            chained_error = exc
    except Exception as exc:
        chained_error = exc
    if "sitecustomize" not in sys.modules and me is not None:
        sys.modules["sitecustomize"] = me

    text = os.environ.get("AIPC_ACTIVE")
    if text:
        try:
            from aipc_loader._bootstrap import activate_from_environment  # only where AIPC_ACTIVE asks

            activate_from_environment()
        except Exception as exc:  # never break an interpreter's start-up
            try:
                verbose = int(json.loads(text).get("verbose", 0))
            except Exception:
                verbose = 1
            if verbose:
                sys.stderr.write(f"aipc[{os.getpid()}]: not active in this process ({sys.executable}): "
                                 f"{type(exc).__name__}: {exc}\n")
    if chained_error is not None:
        raise chained_error


_aipc_bootstrap()
del _aipc_bootstrap
