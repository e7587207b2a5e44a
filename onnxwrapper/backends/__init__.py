"""Execution backends of onnxwrapper, installed as ``onnxwrapper.backends``.

One module per backend, named after its registry name (``cpu.py`` → backend ``cpu``); the
protocol lives in :mod:`onnxwrapper.backends.base`. Backends are discovered through the
entry-point group ``onnxwrapper.backends``; nothing is imported here.
"""
__all__: list[str] = []
