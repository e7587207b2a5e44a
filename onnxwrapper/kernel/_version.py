"""The onnxwrapper version (ours, not onnxruntime's: see ``onnxwrapper.get_version_string()``)."""

__version__ = "0.1.0"
