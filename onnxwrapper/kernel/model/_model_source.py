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

Hashes (:meth:`ModelSource.content_hash`, :meth:`ModelSource.bytes_digest`) are computed from the
files' bytes the first time a process asks for a file; later requests in the same process reuse
them while the file's ``(size, mtime_ns, ctime_ns, inode, device)`` is unchanged. A file whose
timestamps are within :data:`RACY_SECONDS` of the moment it was hashed is hashed again every time
(a rewrite in the same timestamp tick could keep them), so an overwritten file — even one of the
same size — gets a new hash.

A backend may also give a process a digest it checked otherwise (:meth:`ModelSource.remember_digest`:
a digest hint whose file state and CRC-32 match, :mod:`onnxwrapper.kernel.model._digest_hints`); it is
then reused the same way.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time

from onnxruntime.capi import onnxruntime_pybind11_state as C

from onnxwrapper.kernel.cache import RACY_SECONDS, hash_file, open_regular

__all__ = ["ModelSource", "RACY_SECONDS", "file_state"]

#: per process: absolute path → (file state, sha256 object after the length and bytes of the model)
_BYTES_MEMO: dict[str, tuple[tuple, object]] = {}
#: per process: (absolute path, supplied names, supplied files) → (states of the model and its
#: external files, content hash, external references)
_CONTENT_MEMO: dict[tuple, tuple] = {}
_memo_lock = threading.Lock()
_MEMO_MAX = 256
#: per process: absolute path → (file state, hex bytes digest) given by ModelSource.remember_digest
_HEX_MEMO: dict[str, tuple[tuple, str]] = {}


