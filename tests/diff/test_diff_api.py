"""The Python API of ``onnxwrapper.diff``: run/check, the pytest assertion helper, quiet import."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from onnxwrapper import diff
from onnxwrapper._registry import default_registry
from tests.test_diff_support import child_env, conv_project  # noqa: F401 (fixture)


@pytest.fixture
def perturb_registered(child_env):
    """The perturb test backend in this process too (the parent resolves backend names)."""
    plugin_dir = child_env["PYTHONPATH"].split(os.pathsep)[0]
    spec = importlib.util.spec_from_file_location("diff_perturb_backend", f"{plugin_dir}/diff_perturb_backend.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    default_registry().register(module.PerturbBackend)
    yield
    default_registry().unregister("perturb")


def test_run_and_assert_helpers(tmp_path, child_env, perturb_registered):
    script = conv_project(tmp_path)
    env = {"PYTHONPATH": child_env["PYTHONPATH"]}
    ok = diff.assert_backends_agree(script, backends="cpu,perturb", directory=tmp_path / "ok", cwd=tmp_path, env=env)
    assert ok.passed and ok.exit_status == 0 and [s.passed for s in ok.outputs] == [True]
    with pytest.raises(diff.DiffAssertionError) as info:
        diff.assert_backends_agree(script, backends="cpu,perturb", backend_options={"perturb": {"scale": 1e-2}},
                                   directory=tmp_path / "bad", cwd=tmp_path, env=env)
    message = str(info.value)
    assert "verdict: MISMATCH (exit status 1)" in message and "FAIL:tolerance" in message
    assert info.value.result.outputs[0].failed_calls == 3
    # re-judged from the saved directory with a tolerance that accepts a 1 % scale error: the tensors
    # pass, but the printed sums still differ by 1 % (beyond FP32's budget) — an app-level mismatch
    tolerance = diff.Tolerance(check="none", min_cosine=0.999)
    rechecked = diff.check(tmp_path / "bad", tolerances=tolerance)
    assert rechecked.state == "app_mismatch" and rechecked.mode == "check" and not rechecked.tensor_mismatch
    rechecked = diff.check(tmp_path / "bad", tolerances=tolerance, compare_output=["none"])
    assert rechecked.passed and rechecked.app["perturb"].status == "not_compared"
    assert rechecked.write_json(tmp_path / "r.json") and (tmp_path / "r.json").exists()


def test_run_rejects_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError):
        diff.run(tmp_path / "missing.py", backends="cpu,c2=cpu")
    with pytest.raises(ValueError, match="given twice"):
        diff.parse_backends("cpu,cpu")
    with pytest.raises(ValueError, match="not among the backends"):
        diff.run(conv_project(tmp_path), backends="cpu,c2=cpu", backend_options={"qnn": {}}, cwd=tmp_path)


def test_check_needs_a_diff_directory(tmp_path):
    with diff.start_capture(tmp_path / "cap"):
        pass
    with pytest.raises(FileNotFoundError, match="single capture"):
        diff.check(tmp_path / "cap")


def test_import_is_quiet():
    code = ("import sys, onnxwrapper.diff; "
            "print(sorted(m for m in ('matplotlib', 'tqdm', 'onnxruntime_qnn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]" and out.stderr == ""


def test_public_surface():
    assert set(diff.__all__) == {n for n in dir(diff) if not n.startswith("_")} - {"annotations"}


def test_fix_names_moved_to_repair_fix_with_a_deprecation_warning():
    from onnxwrapper.repair import fix as repair_fix  # the new home (issue 28)

    for name in ("fix", "FixResult", "REMEDIES"):
        with pytest.warns(DeprecationWarning, match=rf"onnxwrapper\.diff\.{name} moved to onnxwrapper\.repair\.fix\.{name}"):
            assert getattr(diff, name) is getattr(repair_fix, name)
    with pytest.raises(AttributeError, match="no_such_name"):
        diff.no_such_name  # noqa: B018


def test_the_diff_imports_nothing_of_the_loader_and_the_recipes_nothing_of_the_fix():
    # the per-backend child is the loader's (python -m aipc_loader._diff_child), started by name;
    # backends import onnxwrapper.repair, which must not pull in the fix (it builds on the diff)
    code = ("import sys, onnxwrapper.diff, onnxwrapper.repair; "
            "print(sorted(m for m in ('aipc_loader', 'onnxwrapper.repair.fix') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
