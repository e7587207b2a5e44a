"""The wheel is a typed package (PEP 561): it ships ``py.typed``, and a user's script that uses the
public API passes ``mypy --strict`` against the *installed* wheel (a fresh virtual environment that
sees only the wheel plus this environment's dependencies — not the source tree)."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import sysconfig
import zipfile

import pytest

pytestmark = pytest.mark.slow  # outside the fast subset: mypy --strict over the public API

ROOT = pathlib.Path(__file__).parents[2]
USER_SCRIPT = ROOT / "tests" / "typing" / "user_script.py"

pytest.importorskip("mypy")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> pathlib.Path:
    """A virtual environment with the wheel built from this tree; returns its python."""
    tmp = tmp_path_factory.mktemp("typed")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"),
                            str(ROOT)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("onnxwrapper-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "onnxwrapper/py.typed" in names and "aipc_loader/py.typed" in names, "the wheel ships no py.typed"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True, timeout=120)
    python = tmp / "venv" / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    zipfile.ZipFile(wheel).extractall(purelib)  # a pure-Python wheel's install is its extraction
    # the dependencies (numpy, onnx, onnxruntime) from this environment; its .pth files (the editable
    # install of this tree) are not processed, so `import onnxwrapper` finds the wheel's copy
    (pathlib.Path(purelib) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run([str(python), "-c", "import onnxwrapper; print(onnxwrapper.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp).stdout
    assert where.startswith(purelib), where
    return python


def test_public_api_type_checks_under_mypy_strict(installed, tmp_path):
    script = tmp_path / USER_SCRIPT.name
    script.write_text(USER_SCRIPT.read_text(encoding="utf-8"), encoding="utf-8")
    wrong = tmp_path / "wrong.py"  # the control: mypy sees the real types (not Any)
    wrong.write_text("import onnxwrapper as ort\nfrom onnxwrapper import diff\n"
                     "count: int = ort.get_available_backends()\n"
                     "name: str = diff.generate_inputs('m.onnx')\n")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable",
                           str(installed), script.name, wrong.name], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)  # from outside the source tree
    errors = [ln for ln in proc.stdout.splitlines() if ": error:" in ln]
    assert not [e for e in errors if e.startswith(script.name)], proc.stdout[-4000:] + proc.stderr[-2000:]
    assert len(errors) == 2, proc.stdout
    assert 'expression has type "BackendList"' in errors[0] and 'expression has type "ModelInputs"' in errors[1]
