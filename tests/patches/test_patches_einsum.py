"""Patch ``einsum``: Einsum → Transpose/Reshape/MatMul equals ORT's Einsum on CPU (≤ 1e-6),
for the common equation families, and refuses the rest with a reason."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnxwrapper.patches import PatchError, apply_patches, find_patches, get_patch
from tests.models import IR_VERSION


def einsum_model(equation, shapes, opset=17, dtype=T.FLOAT) -> onnx.ModelProto:
    names = [f"x{i}" for i in range(len(shapes))]
    g = h.make_graph([h.make_node("Einsum", names, ["y"], equation=equation, name="einsum")], "einsum",
                     [h.make_tensor_value_info(n, dtype, list(s)) for n, s in zip(names, shapes)],
                     [h.make_tensor_value_info("y", dtype, None)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=IR_VERSION)


def run_cpu(model, feeds):
    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def check(model, feed_shapes, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {f"x{i}": rng.standard_normal(s).astype(dtype) for i, s in enumerate(feed_shapes)}
    patched, records = apply_patches(model)
    assert len(records) == 1 and records[0].patch == "einsum"
    assert all(n.op_type != "Einsum" for n in patched.graph.node)
    got, ref = run_cpu(patched, feeds), run_cpu(model, feeds)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    ops = [op for _, op in records[0].added_nodes]
    assert set(ops) <= {"MatMul", "Transpose", "Reshape", "ReduceSum", "Identity"}
    return records[0]


CASES = [
    # (equation, operand shapes) — the families of the issue, then variants
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),            # batched matmul
    ("bhid,bhjd->bhij", [(2, 3, 4, 8), (2, 3, 6, 8)]),    # attention scores (Q·Kᵀ)
    ("bhij,bhjd->bhid", [(2, 3, 4, 6), (2, 3, 6, 8)]),    # attention · V
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ji,jk->ik", [(4, 3), (4, 5)]),                      # transposed left
    ("ij,kj->ik", [(3, 4), (5, 4)]),                      # transposed right
    ("ji,kj->ki", [(4, 3), (5, 4)]),                      # both transposed + output order
    ("bchw,bkc->bkhw", [(2, 3, 4, 5), (2, 6, 3)]),        # YOLO-World contrastive head
    ("bhwc,hkc->bhwk", [(2, 3, 4, 5), (3, 6, 5)]),
    ("bij,jk->bik", [(2, 3, 4), (4, 5)]),                 # shared weight
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),                  # implicit output
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]),  # ellipsis
    ("i,i->", [(7,), (7,)]),                              # dot
    ("i,j->ij", [(3,), (4,)]),                            # outer
    ("bi,bi->b", [(3, 5), (3, 5)]),                       # batched dot
    ("abc,cd->", [(2, 3, 4), (4, 5)]),                    # full reduction
    ("ijk,jl->li", [(2, 3, 4), (3, 5)]),                  # single-operand sum (k) + transpose
    ("bnd,bmd->bnm", [(1, 4, 8), (1, 6, 8)]),
    ("bcij,bcjk->bcik", [(1, 2, 3, 4), (1, 2, 4, 3)]),
    ("abcd,cdef->abef", [(2, 3, 4, 5), (4, 5, 2, 3)]),    # multi-letter contraction
    ("ij->ji", [(3, 4)]),                                 # one operand: transpose
    ("bij->bj", [(2, 3, 4)]),                             # one operand: reduction
    ("ij->ij", [(3, 4)]),                                 # one operand: identity
]


@pytest.mark.parametrize("equation,shapes", CASES, ids=[c[0] for c in CASES])
def test_equation_matches_ort(equation, shapes):
    check(einsum_model(equation, shapes), shapes)


def test_fewest_transposes_chosen():
    rec = check(einsum_model("bchw,bkc->bkhw", [(2, 3, 4, 5), (2, 6, 3)]), [(2, 3, 4, 5), (2, 6, 3)])
    assert [op for _, op in rec.added_nodes] == ["Reshape", "MatMul", "Reshape"]
    rec = check(einsum_model("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), [(2, 3, 4), (2, 4, 5)])
    assert [op for _, op in rec.added_nodes] == ["MatMul"]


@pytest.mark.parametrize("dtype,np_dtype", [(T.DOUBLE, np.float64), (T.FLOAT16, np.float16)])
def test_other_float_types(dtype, np_dtype):
    shapes = [(2, 3, 4), (2, 4, 5)]
    model = einsum_model("bij,bkj->bik", [(2, 3, 4), (2, 5, 4)], dtype=dtype)
    rng = np.random.default_rng(0)
    feeds = {"x0": rng.standard_normal(shapes[0]).astype(np_dtype),
             "x1": rng.standard_normal((2, 5, 4)).astype(np_dtype)}
    patched, _ = apply_patches(model)
    tol = 1e-6 if np_dtype == np.float64 else 1e-2
    np.testing.assert_allclose(run_cpu(patched, feeds).astype(np.float64), run_cpu(model, feeds).astype(np.float64),
                               rtol=tol, atol=tol)


def test_dynamic_batch_is_copied():
    model = einsum_model("bchw,bkc->bkhw", [("N", 3, 4, 5), ("N", 6, 3)])
    for n in (1, 3):
        check(model, [(n, 3, 4, 5), (n, 6, 3)], seed=n)


def test_opset12_reducesum_attribute_form():
    check(einsum_model("ijk,jl->li", [(2, 3, 4), (3, 5)], opset=12), [(2, 3, 4), (3, 5)])


@pytest.mark.parametrize("equation,shapes,reason", [
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], "only 1 or 2 are supported"),
    ("ii->i", [(3, 3)], "repeats a letter"),
    ("iij,jk->ik", [(3, 3, 4), (4, 5)], "repeats a letter"),
    ("bhwc,hkc->bhwk", [("B", "H", "W", 5), ("H", 6, 5)], "more than one unknown dimension"),
])
def test_unsupported_equations_are_refused(equation, shapes, reason):
    model = einsum_model(equation, shapes)
    patch = get_patch("einsum")
    node = model.graph.node[0]
    assert not patch.matches(node, model)
    assert reason in patch.reject_reason(node, model)
    with pytest.raises(PatchError, match=reason):
        patch.apply(model, node)
    (match,) = find_patches(model)
    assert not match.applicable and reason in match.reason
    assert apply_patches(model)[1] == []


def test_ellipsis_with_unknown_rank_is_refused():
    g = h.make_graph([h.make_node("Einsum", ["a", "b"], ["y"], equation="...ij,...jk->...ik")], "e",
                     [h.make_tensor_value_info("a", T.FLOAT, None), h.make_tensor_value_info("b", T.FLOAT, None)],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=IR_VERSION)
    assert "known rank" in get_patch("einsum").reject_reason(model.graph.node[0], model)
