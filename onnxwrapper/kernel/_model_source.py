"""The model a session was asked to load: a path or bytes, read lazily, hashed for caches.

Backends that must read the model themselves (to compile it, hash it, rewrite it) go through
:class:`ModelSource` so that a bad model raises what onnxruntime raises for the same input
(class and message prefix measured on onnxruntime 1.31.1):

====================================  =================  ==================================================
input                                 exception          message prefix
====================================  =================  ==================================================
``path_or_bytes=123``                 ``TypeError``      ``Unable to load from type '<class 'int'>'``
missing file                          ``NoSuchFile``     ``[ONNXRuntimeError] : 3 : NO_SUCHFILE : Load model from P failed:Load model P failed. File doesn't exist``
directory / non-protobuf file         ``InvalidProtobuf`` ``[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from P failed:Protobuf parsing failed.``
corrupt or truncated bytes            ``InvalidProtobuf`` ``[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Failed to load model because protobuf parsing failed.``
empty bytes                           ``InvalidArgument`` ``[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : No graph was found in the protobuf.``
====================================  =================  ==================================================
"""

from __future__ import annotations

import hashlib
import os

from onnxruntime.capi import onnxruntime_pybind11_state as C

__all__ = ["ModelSource"]

_CHUNK = 1 << 20


class ModelSource:
    """A model given as a path or as serialized bytes.

    Use :meth:`from_arg` with the user's ``path_or_bytes``. Nothing is read until asked.

    Attributes:
        path: absolute-or-relative path as given (``str``), or ``None`` for bytes.
    """

    def __init__(self, path: str | None, data: bytes | None) -> None:
        self.path = path
        self._data = data
        self._hashes: dict[tuple, str] = {}

    @classmethod
    def from_arg(cls, path_or_bytes) -> "ModelSource":
        """Wrap ``InferenceSession``'s first argument.

        Raises:
            TypeError: not ``str``, ``os.PathLike`` or ``bytes`` (ORT's message).
        """
        if isinstance(path_or_bytes, (str, os.PathLike)):
            return cls(os.fspath(path_or_bytes), None)
        if isinstance(path_or_bytes, bytes):
            return cls(None, path_or_bytes)
        raise TypeError(f"Unable to load from type '{type(path_or_bytes)}'")

    @property
    def directory(self) -> str | None:
        """Folder of the model file (where external data and precompiled artifacts live), or ``None``."""
        return os.path.dirname(os.path.abspath(self.path)) if self.path is not None else None

    @property
    def stem(self) -> str | None:
        """File name without its last extension (``"det"`` for ``models/det.onnx``), or ``None``."""
        return os.path.splitext(os.path.basename(self.path))[0] if self.path is not None else None

    def _missing(self) -> C.NoSuchFile:
        return C.NoSuchFile(f"[ONNXRuntimeError] : 3 : NO_SUCHFILE : Load model from {self.path} failed:"
                            f"Load model {self.path} failed. File doesn't exist")

    def _unparsable(self) -> C.InvalidProtobuf:
        if self.path is not None:
            return C.InvalidProtobuf(f"[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from {self.path} "
                                     f"failed:Protobuf parsing failed.")
        return C.InvalidProtobuf("[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Failed to load model because "
                                 "protobuf parsing failed.")

    def read_bytes(self) -> bytes:
        """The serialized model (cached after the first read).

        Raises:
            NoSuchFile: the path does not exist. InvalidProtobuf: it is a directory or unreadable.
        """
        if self._data is None:
            if not os.path.exists(self.path):
                raise self._missing()
            if os.path.isdir(self.path):
                raise self._unparsable()
            try:
                with open(self.path, "rb") as f:
                    self._data = f.read()
            except OSError as exc:
                raise self._unparsable() from exc
        return self._data

    def load_proto(self, load_external_data: bool = False):
        """Parse into an ``onnx.ModelProto``.

        Args:
            load_external_data: also load tensors stored in external data files (path models only).

        Raises:
            NoSuchFile, InvalidProtobuf, InvalidArgument: as onnxruntime for the same input.
        """
        import onnx
        from google.protobuf.message import DecodeError

        data = self.read_bytes()
        if not data:
            raise C.InvalidArgument("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : No graph was found in the protobuf.")
        model = onnx.ModelProto()
        try:
            model.ParseFromString(data)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise self._unparsable() from exc
        if not model.HasField("graph"):
            if self.path is None:
                raise C.InvalidArgument("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : No graph was found in the protobuf.")
            raise self._unparsable()
        if load_external_data and self.path is not None:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(model, self.directory)
        return model

    def external_data_files(self) -> list[str]:
        """Paths of the external-data files the model references (existing or not), sorted."""
        return sorted(self._external_data())

    def _external_data(self) -> dict[str, tuple[str, set[str]]]:
        """``{normalized path: (location as written in the model, {tensor names})}``."""
        from onnx.external_data_helper import _get_all_tensors, uses_external_data

        if self.path is None:
            return {}
        files: dict[str, tuple[str, set[str]]] = {}
        for tensor in _get_all_tensors(self.load_proto()):
            if uses_external_data(tensor):
                for entry in tensor.external_data:
                    if entry.key == "location":
                        path = os.path.normpath(os.path.join(self.directory, entry.value))
                        files.setdefault(path, (entry.value, set()))[1].add(tensor.name)
        return files

    def _hash(self, supplied_names: frozenset, supplied_files: frozenset) -> str:
        digest = hashlib.sha256()
        data = self.read_bytes()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
        for path, (location, tensors) in sorted(self._external_data().items()):
            digest.update(os.path.relpath(path, self.directory).encode())
            if not os.path.exists(path):
                if location in supplied_files or os.path.basename(path) in supplied_files or (
                        tensors and tensors <= supplied_names):
                    continue  # supplied from memory through SessionOptions: hashed by the caller
                raise self._missing_external(path)
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(_CHUNK), b""):
                    digest.update(chunk)
        return digest.hexdigest()

    def _missing_external(self, path: str) -> C.Fail:
        return C.Fail(f"[ONNXRuntimeError] : 1 : FAIL : External data file {path} referenced by model "
                      f"{self.path} does not exist. Keep external data files next to the model.")

    def content_hash(self, supplied_names=frozenset(), supplied_files=frozenset()) -> str:
        """Hex sha256 over the model bytes and every external-data file (relative name + bytes).

        Args:
            supplied_names: initializer names whose external data the user supplies in memory
                (``SessionOptions.add_external_initializers``); a missing file holding only these is
                skipped. supplied_files: external-data file names supplied in memory
                (``add_external_initializers_from_files_in_memory``); missing ones are skipped. The
                caller hashes what was supplied.

        Raises:
            NoSuchFile / InvalidProtobuf as :meth:`read_bytes`; ``Fail`` for a missing external-data file.
        """
        key = (frozenset(supplied_names), frozenset(supplied_files))
        if key not in self._hashes:
            self._hashes[key] = self._hash(*key)
        return self._hashes[key]
