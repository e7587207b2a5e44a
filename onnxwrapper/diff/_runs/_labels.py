"""Run labels of ``aipc diff`` (``--backends cpu,q32=qnn``, read by :func:`parse_backends`) become folder
names of the diff directory.

A label therefore has to be a portable file name: on Windows ``< > : " / \\ | ? *`` and control
characters are invalid in names, a name may not end in a dot or a space, and ``CON``, ``PRN``,
``AUX``, ``NUL``, ``COM1``–``COM9``, ``LPT1``–``LPT9`` (with any extension) name devices
(Microsoft, "Naming Files, Paths, and Namespaces"). :func:`check_label` accepts letters, digits and
``_ . + -``, starting with a letter or digit, at most 64 characters, and no device name — a label
that works as a folder name everywhere — and says what to write instead. Two labels of one diff
may not differ only in case: Windows and macOS file systems are case-insensitive by default, so
``Q=qnn`` and ``q=qnn`` would be one folder.

:func:`check_backend_options` validates each run's options in the parent, before any child starts:
a bad option (an unreadable recipe, a cache others can write, a typo) is a usage error at once, not
a failed run after the others ran.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from onnxwrapper._registry import default_registry

__all__ = ["LABEL_PATTERN", "check_backend_options", "check_label", "parse_backends"]

LABEL_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
_DEVICES = {"con", "prn", "aux", "nul"} | {f"com{i}" for i in range(1, 10)} | {f"lpt{i}" for i in range(1, 10)}


def check_label(label: str) -> str:
    """Return ``label`` when it is a portable folder name (module docstring).

    Raises:
        ValueError: naming the label, what is wrong and a valid spelling.
    """
    suggestion = re.sub(r"[^A-Za-z0-9_.+-]", "-", label).strip("-. ")[:64] or "run"
    if not suggestion[0].isalnum():
        suggestion = "run-" + suggestion
    if not LABEL_PATTERN.fullmatch(label) or label.endswith("."):
        bad = sorted({ch for ch in label if not (ch.isascii() and (ch.isalnum() or ch in "_.+-"))})
        what = f"characters {' '.join(repr(c) for c in bad)}" if bad else "its first or last character or its length"
        raise ValueError(f"run label {label!r} cannot be a folder name of the diff directory ({what}); labels use "
                         f"letters, digits and _ . + - (at most 64), e.g. '{suggestion}=BACKEND'.")
    if label.split(".")[0].lower() in _DEVICES:
        raise ValueError(f"run label {label!r} is a reserved device name on Windows; choose another, e.g. "
                         f"'{label}-run=BACKEND'.")
    return label


def parse_backends(spec: Iterable[str] | str) -> dict[str, str]:
    """``"cpu,qnn,q32=qnn"`` or a list of such entries → ``{label: backend name}`` (canonical).

    Raises:
        onnxwrapper.BackendNotFoundError: an unknown backend name (a usage error).
        ValueError: empty list, a label given twice (also in another case: ``Q`` and ``q``), or a
            label that cannot be a folder name (:func:`check_label`: ``:``, ``?``, ``*``, device names, …).
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    result: dict[str, str] = {}
    for item in (i.strip() for i in items):
        if not item:
            continue
        label, _, name = item.partition("=") if "=" in item else (item, "", item)
        label, name = label.strip(), name.strip()
        canonical = default_registry().resolve(name)
        label = check_label(label) if "=" in item else canonical
        if label in result:
            raise ValueError(f"backend label '{label}' is given twice; name the second run 'LABEL={name}'.")
        same = next((other for other in result if other.lower() == label.lower()), None)
        if same is not None:
            raise ValueError(f"backend labels '{same}' and '{label}' differ only in case: on Windows and macOS they "
                             f"name the same folder of the diff directory; name the second run e.g. "
                             f"'{label}2={name}'.")
        result[label] = canonical
    if not result:
        raise ValueError("no backend given (expected e.g. 'cpu,qnn').")
    return result


def check_backend_options(labels: Mapping[str, str], options: Mapping[str, Mapping]) -> None:
    """Validate the options of each run (``{label: backend}``, ``{label: options}``) with its
    backend's option table, in this process, before any child starts.

    Raises:
        onnxwrapper.BackendOptionError: an unknown option or a bad value (a recipe that cannot be
            used, a cache directory another user could write, …), naming the backend.
    """
    for label, backend in labels.items():
        default_registry().get(backend).validate_options(dict(options.get(label) or {}))
