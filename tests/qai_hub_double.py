"""The qai-hub 0.56 test double (tests/fakes/qai_hub) for its own tests: one instance of it, the
models and configuration files they submit, and the fixture that gives every test a fresh farm.

Used by test_qai_hub_double.py (the client: configuration, devices, surface, parity with the real
package) and test_qai_hub_double_jobs.py (compile and inference jobs, argument checks, failures).
"""

from __future__ import annotations

import pathlib
import sys

import pytest
from onnx import TensorProto, helper

FAKES = pathlib.Path(__file__).parent / "fakes"


def _import_double():
    """An instance of the double of its own; ``sys.modules`` is left as it was, so nothing else in
    the test session imports it as ``qai_hub`` by accident (the real package may be installed)."""
    saved = {m: sys.modules.pop(m) for m in [m for m in sys.modules if m == "qai_hub" or m.startswith("qai_hub.")]}
    sys.path.insert(0, str(FAKES))
    try:
        import qai_hub  # the double: importable only while FAKES leads sys.path
    finally:
        sys.path.remove(str(FAKES))
        for name in [m for m in sys.modules if m == "qai_hub" or m.startswith("qai_hub.")]:
            del sys.modules[name]
        sys.modules.update(saved)
    return qai_hub


hub = _import_double()
S25 = hub.Device("Samsung Galaxy S25")
QNN = "--target_runtime qnn_context_binary"


def one_node(dynamic=True, op="Relu", dtype=TensorProto.FLOAT, name="x.in"):
    """A one-node model ``y = op(x)`` (``Add``: ``x + x``), input ``name`` ``[N, 3]`` or ``[2, 3]``."""
    dims = ["N", 3] if dynamic else [2, 3]
    x = helper.make_tensor_value_info(name, dtype, dims)
    y = helper.make_tensor_value_info("y", dtype, None)
    node = helper.make_node(op, [name] * (2 if op == "Add" else 1), ["y"], name=f"{op.lower()}0")
    return helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])


def two_inputs():
    """``y = |a - b|`` with ``a``, ``b`` float ``[1, 4]``."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Sub", ["a", "b"], ["d"], name="sub"), helper.make_node("Abs", ["d"], ["y"], name="abs")]
    return helper.make_model(helper.make_graph(nodes, "g", [a, b], [y]), opset_imports=[helper.make_opsetid("", 17)])


def client_ini(path, token="test-double-token", verbose=False, drop=None):
    """Write a ``client.ini`` as ``qai-hub configure`` does (without key ``drop``); returns its path."""
    keys = {"api_token": token, "api_url": "https://workbench.aihub.qualcomm.com",
            "web_url": "https://workbench.aihub.qualcomm.com", "verbose": str(verbose)}
    keys.pop(drop, None)
    path.write_text("[api]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()))
    return str(path)


@pytest.fixture(autouse=True)
def configured(tmp_path, monkeypatch):
    """A fresh farm and a valid configuration file around every test of a module that imports it."""
    hub.reset()
    monkeypatch.setenv("QAIHUB_CLIENT_INI", client_ini(tmp_path / "client.ini"))
    yield
    hub.reset()


def compiled(onnx_model=None, specs=None, options=QNN):
    """A successful compile job of ``onnx_model`` (default: :func:`one_node` at ``[2, 3]``)."""
    job = hub.submit_compile_job(onnx_model or one_node(), S25, input_specs=specs if specs is not None else
                                 {"x.in": ((2, 3), "float32")}, options=options)
    assert job.wait().success, job.get_status().message
    return job
