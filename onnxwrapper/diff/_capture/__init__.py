"""The files of a diff, written and read back: captures, tensor files and the diff folder's manifest.

The first stage of :mod:`onnxwrapper.diff` (capture → runs → judge → localize → report): a
:class:`CaptureWriter` records every run call of a process into an open format
(:func:`start_capture`), :func:`read_capture` reads it back; :func:`save_tensors` /
:func:`read_tensors` are the portable tensor file; :func:`write_manifest` / :func:`read_manifest`
the diff folder's ``diff.json`` (and :func:`local_record`: whether this user wrote it on this
machine; :func:`received_options`: which recorded backend options may be used). Every reader treats its file as untrusted (docs/security.md): a
malformed file is a :class:`~onnxwrapper.errors.MalformedFileError` naming the file and the entry
(:func:`malformed`). This stage imports no other stage of the diff.
"""

from __future__ import annotations

from onnxwrapper.diff._capture._fed_inputs import diverging_inputs, fed_other_inputs
from onnxwrapper.diff._capture._files import atomic_write, parse_size, unused_stem
from onnxwrapper.diff._capture._local_record import local_record
from onnxwrapper.diff._capture._manifest import (MANIFEST, MANIFEST_FORMAT, read_manifest, read_saved_report, relative_run,
                                                 script_sha256, write_manifest)
from onnxwrapper.diff._capture._received_options import received_options
from onnxwrapper.diff._capture._reader import Call, Capture, CaptureFormatError, ModelInfo, SessionInfo, TensorSpec, read_capture
from onnxwrapper.diff._capture._tensor_files import TensorSet, read_tensors, save_tensors
from onnxwrapper.diff._capture._untrusted import malformed
from onnxwrapper.diff._capture._values import model_key, sha256_file, tool_versions
from onnxwrapper.diff._capture._writer import (DEFAULT_MAX_BYTES, FORMAT, FORMAT_VERSION, CaptureHandle, CaptureLimitWarning,
                                               CaptureWriter, start_capture)

__all__ = [
    "Call", "Capture", "CaptureFormatError", "CaptureHandle", "CaptureLimitWarning", "CaptureWriter", "DEFAULT_MAX_BYTES",
    "FORMAT", "FORMAT_VERSION", "MANIFEST", "MANIFEST_FORMAT", "ModelInfo", "SessionInfo", "TensorSet", "TensorSpec",
    "atomic_write", "diverging_inputs", "fed_other_inputs", "local_record", "malformed", "model_key", "parse_size",
    "read_capture", "read_manifest", "read_saved_report", "read_tensors", "received_options", "relative_run",
    "save_tensors", "script_sha256", "sha256_file", "start_capture", "tool_versions", "unused_stem", "write_manifest",
]
