"""No network (docs/security.md): with an AI Hub token but no way to reach the service, the ``aihub``
backend says so after the client's own transport retries (about 30 s), not after ``max_wait``
(15 minutes) of backoff: a refused connection or a failed name lookup is not transient. Run
against the qai-hub TEST DOUBLE's fault plan ``go_offline`` (simulated clock)."""

from __future__ import annotations

import numpy as np
import pytest

from onnxwrapper.errors import BackendUnavailableError, RemoteJobError
from tests.backends.test_aihub_errors import X, _open, hub, model  # noqa: F401 (fixtures)

#: the real client's transport retries without a network: 7 tries, at most about 31 s (util/session.py)
CLIENT_RETRIES = 31.25


@pytest.mark.parametrize("cause, message", [("refused", "cannot be reached \\(connection refused\\)"),
                                            ("dns", "cannot be reached \\(name lookup failed")])
def test_no_network_is_reported_at_once_not_after_max_wait(hub, model, cause, message):  # noqa: F811
    hub.farm.apply_plan([{"call": "go_offline", "cause": cause}])
    start = hub.farm.clock.now
    with pytest.raises(BackendUnavailableError, match=message) as info:
        _open(model)
    assert hub.farm.clock.now - start <= CLIENT_RETRIES  # one request: no backoff of ours on top
    assert "check the network connection" in str(info.value) and not hub.farm.uploads


def test_a_network_lost_during_a_session_is_reported_at_once(hub, model):  # noqa: F811
    sess = _open(model)
    hub.farm.go_offline("refused")
    start = hub.farm.clock.now
    with pytest.raises(BackendUnavailableError, match="while trying to"):
        sess.run(None, {"X": X})
    assert hub.farm.clock.now - start <= CLIENT_RETRIES


def test_service_errors_stay_transient(hub, model):  # noqa: F811
    sess = _open(model, max_wait=100)
    hub.farm.reject_next_submits(20, status=503)
    with pytest.raises(RemoteJobError, match="gave up after"):
        sess.run(None, {"X": np.ones((3, 2), np.float32)})
