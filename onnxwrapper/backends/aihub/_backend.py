"""The ``aihub`` backend class: options, probe, the client seam, ``open``.

``open`` (each step can raise; nothing leaves the machine before step 4):

1. the client (:meth:`AihubBackend.load_client`) and its configuration (a token, read offline);
2. the model argument → :class:`~onnxwrapper.kernel.ModelSource` + ``onnx.ModelProto`` (ORT's
   exception classes and messages for bad input), its IO as ORT reports it;
3. ``get_devices(name=device, os=device_os)`` — the first network request; an unknown name is a
   :class:`~onnxwrapper.errors.BackendOptionError` listing the closest AI Hub device names;
4. static model: compile now (upload + compile job, or the compile cache); dynamic model: each
   feed shape is compiled at its first run (:mod:`onnxwrapper.backends.aihub._compile`).
"""

from __future__ import annotations

import difflib
from typing import Any, Mapping

from onnxwrapper.backends import _foreign_io as fio
from onnxwrapper.backends.aihub._client import (CONFIGURE_HINT, HubClient, configuration_problem, load_qai_hub,
                                                version_note)
from onnxwrapper.backends.aihub._compile import TargetCompiler
from onnxwrapper.backends.aihub._jobs import HubCalls
from onnxwrapper.backends.aihub._options import OPTIONS
from onnxwrapper.backends.aihub._session import AihubSession
from onnxwrapper.backends.base import Availability, Backend, SessionRequest
from onnxwrapper.errors import BackendOptionError, BackendUnavailableError
from onnxwrapper.kernel import ModelSource, dynamic_inputs

__all__ = ["AihubBackend"]


