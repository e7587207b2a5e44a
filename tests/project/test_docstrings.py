"""Every public function and class of the packages' ``__all__`` — and every public method and
property those classes define — has a docstring that says something: at least three words, not
just a generated signature (a dataclass without one gets ``Name(field: type, …)``). An override
may rely on the docstring of the method it overrides (``inspect.getdoc``)."""

from __future__ import annotations

import importlib
import inspect

import pytest

from tests.project.test_architecture import PACKAGES

ROOTS = ("onnxwrapper", "aipc_loader", "aipc")
#: onnxwrapper itself forwards onnxruntime's names; its own are checked, the forwarded ones are ORT's
CHECKED = ["onnxwrapper", *PACKAGES]


def _ours(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] in ROOTS


def _members(cls):
    """``(name, function)`` of the public methods and properties ``cls`` itself defines."""
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        func = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        if inspect.isfunction(func):
            yield name, func


def _undocumented(package: str) -> list[str]:
    module = importlib.import_module(package)
    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)) or not _ours(obj):
            continue
        checks = [(name, obj, inspect.getdoc(obj))]
        if inspect.isclass(obj):
            checks += [(f"{name}.{m}", f, inspect.getdoc(getattr(obj, m))) for m, f in _members(obj)]
        for label, target, doc in checks:
            text = (doc or "").strip()
            generated = inspect.isclass(target) and text.startswith(f"{target.__name__}(")
            if len(text.split()) < 3 or generated:
                missing.append(f"{package}.{label}: {text!r}")
    return missing


@pytest.mark.parametrize("package", CHECKED)
def test_public_names_have_docstrings(package):
    missing = _undocumented(package)
    assert not missing, "public names without a real docstring:\n" + "\n".join(missing)
