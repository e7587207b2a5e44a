"""Raw QNN context binaries: what they hold, read through libQnnSystem.

A QNN context binary (``.bin``: ``qnn-context-binary-generator`` output, Qualcomm AI Hub
downloads, ORT's ``*_ctx_qnn.bin``) is opaque; its metadata — graphs, their input/output tensors
with names, dims, data types and quantization encodings — is read with the QNN System library
(``QnnSystemInterface_getProviders`` → ``systemContextCreate`` / ``systemContextGetBinaryInfo`` /
``systemContextFree``), loaded with ``ctypes`` from onnxruntime-qnn's package folder (or
``$ONNXWRAPPER_QNN_SYSTEM_LIB``). Struct layouts follow QNN SDK 2.x's public headers
``QnnTypes.h`` / ``System/QnnSystemContext.h`` / ``System/QnnSystemInterface.h`` (binary info
v1–v3, graph info v1–v3, tensor v1–v2) for 64-bit hosts.

* :func:`read_binary_info` — :class:`BinaryInfo` of a ``.bin`` (used by ``aipc inspect``, by the
  ``qai`` backend to list graph names, and to check IO before loading).

Its EPContext wrapper is :mod:`onnxwrapper.backends.qnn.binary._wrap`; the raw-binary resolver is in
``onnxwrapper/backends/qnn/artifacts/_artifacts.py``; the ``qnn`` backend opens a ``.bin`` given as the model path
(``onnxwrapper/backends/qnn/_backend.py``: options ``graph`` and ``onnx``), and ``aipc inspect model.bin``
prints :meth:`BinaryInfo.to_dict`.

Limits: the reader needs a libQnnSystem matching the binary's QNN version (newer binaries may be
rejected by an older library: :class:`~onnxwrapper.errors.ArtifactError`). Quantized IO is
described (scale/offset) but the EPContext wrapper only declares non-quantized types (float,
integers, bool); a quantized graph interface raises ArtifactError there.
"""

from __future__ import annotations

import ctypes as ct
import os
import sys
from dataclasses import dataclass
from functools import lru_cache

from onnxwrapper.errors import ArtifactError

__all__ = ["BinaryInfo", "GraphInfo", "TensorInfo", "read_binary_info", "system_library"]

ENV_SYSTEM_LIB = "ONNXWRAPPER_QNN_SYSTEM_LIB"

# -- QnnTypes.h ---------------------------------------------------------------------------------
#: Qnn_DataType_t → qai_appbuilder-style type name (fixed-point types are quantized)
DATA_TYPES = {0x0008: "int8", 0x0016: "int16", 0x0032: "int32", 0x0064: "int64", 0x0108: "uint8",
              0x0116: "uint16", 0x0132: "uint32", 0x0164: "uint64", 0x0216: "float16", 0x0232: "float32",
              0x0264: "float64", 0x0304: "sfp4", 0x0308: "sfp8", 0x0316: "sfp16", 0x0332: "sfp32",
              0x0404: "ufp4", 0x0408: "ufp8", 0x0416: "ufp16", 0x0432: "ufp32", 0x0508: "bool_"}
_SCALE_OFFSET, _BW_SCALE_OFFSET = 0, 2
_DEFINED = 1


class _ScaleOffset(ct.Structure):
    _fields_ = [("scale", ct.c_float), ("offset", ct.c_int32)]


class _BwScaleOffset(ct.Structure):
    _fields_ = [("bitwidth", ct.c_uint32), ("scale", ct.c_float), ("offset", ct.c_int32)]


class _BwAxisScaleOffset(ct.Structure):
    _fields_ = [("bitwidth", ct.c_uint32), ("axis", ct.c_int32), ("numElements", ct.c_uint32),
                ("scales", ct.c_void_p), ("offsets", ct.c_void_p)]


class _QuantUnion(ct.Union):
    # Qnn_BwAxisScaleOffset_t is the largest member; the axis/block/vector encodings are ≤ it
    _fields_ = [("scaleOffset", _ScaleOffset), ("bwScaleOffset", _BwScaleOffset),
                ("bwAxisScaleOffset", _BwAxisScaleOffset)]


class _QuantizeParams(ct.Structure):
    _fields_ = [("encodingDefinition", ct.c_uint32), ("quantizationEncoding", ct.c_uint32), ("u", _QuantUnion)]


class _MemUnion(ct.Union):
    _fields_ = [("data", ct.c_void_p), ("clientBuf", ct.c_void_p * 2)]


class _SparseParams(ct.Structure):
    _fields_ = [("type", ct.c_uint32), ("numSpecifiedElements", ct.c_uint32), ("numSparseDimensions", ct.c_uint32)]


