"""An open ``aihub`` session: the ONNX model's metadata, runs as AI Hub inference jobs.

* ``run`` → one inference job with one sample; ``run_batch`` → one job per shape specialization
  (split when a dataset would exceed ``max_batch_bytes``) for any number of feeds.
* Datasets are ``{target input name: [one array per sample]}`` in the target's input order, each
  array in the compiled dtype and shape (qai-hub 0.56 ``submit_inference_job``; ``DatasetEntries``);
  ``download_output_data()`` returns ``{output name: [one array per sample]}``. Names, dtypes
  (int64 ↔ int32 with a range check) and shapes are mapped with the ``qai``/``snpe`` IO plans
  (:mod:`onnxwrapper.backends._foreign_io`), native mode only: AI Hub converts nothing.
* Profiles (latency, layers per compute unit) come from ``download_profile()`` of jobs submitted with
  ``profile=True``: batched runs by default, every run with ``backend_options={"profile": True}``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from onnxruntime.capi import onnxruntime_pybind11_state as C

from onnxwrapper.backends import _foreign_io as fio
from onnxwrapper.backends._foreign_session import OpenedMetadata
from onnxwrapper.backends.aihub._compile import CompiledTarget, TargetCompiler
from onnxwrapper.backends.aihub._jobs import HubCalls
from onnxwrapper.backends.aihub._profile import DeviceProfile
from onnxwrapper.errors import BackendCapabilityError, RemoteJobError
from onnxwrapper.kernel import check_output_names, validate_feed

__all__ = ["AihubSession"]


@dataclass
class _Spec:
    target: CompiledTarget
    inputs: fio.IoPlan
    outputs: fio.IoPlan
    profile: DeviceProfile | None = None


class AihubSession(OpenedMetadata):
    """A model compiled on AI Hub for one device; created by ``AihubBackend.open``.

    Args:
        calls: the session's :class:`HubCalls`. compiler: its :class:`TargetCompiler`.
        device: the AI Hub ``Device``. config: validated backend options.
        inputs / outputs / modelmeta / unknown: the ONNX model's IO (``onnx_io``).
        dynamic: names of inputs with dynamic dims. provider: the provider name reported.
        provider_options: what ``get_provider_options()`` reports. sess_options: reported back.
    """

    def __init__(self, *, calls: HubCalls, compiler: TargetCompiler, device, config: dict, inputs, outputs,
                 modelmeta, unknown, dynamic, provider: str, provider_options: dict, sess_options) -> None:
        super().__init__(inputs=inputs, outputs=outputs, modelmeta=modelmeta, providers=[provider],
                         provider_options={provider: provider_options}, sess_options=sess_options)
        self._calls, self._compiler, self._device, self._cfg = calls, compiler, device, config
        self._unknown, self._dynamic = set(unknown), tuple(dynamic)
        self._specs: OrderedDict[tuple, _Spec] = OrderedDict()
        self._latest: _Spec | None = None
        self._lock = threading.RLock()

    # -- specializations ------------------------------------------------------------------------------
    def prepare(self, shapes: dict | None = None) -> CompiledTarget:
        """Compile (or find in the cache) the target for ``shapes`` (``None``: the static model)."""
        return self._spec(shapes or {}).target

    def _spec(self, shapes: dict) -> _Spec:
        key = tuple(sorted(shapes.items()))
        with self._lock:
            spec = self._specs.get(key)
            if spec is None:
                target = self._compiler.compile(shapes or None)
                where = target.job_url or target.path
                plans = [fio.plan_io(args, natives, direction=d, mode="native", name_map=self._cfg["name_map"],
                                     where=where, unknown_shapes=self._unknown if d == "output" else frozenset())
                         for args, natives, d in ((self._inputs, target.inputs, "input"),
                                                  (self._outputs, target.outputs, "output"))]
                spec = self._specs[key] = _Spec(target, plans[0], plans[1])
            self._latest = spec
            return spec

    def _shapes(self, feed: dict) -> dict:
        return {n: tuple(int(d) for d in feed[n].shape) for n in self._dynamic}

    # -- runs -------------------------------------------------------------------------------------------
    def run(self, output_names, input_feed, run_options=None) -> list:
        """One inference job with this feed (validated by the façade); outputs in ONNX dtypes/shapes.

        Raises:
            InvalidArgument: dims the compiled target cannot take. RemoteJobError: the job failed,
            timed out or could not be created (job URL and message). BackendUnavailableError: the
            token was rejected.
        """
        self._check_terminate(run_options)
        profile = self._cfg["profile"] is True
        return self._run_group(self._spec(self._shapes(input_feed)), [input_feed], list(output_names), profile)[0]

    def run_batch(self, output_names, feeds, run_options=None) -> list[list]:
        """Run many feeds with as few jobs as possible: one inference job per shape specialization
        (split above ``max_batch_bytes``) instead of one per feed. ``aipc diff --replay`` calls it.

        Args:
            output_names: as for ``run`` (``None`` = all outputs in model order).
            feeds: a sequence of ``{input name: array}`` feeds, each checked as ``run`` checks it.
            run_options: ``onnxruntime.RunOptions`` or ``None``.

        Returns:
            One list of outputs per feed, in the order of ``feeds``.

        Raises:
            What ``run`` raises, for the first feed or job that fails (nothing is returned then).
        """
        self._check_terminate(run_options)
        names = check_output_names(output_names, self._outputs)
        clean = [validate_feed(self._inputs, feed, output_names, self._outputs) for feed in feeds]
        groups: OrderedDict[tuple, list[int]] = OrderedDict()
        for index, feed in enumerate(clean):
            groups.setdefault(tuple(sorted(self._shapes(feed).items())), []).append(index)
        results: list = [None] * len(clean)
        profile = self._cfg["profile"] in ("auto", True)
        for key, indices in groups.items():
            outputs = self._run_group(self._spec(dict(key)), [clean[i] for i in indices], names, profile)
            for index, out in zip(indices, outputs):
                results[index] = out
        return results

    def _check_terminate(self, run_options) -> None:
        if run_options is not None and getattr(run_options, "terminate", False):
            raise C.Fail("[ONNXRuntimeError] : 1 : FAIL : Exiting due to terminate flag being set to true.")

    def _run_group(self, spec: _Spec, feeds: list, names: list, profile: bool) -> list[list]:
        buffers = [[fio.to_native(p, np.asarray(feed[p.onnx.name]), "native") for p in spec.inputs.tensors]
                   for feed in feeds]
        per_sample = max(1, sum(b.nbytes for b in buffers[0]))
        step = max(1, self._cfg["max_batch_bytes"] // per_sample)
        wanted = [next(p for p in spec.outputs.tensors if p.onnx.name == n) for n in names]
        results = []
        for start in range(0, len(feeds), step):
            chunk = buffers[start:start + step]
            dataset = {}
            for plan_index, plan in sorted(enumerate(spec.inputs.tensors), key=lambda item: item[1].index):
                dataset[plan.native.name] = [sample[plan_index] for sample in chunk]
            data = self._inference(spec, dataset, len(chunk), profile)
            for k in range(len(chunk)):
                results.append([fio.from_native(p, self._output(data, p, k), "native", "aihub") for p in wanted])
        return results

    @staticmethod
    def _output(data: dict, plan, k: int):
        values = data.get(plan.native.name)
        if values is None or k >= len(values):
            raise RemoteJobError(f"[ONNXRuntimeError] : 11 : EP_FAIL : AI Hub returned no output "
                                 f"'{plan.native.name}' for sample {k} (outputs: {sorted(data)}).", backend="aihub")
        return values[k]

    def _inference(self, spec: _Spec, dataset: dict, samples: int, profile: bool) -> dict:
        calls, client = self._calls, self._calls.hub.client
        try:
            job = calls.call("create the inference job", client.submit_inference_job, spec.target.model, self._device,
                             inputs=dataset, name=self._compiler.label, options=self._cfg["inference_options"],
                             retry=False, profile=profile)
        except calls.hub.module.UserError as exc:
            raise calls.refused(exc, f"run {self._compiler.label}") from exc
        calls.finish(job, "inference")
        data = calls.call("download the outputs", job.download_output_data, quiet=True)
        if data is None:
            raise RemoteJobError(f"[ONNXRuntimeError] : 11 : EP_FAIL : AI Hub inference job {job.job_id} returned no "
                                 f"output data. See {job.url}", backend="aihub", job_id=job.job_id, job_url=job.url,
                                 job_kind="inference")
        if profile:
            self._record_profile(spec, job, samples)
        return data

    def _record_profile(self, spec: _Spec, job, samples: int) -> None:
        raw = self._calls.call("download the profile", job.download_profile, quiet=True)
        if raw:
            spec.profile = DeviceProfile.from_hub(raw, device=self._cfg["device"], job=job,
                                                  shapes=spec.target.shapes, samples=samples)

    # -- profiles ---------------------------------------------------------------------------------------
    def device_profile(self) -> DeviceProfile:
        """The device profile of the most recently run (or compiled) model: estimated latency per
        inference, peak memory, layers per compute unit and per-layer detail, as AI Hub measured it.
        When no profiled job ran for it yet, one profiling job with random inputs generated by AI
        Hub is submitted (nothing of yours is uploaded for it).

        Raises:
            BackendCapabilityError: a dynamic-shape model that has not run yet (no compiled shape).
            RemoteJobError: the profiling job failed.
        """
        with self._lock:
            spec = self._latest
            if spec is None:
                raise BackendCapabilityError("device_profile(): this model has dynamic input shapes and has not run "
                                             "yet, so nothing is compiled; call run() first.", backend="aihub")
            if spec.profile is None:
                calls = self._calls
                job = calls.call("create the profiling job", calls.hub.client.submit_inference_job, spec.target.model,
                                 self._device, inputs=None, name=self._compiler.label,
                                 options=self._cfg["inference_options"], retry=False, profile=True)
                calls.finish(job, "profile")
                self._record_profile(spec, job, 0)
            if spec.profile is None:
                raise RemoteJobError("[ONNXRuntimeError] : 11 : EP_FAIL : AI Hub returned an empty profile.",
                                     backend="aihub")
            return spec.profile

    def device_profiles(self) -> list[DeviceProfile]:
        """The profiles recorded so far, one per compiled shape that ran a profiled job (no job is
        submitted for this). ``aipc diff`` puts them in its reports."""
        with self._lock:
            return [s.profile for s in self._specs.values() if s.profile is not None]

    def close(self) -> None:
        """Forget the compiled shapes (their targets stay in the compile cache); idempotent."""
        with self._lock:
            self._closed = True
            self._specs.clear()
            self._latest = None
