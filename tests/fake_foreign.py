"""The FAKE foreign SDKs of tests/fakes for the ``qai`` and ``snpe`` backend tests.

The helper modules of the fakes (``fake_qnn_graph``, ``foreign_cases``, ``fake_backends``,
``fake_qairt``) and the bodies of the fixtures that plug the fakes in: :func:`fake_qai_appbuilder`
(the FAKE qai_appbuilder behind the ``qai`` plugin) and :func:`fake_qairt_sdk` (a FAKE QAIRT SDK
behind the ``snpe`` plugin). Used by test_qai_backend.py, test_qai_native_io.py,
test_snpe_backend.py and test_foreign_contracts.py.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import sys
from typing import Callable, Iterator

import onnxwrapper as ow
from onnxwrapper.backends import qai, snpe

FAKES = pathlib.Path(__file__).parent / "fakes"
sys.path.insert(0, str(FAKES))  # the helper modules; the fake packages themselves only inside the fixtures
import fake_qnn_graph as fq  # noqa: E402
import foreign_cases as cases  # noqa: E402
from fake_backends import FakeQaiBackend, FakeSnpeBackend, plugged_in  # noqa: E402
from fake_qairt import make_fake_sdk  # noqa: E402

sys.path.remove(str(FAKES))

__all__ = ["FAKES", "FakeQaiBackend", "FakeSnpeBackend", "cases", "drop_fake_qai_appbuilder", "fake_qai_appbuilder",
           "fake_qairt_sdk", "fq", "open_qai", "plugged_in"]


def drop_fake_qai_appbuilder() -> None:
    """Forget the FAKE ``qai_appbuilder`` modules, so the next import finds whatever is on ``sys.path``."""
    for name in [m for m in sys.modules if m == "qai_appbuilder" or m.startswith("qai_appbuilder.")]:
        del sys.modules[name]


@contextlib.contextmanager
def fake_qai_appbuilder(monkeypatch) -> Iterator:
    """The FAKE qai_appbuilder importable and reset, its backend plugged in as ``qai`` (entry point).

    Yields the fake package; sessions appended to its ``opened`` list (see :func:`open_qai`) are
    closed afterwards, and no perf-profile holder may be left (a leak fails the test).
    """
    drop_fake_qai_appbuilder()
    monkeypatch.syspath_prepend(str(FAKES))
    try:
        with plugged_in(qai="fake_backends:FakeQaiBackend"):
            import qai_appbuilder  # the fake: importable only now that FAKES is on sys.path

            qai_appbuilder._fake.reset()
            qai_appbuilder.opened = []
            yield qai_appbuilder
            for sess in qai_appbuilder.opened:
                sess.close()
            assert qai._PERF.users == 0 and qai._PERF.active is None, "a test leaked a perf-profile holder"
    finally:
        drop_fake_qai_appbuilder()


def open_qai(fake, model, **options):
    """An ``InferenceSession`` on the ``qai`` backend, closed when ``fake``'s fixture ends."""
    sess = ow.InferenceSession(model, backend="qai", backend_options=options or None)
    fake.opened.append(sess)
    return sess


@contextlib.contextmanager
def fake_qairt_sdk(tmp_path, monkeypatch) -> Iterator[Callable[[], list]]:
    """A FAKE SDK in ``QAIRT_SDK_ROOT`` run by the ``FakeSnpeBackend`` plugin (entry point ``snpe``).

    Yields a reader of the fake ``snpe-net-run``'s log: the argv of each run so far.
    """
    root = make_fake_sdk(tmp_path / "qairt", snpe.host_arch_dirs()[0])
    log = tmp_path / "snpe-net-run.log"
    monkeypatch.setenv("QAIRT_SDK_ROOT", root)
    monkeypatch.delenv("SNPE_ROOT", raising=False)
    monkeypatch.setenv("FAKE_SNPE_LOG", str(log))
    with plugged_in(snpe="fake_backends:FakeSnpeBackend"):
        yield lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