class _TensorV1(ct.Structure):
    _fields_ = [("id", ct.c_uint32), ("name", ct.c_char_p), ("type", ct.c_uint32), ("dataFormat", ct.c_uint32),
                ("dataType", ct.c_uint32), ("quantizeParams", _QuantizeParams), ("rank", ct.c_uint32),
                ("dimensions", ct.POINTER(ct.c_uint32)), ("memType", ct.c_uint32), ("mem", _MemUnion)]


class _TensorV2(ct.Structure):
    _fields_ = _TensorV1._fields_ + [("isDynamicDimensions", ct.POINTER(ct.c_uint8)),
                                     ("sparseParams", _SparseParams), ("isProduced", ct.c_uint8)]


class _Tensor(ct.Structure):
    _fields_ = [("version", ct.c_uint32), ("u", type("_TensorUnion", (ct.Union,), {
        "_fields_": [("v1", _TensorV1), ("v2", _TensorV2)]}))]


# -- System/QnnSystemContext.h ------------------------------------------------------------------
_GRAPH_V1 = [("graphName", ct.c_char_p), ("numGraphInputs", ct.c_uint32), ("graphInputs", ct.POINTER(_Tensor)),
             ("numGraphOutputs", ct.c_uint32), ("graphOutputs", ct.POINTER(_Tensor))]
_GRAPH_V2 = _GRAPH_V1 + [("numUpdateableTensors", ct.c_uint32), ("updateableTensors", ct.POINTER(_Tensor))]
_GRAPH_V3 = _GRAPH_V2 + [("graphBlobInfoSize", ct.c_uint32), ("graphBlobInfo", ct.c_void_p),
                         ("startOpIndex", ct.c_uint32), ("endOpIndex", ct.c_uint32)]


class _GraphInfo(ct.Structure):
    _fields_ = [("version", ct.c_uint32), ("u", type("_GraphUnion", (ct.Union,), {"_fields_": [
        ("v1", type("_GraphV1", (ct.Structure,), {"_fields_": _GRAPH_V1})),
        ("v2", type("_GraphV2", (ct.Structure,), {"_fields_": _GRAPH_V2})),
        ("v3", type("_GraphV3", (ct.Structure,), {"_fields_": _GRAPH_V3}))]}))]


class _Version(ct.Structure):
    _fields_ = [("major", ct.c_uint32), ("minor", ct.c_uint32), ("patch", ct.c_uint32)]


_BIN_HEAD = [("backendId", ct.c_uint32), ("buildId", ct.c_char_p), ("coreApiVersion", _Version),
             ("backendApiVersion", _Version), ("socVersion", ct.c_char_p)]
_BIN_V1 = _BIN_HEAD + [("hwInfoBlobVersion", _Version), ("contextBlobVersion", _Version),
                       ("hwInfoBlobSize", ct.c_uint32), ("hwInfoBlob", ct.c_void_p), ("contextBlobSize", ct.c_uint64),
                       ("numContextTensors", ct.c_uint32), ("contextTensors", ct.POINTER(_Tensor)),
                       ("numGraphs", ct.c_uint32), ("graphs", ct.POINTER(_GraphInfo))]
_BIN_V2 = _BIN_V1 + [("platformInfo", ct.c_void_p)]
_BIN_V3 = _BIN_HEAD + [("contextBlobVersion", _Version), ("contextBlobSize", ct.c_uint64),
                       ("numContextTensors", ct.c_uint32), ("contextTensors", ct.POINTER(_Tensor)),
                       ("numGraphs", ct.c_uint32), ("graphs", ct.POINTER(_GraphInfo)), ("platformInfo", ct.c_void_p),
                       ("contextMetadataSize", ct.c_uint32), ("contextMetadata", ct.c_void_p),
                       ("socModel", ct.c_uint32)]


class _BinaryInfo(ct.Structure):
    _fields_ = [("version", ct.c_uint32), ("u", type("_BinaryUnion", (ct.Union,), {"_fields_": [
        ("v1", type("_BinV1", (ct.Structure,), {"_fields_": _BIN_V1})),
        ("v2", type("_BinV2", (ct.Structure,), {"_fields_": _BIN_V2})),
        ("v3", type("_BinV3", (ct.Structure,), {"_fields_": _BIN_V3}))]}))]


# -- System/QnnSystemInterface.h ----------------------------------------------------------------
_CreateFn = ct.CFUNCTYPE(ct.c_uint64, ct.POINTER(ct.c_void_p))
_GetBinaryInfoFn = ct.CFUNCTYPE(ct.c_uint64, ct.c_void_p, ct.c_void_p, ct.c_uint64,
                                ct.POINTER(ct.POINTER(_BinaryInfo)), ct.POINTER(ct.c_uint64))
