"""FAKE for tests — a fake QAIRT SDK tree with fake ``snpe-net-run`` and ``snpe-dlc-info``.

:func:`make_fake_sdk` lays out ``<root>/bin/<arch>/snpe-net-run`` (and ``snpe-dlc-info``) as small
launchers that run the Python fakes in this folder with the current interpreter, an empty
``<root>/lib/<arch>/`` and a note ``FAKE_QAIRT_SDK.txt`` for humans. Tests run it through the
``FakeSnpeBackend`` plugin (``tests/fakes/fake_backends.py``), which labels it FAKE. Built at test time
in a temporary directory (the launchers embed that machine's interpreter path), never shipped.
"""

from __future__ import annotations

import os
import stat
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
MARKER = "FAKE_QAIRT_SDK.txt"


def make_fake_sdk(root, arch: str) -> str:
    """Create the fake SDK under ``root`` for host architecture folder ``arch``; return ``root``."""
    root = os.fspath(root)
    bin_dir = os.path.join(root, "bin", arch)
    os.makedirs(bin_dir, exist_ok=True)
    os.makedirs(os.path.join(root, "lib", arch), exist_ok=True)
    with open(os.path.join(root, MARKER), "w", encoding="utf-8") as f:
        f.write("FAKE QAIRT SDK for onnxwrapper's tests; not Qualcomm software.\n")
    for tool, script in (("snpe-net-run", "snpe_net_run.py"), ("snpe-dlc-info", "snpe_dlc_info.py")):
        path = os.path.join(bin_dir, tool)  # POSIX launchers: the tests run on Linux hosts
        body = f'#!/bin/sh\nexec "{sys.executable}" "{os.path.join(_HERE, script)}" "$@"\n'
        with open(path, "w", encoding="utf-8") as f:
            f.write(body)
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return root
