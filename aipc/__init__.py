"""aipc: the command line of onnxwrapper (``python -m aipc …`` and the ``aipc`` console script).

``aipc [run] script.py``, ``aipc diff``, ``aipc inspect``, ``aipc compile``, ``aipc capture``:
see ``aipc --help`` and :mod:`aipc.cli`. Each subcommand ends in public calls of
:mod:`aipc_loader`, :mod:`onnxwrapper`, :mod:`onnxwrapper.diff` or :mod:`onnxwrapper.toolkit`
that a user could write; the library never imports this package. Importing it does nothing.
"""

__all__: list[str] = []