_FreeFn = ct.CFUNCTYPE(ct.c_uint64, ct.c_void_p)


class _SystemInterface(ct.Structure):
    _fields_ = [("backendId", ct.c_uint32), ("providerName", ct.c_char_p), ("systemApiVersion", _Version),
                ("systemContextCreate", _CreateFn), ("systemContextGetBinaryInfo", _GetBinaryInfoFn),
                ("systemContextGetMetaData", ct.c_void_p), ("systemContextFree", _FreeFn)]


@dataclass(frozen=True)
class TensorInfo:
    """One graph input/output: QNN ``name``, ``shape`` (ints), ``dtype`` (``"float32"``, ``"ufp8"``, …),
    ``scale``/``offset`` for per-tensor quantized types (real = scale * (q + offset)), else ``None``."""

    name: str
    shape: tuple
    dtype: str
    scale: float | None = None
    offset: int | None = None

    def to_dict(self) -> dict:
        """JSON-ready dict: name, shape (list), dtype, scale, offset."""
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype, "scale": self.scale,
                "offset": self.offset}


@dataclass(frozen=True)
class GraphInfo:
    """One graph: ``name``, ``inputs`` and ``outputs`` (:class:`TensorInfo`, QNN order)."""

    name: str
    inputs: tuple
    outputs: tuple

    def to_dict(self) -> dict:
        """JSON-ready dict: name, inputs, outputs (lists of :meth:`TensorInfo.to_dict`)."""
        return {"name": self.name, "inputs": [t.to_dict() for t in self.inputs],
                "outputs": [t.to_dict() for t in self.outputs]}


@dataclass(frozen=True)
class BinaryInfo:
    """What a context binary holds: ``path``, QNN ``build_id``, ``soc_version``, ``graphs`` and
    ``soc_model``: the QNN ``Qnn_SocModel_t`` it was compiled for (binary info v3 header; ``None``
    in older binaries; measured: 60 for ``soc_model=60`` compiles, 66 for 66, on onnxruntime-qnn 2.7.0)."""

    path: str
    build_id: str
    soc_version: str
    graphs: tuple
    soc_model: int | None = None

    def __repr__(self) -> str:
        return (f"<BinaryInfo {self.path}: QNN build {self.build_id or '?'}, SoC {self.soc_version or '?'}, "
                f"graphs {', '.join(g.name for g in self.graphs) or '-'}>")

    def to_dict(self) -> dict:
        """JSON-ready dict: path, build_id, soc_version, soc_model, graphs (``aipc inspect model.bin --json``)."""
        return {"path": self.path, "build_id": self.build_id, "soc_version": self.soc_version,
                "soc_model": self.soc_model, "graphs": [g.to_dict() for g in self.graphs]}

    def graph(self, selector=None) -> GraphInfo:
        """The graph by name or index; the only graph when ``selector`` is ``None``.

        Raises:
            ArtifactError: unknown name/index, or several graphs and no selector.
        """
        names = [g.name for g in self.graphs]
        if selector is None and len(self.graphs) == 1:
            return self.graphs[0]
        if isinstance(selector, int) and not isinstance(selector, bool) and 0 <= selector < len(self.graphs):
            return self.graphs[selector]
        if isinstance(selector, str) and selector in names:
            return self.graphs[names.index(selector)]
        raise ArtifactError(f"{self.path} holds graphs {names}; select one with backend_options={{'graph': "
                            f"<name or index>}} (got {selector!r}).", path=self.path)


def system_library() -> str | None:
    """Path of the QNN System library: ``$ONNXWRAPPER_QNN_SYSTEM_LIB``, else onnxruntime-qnn's, else
    the one bundled in qai_appbuilder's ``libs/`` (found without importing it), else None."""
    import importlib.util

    if os.environ.get(ENV_SYSTEM_LIB):
        return os.environ[ENV_SYSTEM_LIB]
    name = "QnnSystem.dll" if sys.platform == "win32" else "libQnnSystem.so"
    folders = []
    try:
        import onnxruntime_qnn

        folders.append(os.path.dirname(onnxruntime_qnn.get_library_path()))
    except ImportError:
        pass
    spec = importlib.util.find_spec("qai_appbuilder")
    if spec is not None and spec.origin:
        folders.append(os.path.join(os.path.dirname(spec.origin), "libs"))
    return next((os.path.join(f, name) for f in folders if os.path.isfile(os.path.join(f, name))), None)