class AihubBackend(Backend):
    """Models compiled and run on a real Snapdragon device of Qualcomm AI Hub's device farm.

    Selected only by name (``backend="aihub"``, ``ONNXWRAPPER_BACKEND=aihub``, ``aipc diff --backends
    …,aihub``); ``auto`` never picks it. The model and every input tensor are uploaded to AI Hub.

    Options (``backend_options``; see :data:`~onnxwrapper.backends.aihub._options.OPTIONS`):
        device (required), device_os, target_runtime, compile_options, inference_options, profile,
        job_timeout, max_wait, poll_interval, max_batch_bytes, cache_dir, name_map.

    Raises:
        BackendOptionError: unknown option (closest valid one suggested), invalid value, no device.
    """

    name = "aihub"
    aliases = ("ai-hub", "qai-hub", "qai_hub")
    execution_providers = ()
    npu = True
    options = OPTIONS

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`Backend.validate_options`; ``device`` (or its alias ``target``) is required."""
        config = super().validate_options(options)
        if config["target"] is not None:
            if config["device"] not in (None, config["target"]):
                raise BackendOptionError(f"Options 'device' ({config['device']!r}) and 'target' ({config['target']!r}) "
                                         f"name two devices; 'target' is an alias of 'device': give one.",
                                         backend="aihub")
            config["device"] = config["target"]
        if config["device"] is None:
            raise BackendOptionError(
                "Backend 'aihub' needs the AI Hub device to run on: backend_options={'device': 'Samsung Galaxy S25'} "
                "(names as `qai-hub list-devices` prints them; aipc: --backend-option aihub:device=...).",
                backend="aihub")
        return config

    @classmethod
    def load_client(cls) -> HubClient:
        """The qai-hub client this backend drives: the injection seam of this backend.

        The default imports ``qai_hub`` and creates a ``qai_hub.Client()`` of its own, waiting with
        the system clock. Override it in a subclass to bind another implementation of the same API
        (a client with another configuration, or an emulation of the service that runs models
        locally in simulated time, with its clock) and register that subclass as the ``aihub``
        backend through the entry-point group ``onnxwrapper.backends``.

        Raises:
            BackendUnavailableError: qai-hub is not installed or too old (with the install hint).
        """
        return load_qai_hub()

    @classmethod
    def probe(cls) -> Availability:
        """Available when qai-hub is installed and an API token is configured (checked offline: no
        request is sent). Never auto-selected (``auto_selectable=False``)."""
        try:
            hub = cls.load_client()
        except BackendUnavailableError as exc:
            return Availability(False, reason=exc.reason, install_hint=exc.install_hint)
        problem = configuration_problem(hub)
        if problem:
            return Availability(False, reason=f"no Qualcomm AI Hub API token is configured for qai-hub "
                                              f"{hub.version}: {problem}", install_hint=CONFIGURE_HINT)
        return Availability(True, reason=f"qai-hub {hub.version}{version_note(hub.version)}: Qualcomm AI Hub's "
                                         f"device farm; uploads the model and its inputs, selected only with "
                                         f"backend='aihub'",
                            real_npu=True, auto_selectable=False, details={"qai_hub": hub.version})

    def open(self, request: SessionRequest) -> AihubSession:
        """Check the model and the device, then compile a static model (see the module docstring).

        Raises:
            NoSuchFile / InvalidProtobuf / TypeError: as ORT, for a bad model argument.
            BackendUnavailableError: no token configured, or the token was rejected.
            BackendOptionError: the device is unknown to AI Hub (closest names listed).
            RemoteJobError: a request or the compile job failed or timed out (job URL and message).
            ArtifactError: the compiled model's IO does not match the ONNX model.
        """
        cfg = self.config
        hub = self.load_client()
        problem = configuration_problem(hub)
        if problem:
            raise BackendUnavailableError(f"Backend 'aihub' has no Qualcomm AI Hub API token: {problem}. To fix: "
                                          f"{CONFIGURE_HINT}.", backend="aihub", reason=problem,
                                          install_hint=CONFIGURE_HINT)
        hub.client.set_verbose(False)  # no progress bars or "Scheduled … job" lines on stdout
        source = ModelSource.from_arg(request.path_or_bytes)
        proto = source.load_proto()
        inputs, outputs, meta, unknown = fio.onnx_io(proto)
        dynamic = list(dynamic_inputs(proto))
        calls = HubCalls(hub, device=cfg["device"], job_timeout=cfg["job_timeout"], max_wait=cfg["max_wait"],
                         poll_interval=cfg["poll_interval"])
        device = self._device(hub, calls)
        label = source.stem or "model"
        compiler = TargetCompiler(calls=calls, device=device, config=cfg, source=source, proto=proto, inputs=inputs,
                                  outputs=outputs, label=label)
        kind = "QNNDlc" if cfg["target_runtime"] == "qnn_dlc" else "QNNContextBinary"
        provider = f"{kind}(aihub:{cfg['device']})"
        options = {"device": cfg["device"], "device_os": cfg["device_os"] or "latest",
                   "target_runtime": cfg["target_runtime"], "compile_options": compiler.options,
                   "inference_options": cfg["inference_options"], "qai_hub": hub.version}
        session = AihubSession(calls=calls, compiler=compiler, device=device, config=cfg, inputs=inputs,
                               outputs=outputs, modelmeta=meta, unknown=unknown, dynamic=dynamic, provider=provider,
                               provider_options=options, sess_options=request.sess_options)
        if not dynamic:
            session.prepare()  # compile on session creation; dynamic models compile per feed shape at run
        return session

    def _device(self, hub: HubClient, calls: HubCalls):
        """The AI Hub ``Device`` for the ``device``/``device_os`` options (one request).

        Raises:
            BackendOptionError: no such device (the closest names are listed).
        """
        cfg = self.config
        user_error = hub.module.UserError
        try:
            found = calls.call("list devices", hub.client.get_devices, name=cfg["device"], os=cfg["device_os"])
        except (user_error, ValueError) as exc:
            raise BackendOptionError(f"AI Hub rejected device '{cfg['device']}' (device_os={cfg['device_os']!r}): "
                                     f"{exc}", backend="aihub") from exc
        if found:
            return hub.module.Device(cfg["device"], cfg["device_os"])
        names = sorted({d.name for d in calls.call("list devices", hub.client.get_devices)})
        close = difflib.get_close_matches(cfg["device"], names, n=5, cutoff=0.4)
        os_note = f" with OS {cfg['device_os']!r}" if cfg["device_os"] else ""
        raise BackendOptionError(
            f"AI Hub has no device named '{cfg['device']}'{os_note}. Device names must match exactly"
            f"{'; closest: ' + ', '.join(repr(n) for n in close) if close else ''}. `qai-hub list-devices` lists "
            f"all {len(names)} of them.", backend="aihub")
