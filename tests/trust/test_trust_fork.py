"""fork() after a QNN session (docs/security.md): a forked child that runs the session, or opens a
new one of the same backend, gets ForkedSessionError at once instead of hanging forever, ends with
its own exit status, and the parent's session keeps working."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import qnn_available, run_python
from tests.trust.test_trust_cache import mul

pytestmark = [pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed"),
              pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")]

FORKS = r"""
import json, multiprocessing, os, sys
import numpy as np
import onnxwrapper
from onnxwrapper.errors import ForkedSessionError

model = sys.argv[1]
x = np.ones((3, 2), np.float32)
session = onnxwrapper.InferenceSession(model, backend="qnn")
before = session.run(None, {"X": x})[0]
found = {}

pid = os.fork()
if pid == 0:  # the child runs the parent's session, then opens its own, then exits normally
    errors = []
    for attempt in (lambda: session.run(None, {"X": x}), lambda: onnxwrapper.InferenceSession(model, backend="qnn")):
        try:
            attempt()
            errors.append(None)
        except ForkedSessionError as exc:
            errors.append(str(exc))
    print(json.dumps(errors), flush=True)
    sys.exit(3)
found["child_status"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

def work(_):
    return session.run(None, {"X": x})[0].tolist()

with multiprocessing.get_context("fork").Pool(1) as pool:
    try:
        pool.map(work, [0])
        found["pool"] = "ran"
    except ForkedSessionError as exc:
        found["pool"] = type(exc).__name__
# subprocess with preexec_fn runs the at-fork hooks in its child before exec: nothing may be freed there
import subprocess
found["preexec"] = subprocess.run([sys.executable, "-c", "print(7)"], preexec_fn=lambda: None, capture_output=True,
                                  text=True, timeout=60).stdout.strip()
found["parent_again"] = bool(np.array_equal(session.run(None, {"X": x})[0], before))
print(json.dumps(found), flush=True)
"""


def test_a_forked_child_fails_fast_and_the_parent_goes_on(tmp_path):
    (tmp_path / "m.onnx").write_bytes(mul([1, 2, 3, 4, 5, 6]))
    proc = run_python(FORKS, str(tmp_path / "m.onnx"), timeout=180)  # a hang fails here (TimeoutExpired)
    assert proc.returncode == 0, proc.stderr
    child, found = (json.loads(line) for line in proc.stdout.strip().splitlines()[-2:])
    assert child[0].startswith("InferenceSession.run() on backend 'qnn': this session was created in another process")
    assert "forked while its parent had a 'qnn' session open" in child[1] and "'spawn'" in child[1]
    assert found == {"child_status": 3, "pool": "ForkedSessionError", "preexec": "7", "parent_again": True}