@lru_cache(maxsize=4)
def _interface(lib_path: str) -> _SystemInterface:
    lib = ct.CDLL(lib_path)
    get = lib.QnnSystemInterface_getProviders
    get.restype = ct.c_uint64
    get.argtypes = [ct.POINTER(ct.POINTER(ct.POINTER(_SystemInterface))), ct.POINTER(ct.c_uint32)]
    providers, count = ct.POINTER(ct.POINTER(_SystemInterface))(), ct.c_uint32()
    if get(ct.byref(providers), ct.byref(count)) != 0 or count.value == 0:
        raise OSError(f"QnnSystemInterface_getProviders failed in {lib_path}")
    iface = providers[0].contents
    if iface.systemApiVersion.major != 1:
        raise OSError(f"{lib_path}: unsupported QNN System API {iface.systemApiVersion.major}."
                      f"{iface.systemApiVersion.minor}")
    iface._lib = lib  # keep the library loaded as long as the interface is used
    return iface


def _tensor(t: _Tensor) -> TensorInfo:
    body = t.u.v1 if t.version == 1 else t.u.v2
    dims = tuple(int(body.dimensions[i]) for i in range(body.rank)) if body.dimensions else ()
    dtype = DATA_TYPES.get(body.dataType, f"0x{body.dataType:04x}")
    q = body.quantizeParams
    scale = offset = None
    if q.encodingDefinition == _DEFINED and q.quantizationEncoding == _SCALE_OFFSET:
        scale, offset = float(q.u.scaleOffset.scale), int(q.u.scaleOffset.offset)
    elif q.encodingDefinition == _DEFINED and q.quantizationEncoding == _BW_SCALE_OFFSET:
        scale, offset = float(q.u.bwScaleOffset.scale), int(q.u.bwScaleOffset.offset)
    return TensorInfo(body.name.decode(), dims, dtype, scale, offset)


def read_binary_info(path, system_lib: str | None = None) -> BinaryInfo:
    """Graphs and IO tensors of the context binary at ``path``.

    Raises:
        ArtifactError: no QNN System library, the file is not a context binary this library
            reads, or unknown struct versions.
    """
    path = os.fspath(path)
    lib_path = system_lib or system_library()
    if lib_path is None:
        raise ArtifactError("Reading QNN context binaries needs the QNN System library: pip install "
                            f"'onnxwrapper[qnn]' or set {ENV_SYSTEM_LIB}.", path=path)
    try:
        iface = _interface(lib_path)
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ArtifactError(f"Cannot read {path} with {lib_path}: {exc}", path=path) from exc
    handle = ct.c_void_p()
    if iface.systemContextCreate(ct.byref(handle)) != 0:
        raise ArtifactError(f"QnnSystemContext_create failed in {lib_path}", path=path)
    try:
        buf = ct.create_string_buffer(data, len(data))
        info, size = ct.POINTER(_BinaryInfo)(), ct.c_uint64()
        status = iface.systemContextGetBinaryInfo(handle, ct.cast(buf, ct.c_void_p), len(data), ct.byref(info),
                                                  ct.byref(size))
        if status != 0 or not info:
            raise ArtifactError(f"{path} is not a QNN context binary that {os.path.basename(lib_path)} can read "
                                f"(QnnSystemContext_getBinaryInfo error {status}).", path=path)
        version = info.contents.version
        if version not in (1, 2, 3):
            raise ArtifactError(f"{path}: unknown context binary info version {version}.", path=path)
        body = getattr(info.contents.u, f"v{version}")
        graphs = []
        for i in range(body.numGraphs):
            g = body.graphs[i]
            if g.version not in (1, 2, 3):
                raise ArtifactError(f"{path}: unknown graph info version {g.version}.", path=path)
            gb = getattr(g.u, f"v{g.version}")
            graphs.append(GraphInfo(gb.graphName.decode(),
                                    tuple(_tensor(gb.graphInputs[k]) for k in range(gb.numGraphInputs)),
                                    tuple(_tensor(gb.graphOutputs[k]) for k in range(gb.numGraphOutputs))))
        soc_model = int(body.socModel) if version == 3 and body.socModel else None
        return BinaryInfo(path, (body.buildId or b"").decode(), (body.socVersion or b"").decode(), tuple(graphs),
                          soc_model)
    finally:
        iface.systemContextFree(handle)


# -- EPContext wrapper ----------------------------------------------------------------------------
#: file names tried next to ``<stem>.onnx`` by :func:`resolve_raw_context_binary` (qai conventions,
#: ``.bin`` last and skipped when ``<stem>.cpp`` marks it as converter weights)