def file_state(path: str, since_ns: int) -> tuple | None:
    """``(size, mtime_ns, ctime_ns, inode, device)`` of ``path``, or ``None`` when it cannot key a
    memo: unreadable, or changed within :data:`RACY_SECONDS` before ``since_ns`` (``time_ns()``).
    Every process sees the same state for the same unchanged file."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if max(st.st_mtime_ns, st.st_ctime_ns) > since_ns - int(RACY_SECONDS * 1e9):
        return None
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev


def _remember(memo: dict, key, value) -> None:
    with _memo_lock:
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        memo[key] = value


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
        self._digest = None  # sha256 object after the length and the bytes of the model
        self._external: dict[str, tuple[str, set[str]]] | None = None

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
            NoSuchFile: the path does not exist. InvalidProtobuf: it is a directory, a FIFO, a device
                or unreadable.
        """
        if self._data is None:
            if not os.path.exists(self.path):
                raise self._missing()
            if os.path.isdir(self.path):
                raise self._unparsable()
            try:  # a FIFO or a device is no model: an error, never a wait for a writer
                with open_regular(self.path) as f:
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
        if self._external is None:
            self._external = self._external_of(model)
        if load_external_data and self.path is not None:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(model, self.directory)
        return model

    def external_data_files(self) -> list[str]:
        """Paths of the external-data files the model references (existing or not), sorted."""
        return sorted(self._external_data())

    def _external_data(self) -> dict[str, tuple[str, set[str]]]:
        """``{normalized path: (location as written in the model, {tensor names})}`` (the model is
        parsed once for it; :meth:`load_proto` and :meth:`set_external_data` fill it too)."""
        if self._external is None:
            self._external = self._external_of(self.load_proto()) if self.path is not None else {}
        return self._external

    def _external_of(self, model) -> dict[str, tuple[str, set[str]]]:
        from onnx.external_data_helper import _get_all_tensors, uses_external_data

        if self.path is None:
            return {}
        files: dict[str, tuple[str, set[str]]] = {}
        for tensor in _get_all_tensors(model):
            if uses_external_data(tensor):
                for entry in tensor.external_data:
                    if entry.key == "location":
                        files.setdefault(self._external_path(entry.value), (entry.value, set()))[1].add(tensor.name)
        return files

    def _external_path(self, location: str) -> str:
        return os.path.normpath(os.path.join(self.directory, location))

    def external_references(self) -> list[tuple[str, list[str]]]:
        """``[(location as written in the model, sorted tensor names)]`` of its external data, by location."""
        return sorted((location, sorted(tensors)) for location, tensors in self._external_data().values())

    def set_external_data(self, references) -> None:
        """Give the model's external-data references without parsing it: what
        :meth:`external_references` returned for this very content (e.g. kept in a backend's
        content-addressed record of the model). Ignored for bytes models."""
        if self.path is None:
            return
        files: dict[str, tuple[str, set[str]]] = {}
        for location, tensors in references:
            files.setdefault(self._external_path(location), (location, set()))[1].update(tensors)
        self._external = files

    def _bytes_state(self):
        """The sha256 object after the model's length (8 bytes, little endian) and bytes; for a path,
        reused within the process while the file is unchanged (module docstring)."""
        if self._digest is not None:
            return self._digest
        start = time.time_ns()
        path = os.path.abspath(self.path) if self.path is not None else None
        before = file_state(path, start) if path is not None else None
        known = _BYTES_MEMO.get(path) if before is not None else None
        if known is not None and known[0] == before:
            self._digest = known[1]
            return self._digest
        digest = self._hash_file(path) if self._data is None and path is not None else None
        if digest is None:
            data = self.read_bytes()
            digest = hashlib.sha256()
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
        if before is not None and file_state(path, start) == before:
            _remember(_BYTES_MEMO, path, (before, digest))
        self._digest = digest
        return digest

    @staticmethod
    def _hash_file(path: str):
        """The sha256 object of :meth:`_bytes_state` streamed from the file (a cache hit never needs
        the bytes themselves), or ``None`` when it cannot be read or changed size meanwhile
        (:meth:`read_bytes` then raises ORT's error, or reads it once for both)."""
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                digest = hashlib.sha256(size.to_bytes(8, "little"))
                return digest if hash_file(digest, f) == size else None
        except OSError:
            return None

    def known_digest(self) -> str | None:
        """:meth:`bytes_digest` if this process already has it for the file as it is now (nothing is
        read), else ``None``."""
        if self._digest is not None:
            return self._digest.hexdigest()
        if self.path is None:
            return None
        path = os.path.abspath(self.path)
        state = file_state(path, time.time_ns())
        known, given = _BYTES_MEMO.get(path), _HEX_MEMO.get(path)
        if known is not None and known[0] == state:
            return known[1].hexdigest()
        return given[1] if given is not None and state is not None and given[0] == state else None

    def remember_digest(self, state: tuple, digest: str) -> None:
        """Make ``digest`` this process's :meth:`bytes_digest` of the file while it keeps ``state``
        (:func:`file_state`), for a digest the caller checked another way (a digest hint whose
        state and CRC-32 match the file). Ignored for bytes models."""
        if self.path is not None:
            _remember(_HEX_MEMO, os.path.abspath(self.path), (state, digest))

    def bytes_digest(self) -> str:
        """Hex sha256 of the model's length (8 bytes, little endian) and serialized bytes: the
        identity of the model file's content alone (:meth:`content_hash` adds external data).

        Raises:
            NoSuchFile / InvalidProtobuf as :meth:`read_bytes`.
        """
        return self.known_digest() or self._bytes_state().hexdigest()

    def _hash(self, supplied_names: frozenset, supplied_files: frozenset) -> str:
        known = self.known_digest()
        state = self._bytes_state() if known is None else None  # streamed before the model is parsed
        external = sorted(self._external_data().items())
        if not external:
            return known or state.hexdigest()
        digest = (state or self._bytes_state()).copy()
        for path, (location, tensors) in external:
            digest.update(os.path.relpath(path, self.directory).encode())
            if not os.path.exists(path):
                if location in supplied_files or os.path.basename(path) in supplied_files or (
                        tensors and tensors <= supplied_names):
                    continue  # supplied from memory through SessionOptions: hashed by the caller
                raise self._missing_external(path)
            with open(path, "rb") as f:
                hash_file(digest, f)
        return digest.hexdigest()

    def _missing_external(self, path: str) -> C.Fail:
        return C.Fail(f"[ONNXRuntimeError] : 1 : FAIL : External data file {path} referenced by model "
                      f"{self.path} does not exist. Keep external data files next to the model.")

    def content_hash(self, supplied_names=frozenset(), supplied_files=frozenset()) -> str:
        """Hex sha256 over the model bytes and every external-data file (relative name + bytes).

        Reused within the process while the files are unchanged (module docstring).

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
            self._hashes[key] = self._memo_hash(*key)
        return self._hashes[key]

    def _memo_hash(self, supplied_names: frozenset, supplied_files: frozenset) -> str:
        if self.path is None:
            return self._hash(supplied_names, supplied_files)
        start = time.time_ns()
        memo_key = (os.path.abspath(self.path), supplied_names, supplied_files)
        known = _CONTENT_MEMO.get(memo_key)
        if known is not None and all(file_state(path, start) == state for path, state in known[0]):
            if self._external is None:  # the references are part of what was hashed
                self._external = known[2]
            return known[1]
        # states taken after hashing are safe: a file changed since ``start`` is racy (no state, no memo)
        value = self._hash(supplied_names, supplied_files)
        external = self._external_data()
        states = tuple((path, file_state(path, start)) for path in (memo_key[0], *sorted(external)))
        if all(state is not None for _path, state in states):
            _remember(_CONTENT_MEMO, memo_key, (states, value, external))
        return value
