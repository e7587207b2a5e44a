"""The registry's persistent entry-point index: a new process finds its backends without importing
importlib-metadata, and a stale or broken index costs a scan, never a wrong answer."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import importlib_metadata
import pytest

from onnxwrapper import _entry_point_index as index
from onnxwrapper._registry import ENTRY_POINT_GROUP, BackendRegistry
from onnxwrapper.errors import BackendNotFoundError

REPO = Path(__file__).resolve().parents[2]

PLUGIN = '''
from onnxwrapper.backends.cpu import CpuBackend


class IndexProbeBackend(CpuBackend):
    """TEST ONLY: the cpu backend under another name."""

    name = "{name}"
    aliases = ()
    execution_providers = ()
'''

SESSION = """
import sys
import onnxwrapper
from onnxwrapper._registry import default_registry
names = default_registry().names()
onnxwrapper.InferenceSession(sys.argv[1], backend=sys.argv[2])
print(",".join(names), "importlib_metadata" in sys.modules)
"""


def _plugin(directory: Path, name: str) -> None:
    """A one-backend distribution ``index-probe-<name>`` in ``directory`` (on the child's sys.path)."""
    (directory / f"index_probe_{name}.py").write_text(PLUGIN.format(name=name))
    info = directory / f"index_probe_{name}-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: index-probe-{name}\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = index_probe_{name}:IndexProbeBackend\n")


def _child(tmp_path: Path, plugins: Path, backend: str) -> tuple[list[str], bool]:
    model = tmp_path / "m.onnx"
    if not model.exists():
        from tests import models

        model.write_bytes(models.mul_1())
    env = {**os.environ, "ONNXWRAPPER_CACHE_DIR": str(tmp_path / "cache"), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join([str(plugins), str(REPO)])}
    work = tmp_path / "work"  # the working directory is on sys.path ('' for -c): nothing is written there
    work.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(SESSION), str(model), backend], env=env,
                          capture_output=True, text=True, timeout=120, cwd=work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names, imported = proc.stdout.split()
    return names.split(","), imported == "True"


def test_a_second_process_reads_the_index_and_sees_newly_installed_plugins(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    _plugin(plugins, "probeone")
    names, scanned = _child(tmp_path, plugins, "probeone")
    assert "probeone" in names and "cpu" in names and scanned  # first process: scan, index written
    names, scanned = _child(tmp_path, plugins, "probeone")
    assert "probeone" in names and not scanned  # from the index: importlib-metadata never imported
    _plugin(plugins, "probetwo")  # installed since: the folder's modification time changed
    names, scanned = _child(tmp_path, plugins, "probetwo")
    assert "probetwo" in names and scanned


def test_files_written_next_to_the_script_keep_the_index_until_a_distribution_appears(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    _plugin(plugins, "probeone")
    work = tmp_path / "work"  # the child's working directory: '' on its sys.path
    work.mkdir()
    assert _child(tmp_path, plugins, "probeone")[1]  # first process: scan, index written
    (work / "result.txt").write_text("an app's output")  # the folder's modification time moves
    names, scanned = _child(tmp_path, plugins, "probeone")
    assert "probeone" in names and not scanned  # still no distribution there: the index holds
    _plugin(work, "probethree")  # a distribution appears in that folder
    names, scanned = _child(tmp_path, plugins, "probethree")
    assert "probethree" in names and scanned


def _stable_sys_path(monkeypatch, tmp_path) -> None:
    """sys.path = the site-packages folders only (no working directory that other writes touch)
    and a cache directory of the test's own."""
    monkeypatch.setattr(sys, "path", list(site.getsitepackages()))
    monkeypatch.setenv("ONNXWRAPPER_CACHE_DIR", str(tmp_path / "cache"))


def _registry_with_index(monkeypatch, tmp_path, rows) -> BackendRegistry:
    """A registry whose index (for this process's sys.path) lists ``rows`` = [[name, value, dist]]."""
    _stable_sys_path(monkeypatch, tmp_path)
    location = index.index_location(ENTRY_POINT_GROUP)
    real = {ep.name: ep for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP)}
    index.write_index(location, real)
    path = location.file
    doc = json.loads(Path(path).read_text())
    doc["entry_points"] = rows
    Path(path).write_text(json.dumps(doc))
    return BackendRegistry()


def test_a_stale_index_costs_a_scan_not_a_wrong_answer(monkeypatch, tmp_path):
    # the index misses 'qnn' and lists a backend that is gone and a broken 'cpu' entry point
    reg = _registry_with_index(monkeypatch, tmp_path, [["cpu", "no_such_module_x:Nope", None],
                                                       ["gone", "no_such_module_y:Nope", None]])
    assert reg.names() == ["cpu", "gone"]  # answered from the index
    assert reg.get("cpu").__name__ == "CpuBackend"  # the broken entry point made it scan again
    assert "gone" not in reg.names() and "qnn" in reg.names()
    reg = _registry_with_index(monkeypatch, tmp_path, [["cpu", "onnxwrapper.backends.cpu:CpuBackend", "onnxwrapper"]])
    assert reg.resolve("qairt") == "qnn"  # an alias the index cannot answer: scanned
    reg = _registry_with_index(monkeypatch, tmp_path, [["cpu", "onnxwrapper.backends.cpu:CpuBackend", "onnxwrapper"]])
    with pytest.raises(BackendNotFoundError):
        reg.get("nosuchbackend")


def test_reloaded_plugins_are_not_written_to_the_index(monkeypatch, tmp_path):
    _stable_sys_path(monkeypatch, tmp_path)
    location = index.index_location(ENTRY_POINT_GROUP)
    reg = BackendRegistry()
    reg.names()  # the first scan of a process is written
    path = Path(location.file)
    written = path.read_text()
    real = importlib_metadata.entry_points

    def with_double(**params):
        found = real(**params)
        double = importlib_metadata.EntryPoint(name="double", value="fake_module:Double", group=ENTRY_POINT_GROUP)
        return importlib_metadata.EntryPoints([double, *found]) if params.get("group") == ENTRY_POINT_GROUP else found

    monkeypatch.setattr(importlib_metadata, "entry_points", with_double)
    reg.reload()
    assert "double" in reg.names()
    assert path.read_text() == written  # the double stays in this process
    assert "double" not in BackendRegistry().names()


def test_unreadable_index_and_cache_are_ignored(monkeypatch, tmp_path):
    _stable_sys_path(monkeypatch, tmp_path)
    location = index.index_location(ENTRY_POINT_GROUP)
    BackendRegistry().names()
    path = Path(location.file)
    assert index.read_index(location) is not None
    path.write_text("{not json")
    assert index.read_index(location) is None and "cpu" in BackendRegistry().names()
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("ONNXWRAPPER_CACHE_DIR", str(blocker))  # a file: nothing can be written below it
    assert "cpu" in BackendRegistry().names()
