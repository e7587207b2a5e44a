"""Child processes: multiprocessing spawn / fork / forkserver and ``subprocess.run([sys.executable,
…])`` children of an aipc run inherit the patch and the backend; processes that did not ask for it
are never patched; the bootstrap chains to a pre-existing ``sitecustomize``."""

from __future__ import annotations

import json
import os
import sys

import pytest

from aipc_loader._bootstrap import BOOTSTRAP_DIR
from aipc_loader._env import ACTIVE_VARIABLE, ChildConfig, encode_child_config
from tests.test_loader_support import aipc, clean_env, run, write, write_model

CHILDREN = """\
import json, multiprocessing as mp, os, subprocess, sys

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "m.onnx")

def probe(_=None):
    import onnxruntime as ort
    s = ort.InferenceSession(MODEL, providers=["CPUExecutionProvider"])
    return type(s).__module__ + ":" + str(getattr(s, "backend_name", "-"))

CHILD = "import sys; sys.path.insert(0, %r); import children; print(children.probe())" % os.path.dirname(MODEL)

if __name__ == "__main__":
    result = {"main": probe(), "bootstrap_on_sys_path": any("_bootstrap" in p for p in sys.path)}
    for method in sys.argv[1:]:
        with mp.get_context(method).Pool(1) as pool:
            result[method] = pool.map(probe, [0])[0]
    result["subprocess"] = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if k != "AIPC_ACTIVE"}
    result["subprocess_without_aipc_active"] = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=env).stdout.strip()
    result["subprocess_isolated"] = subprocess.run(
        [sys.executable, "-I", "-c", "import sys; sys.path.insert(0, %r); " % os.path.dirname(os.path.dirname(MODEL)) + CHILD],
        capture_output=True, text=True).stdout.strip()
    print(json.dumps(result, sort_keys=True))
"""

REDIRECTED = "onnxwrapper._session:cpu"
PLAIN = "onnxruntime.capi.onnxruntime_inference_collection:-"


@pytest.fixture
def children_script(tmp_path):
    write_model(tmp_path / "app" / "m.onnx")
    return write(tmp_path / "app" / "children.py", CHILDREN)


def test_children_inherit_the_patch(children_script, tmp_path):
    methods = ["spawn", "fork", "forkserver"] if sys.platform.startswith("linux") else ["spawn"]
    result = aipc(["--backend", "cpu", children_script, *methods], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    for key in ["main", "subprocess", *methods]:
        assert got[key] == REDIRECTED, (key, got)
    assert got["subprocess_without_aipc_active"] == PLAIN
    assert got["subprocess_isolated"] == PLAIN          # -I ignores PYTHONPATH: not patched
    assert got["bootstrap_on_sys_path"] is False
    assert result.stderr == ""


def test_plain_python_run_of_the_same_script_is_unpatched(children_script, tmp_path):
    result = run([children_script, "spawn"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert set(got.values()) - {False} == {PLAIN}


def test_child_activation_is_lazy_and_needs_aipc_active(tmp_path):
    write_model(tmp_path / "m.onnx")
    code = ("import sys\n"
            "assert 'onnxruntime' not in sys.modules and 'onnxwrapper' not in sys.modules\n"
            "import aipc_loader\n"
            "print(aipc_loader.is_active(), any('_bootstrap' in p for p in sys.path))\n"
            "import onnxruntime as ort\n"
            "print(type(ort.InferenceSession('m.onnx')).__module__)\n")
    config = encode_child_config(ChildConfig("cpu", {}))
    pythonpath = os.pathsep.join([BOOTSTRAP_DIR, clean_env()["PYTHONPATH"]])
    active = run(["-c", code], cwd=tmp_path, env=clean_env(PYTHONPATH=pythonpath, **{ACTIVE_VARIABLE: config}))
    assert active.returncode == 0, active.stderr
    assert active.stdout.splitlines() == ["True False", "onnxwrapper._session"]
    asked_nothing = run(["-c", code], cwd=tmp_path, env=clean_env(PYTHONPATH=pythonpath))
    assert asked_nothing.stdout.splitlines() == ["False False", "onnxruntime.capi.onnxruntime_inference_collection"]
    user_vars_only = run(["-c", code], cwd=tmp_path, env=clean_env(AIPC_BACKEND="cpu", AIPC_STRICT="1"))
    assert user_vars_only.stdout.splitlines()[-1] == "onnxruntime.capi.onnxruntime_inference_collection"


def test_bootstrap_chains_to_an_existing_sitecustomize(tmp_path):
    write(tmp_path / "site_dir" / "sitecustomize.py", "import os\nos.environ['CHAINED'] = 'yes'\n")
    code = "import os, sitecustomize; print(os.environ.get('CHAINED'), sitecustomize.__file__.endswith(os.path.join('site_dir', 'sitecustomize.py')))"
    pythonpath = os.pathsep.join([BOOTSTRAP_DIR, str(tmp_path / "site_dir"), clean_env()["PYTHONPATH"]])
    result = run(["-c", code], env=clean_env(PYTHONPATH=pythonpath, **{ACTIVE_VARIABLE: encode_child_config(ChildConfig("cpu"))}))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "yes True"


def test_bad_activation_never_breaks_interpreter_startup(tmp_path):
    pythonpath = os.pathsep.join([BOOTSTRAP_DIR, clean_env()["PYTHONPATH"]])
    result = run(["-c", "print('alive')"], env=clean_env(PYTHONPATH=pythonpath, **{ACTIVE_VARIABLE: "{not json"}))
    assert result.returncode == 0 and result.stdout == "alive\n"
    assert "aipc[" in result.stderr and "not active in this process" in result.stderr


def test_children_report_partitions_with_their_pid_when_asked(tmp_path):
    write_model(tmp_path / "m.onnx")
    script = write(tmp_path / "proc.py", """\
        import multiprocessing as mp, os
        MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "m.onnx")

        def work():
            import onnxruntime
            onnxruntime.InferenceSession(MODEL)

        if __name__ == "__main__":
            work()
            child = mp.get_context("spawn").Process(target=work)
            child.start()
            child.join()
            print("exit", child.exitcode)
    """)
    result = aipc(["--backend", "cpu", "--report-partition", script], cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == "exit 0\n", result.stderr
    lines = result.stderr.splitlines()
    assert "aipc: partition 1: m.onnx [cpu]: no partition recorded by backend 'cpu'" in lines, lines
    assert any(line.startswith("aipc[") and line.endswith("]: partition 1: m.onnx [cpu]: no partition "
                                                           "recorded by backend 'cpu'") for line in lines), lines
    assert len(lines) == 2, lines
