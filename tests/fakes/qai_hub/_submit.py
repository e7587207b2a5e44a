"""TEST DOUBLE of qai-hub 0.56's job submission (``Client.submit_compile_job``,
``submit_inference_job``, ``submit_profile_job``, ``get_job``, ``_check_input_specs``,
``_check_data_entries``, ``_api_call_with_retry``).

Client-side checks run in the real order and raise the real classes. Job creation goes through
:meth:`SubmitMixin._create_job`, which mirrors the HTTP error mapping (``_raise_if_hub_user_error``,
``_handle_api_exception``) and, with ``retry=True``, the rate-limit loop of
``_api_call_with_retry``: sleep 20 s, doubling up to 60 s, give up with ``RateLimitedError`` once
more than ``RATE_LIMIT_RETRY_TIMEOUT`` (10 min) was spent. Transport-level retries of
``util/session.retry_call_with_backoff`` (7 tries, exponential backoff 0.75 s .. 10 s) are charged
to the clock as their maximum total (:data:`TRANSPORT_RETRY_SECONDS`) for 429/5xx answers.
"""

from __future__ import annotations

from ._assets import Dataset, visible_textbox
from ._compile import INFERENCE_FLAGS, CompileFailure, Target, compile_onnx, parse_options
from ._errors import RateLimitedError, UserError
from ._http import RETRIABLE as _RETRIABLE
from ._http import http_error
from ._execute import run_target, synth_profile
from ._farm import JobRecord
from ._jobs import CompileJob, InferenceJob
from ._types import (SUPPORTED_NUMPY_DTYPE_NAMES, TENSOR_DTYPES, Device, JobType, SourceModelType,
                     supported_array)

__all__ = ["SubmitMixin", "RATE_LIMIT_RETRY_TIMEOUT", "TRANSPORT_RETRY_SECONDS", "http_error"]

RATE_LIMIT_RETRY_TIMEOUT = 10  # minutes, client.RATE_LIMIT_RETRY_TIMEOUT
TRANSPORT_RETRY_SECONDS = 0.75 + 1.5 + 3.0 + 6.0 + 10.0 + 10.0  # session.BACKOFF_FACTOR, MAX_RETRIES=6, MAX_WAIT=10


class SubmitMixin:
    """Job submission half of the double's ``Client`` (see the module docstring)."""

    # -- client-side checks ---------------------------------------------------------------------
    @staticmethod
    def _check_input_specs(model_type: SourceModelType, input_specs) -> None:
        if model_type == SourceModelType.TORCHSCRIPT and input_specs is None:
            raise UserError("input_specs must be provided for TorchScript models.")
        if input_specs is None:
            return
        if not isinstance(input_specs, dict):
            raise UserError(f"input_specs must be dict[str, tuple[tuple[int, ...], str]]]. Got {input_specs}")
        for name, spec in input_specs.items():
            shape = spec[0] if isinstance(spec[0], tuple) else spec
            for dim in shape:
                assert isinstance(dim, int)  # the real client asserts (numpy ints fail)
                if dim < 1:
                    raise UserError(f"The shape of input '{name}' {shape} defines an empty tensor. Remove the input "
                                    f"or modify the input shape (all dim lengths should be > 0) and try again.")
        for spec in input_specs.values():  # api_utils.input_shapes_to_tensor_type_list_pb
            shape, dtype = (spec[0], spec[1]) if isinstance(spec[0], tuple) else (spec, "float32")
            assert isinstance(dtype, str)
            assert isinstance(shape, tuple)
            if dtype not in TENSOR_DTYPES:
                raise ValueError(f"Unsupported tensor dtype={dtype}. Supported dtypes: {list(TENSOR_DTYPES)}")

    def _check_data_entries(self, inputs) -> None:
        if isinstance(inputs, Dataset):
            if inputs.is_expired():
                raise UserError(f"Dataset {inputs.dataset_id} is expired.")
            return
        if isinstance(inputs, str):
            if not inputs.endswith(".h5"):
                raise UserError('Dataset file must have ".h5" extension.')
            return
        if not isinstance(inputs, dict):
            raise UserError("Dataset must be dict[str, list[np.ndarray]] where the ordered keys define the schema, "
                            "and the length of the list is the number of samples.")
        sizes = set()
        for value in inputs.values():
            if isinstance(value, list) and all(supported_array(a) for a in value):
                sizes.add(len(value))
            else:
                raise UserError(f"The values in inputs dictionary must be list of numpy arrays with a type in "
                                f"({SUPPORTED_NUMPY_DTYPE_NAMES}).")
        if len(sizes) > 1:
            raise UserError("Batchsize of all inputs must be the same.")

    # -- job creation ----------------------------------------------------------------------------
    def _create_once(self, kind: str) -> None:
        self._api(f"create_{kind}_job")
        rejection = self._farm.take_rejection()
        if rejection is not None:
            status, message = rejection
            if status in _RETRIABLE:
                self._farm.clock.advance(TRANSPORT_RETRY_SECONDS)
            raise http_error(status, message, self.config.api_url)

    def _create_job(self, kind: str, retry: bool) -> None:
        if not retry:
            return self._create_once(kind)
        try:
            return self._create_once(kind)
        except RateLimitedError as e:
            print(visible_textbox(f"{e} Retrying periodically until your request succeeds. Interrupt this and pass "
                                  f"retry=False if you don't want this automatic retry."))
            between, spent = 20, 0
            while True:
                print(f"Retrying after {between} seconds.")
                self._farm.clock.sleep(between)
                spent += between
                try:
                    return self._create_once(kind)
                except RateLimitedError:
                    if spent > RATE_LIMIT_RETRY_TIMEOUT * 60:
                        raise RateLimitedError(f"Could not create a job after retrying for {RATE_LIMIT_RETRY_TIMEOUT} "
                                               f"minutes. Please try again later.") from None
                    between = min(between * 2, 60)

    def _new_record(self, kind: str, name: str, options: str, device: Device, model_id: str,
                    profiling: bool = False, **logged) -> JobRecord:
        farm = self._farm
        plan, message = farm.take_plan(kind)
        record = JobRecord(farm.new_id("j"), kind, name, farm.clock.now, farm.schedule(kind, profiling),
                           options.strip(), device, model_id, plan="hang" if plan == "hang" else None)
        if plan == "fail":
            record.failure = message
        farm.jobs[record.job_id] = record
        farm.log_event(event="job", kind=kind, job_id=record.job_id, device=device.name, model_id=model_id,
                       options=record.options, plan=plan, **logged)
        return record

    # -- public submission API ---------------------------------------------------------------------
    def submit_compile_job(self, model, device, name=None, input_specs=None, options: str = "",
                           single_compile: bool = True, calibration_data=None, retry: bool = True, project=None):
        """``Client.submit_compile_job`` for ONNX models (``onnx.ModelProto``, ``.onnx`` path or
        directory); returns a :class:`CompileJob`. The compile outcome is decided at submission and
        revealed when the job's simulated time runs out (see :mod:`._compile` for what fails it).

        Raises:
            UserError / ValueError / AssertionError: what the real client raises for the same input.
            RateLimitedError, InternalError: injected service errors.
        """
        model_type = self._determine_model_type(model)
        if model_type not in (SourceModelType.ONNX, SourceModelType.TORCHSCRIPT, SourceModelType.AIMET_ONNX,
                              SourceModelType.TORCH_EXPORTED_PROGRAM, SourceModelType.QNN_CONTEXT_BINARY):
            raise UserError("Input model type cannot be compiled.")
        if model_type == SourceModelType.QNN_CONTEXT_BINARY and (options or input_specs):
            raise UserError("compile options and input_specs are not allowed when compiling ONNX embeddable models "
                            "(i.e. QNN Context Binary).")
        devices = self._check_devices(device, model_type, compile_job=True)
        if len(devices) != 1:
            raise NotImplementedError("the qai-hub test double models single-device compile jobs only")
        self._check_input_specs(model_type, input_specs)
        source = self._upload_model_if_needed(model, model_type)
        if calibration_data is not None:
            self._check_data_entries(calibration_data)
            self._upload_dataset(calibration_data)
        self._create_job("compile", retry)
        record = self._new_record("compile", name or source.name, options, devices[0], source.model_id,
                                  input_specs=input_specs)
        try:
            target = compile_onnx(self._farm.models[source.model_id].payload, devices[0].name, input_specs, options)
            record.result["target"] = target
            record.result["shapes"] = {t.name: (tuple(t.shape), t.dtype) for t in target.inputs}
        except CompileFailure as exc:
            target = None
            if record.failure is None:
                record.failure = str(exc)
        kind = "QNN_DLC" if target is not None and target.runtime == "qnn_dlc" else "QNN_CONTEXT_BINARY"
        target_model = self._store_model(target, kind, record.name, b"", producer=record.job_id)
        record.result["target_model_id"] = target_model.model_id
        if self.verbose:
            print(f"Scheduled compile job ({record.job_id}) successfully. To see the status and results:\n"
                  f"    {self._web_url('jobs', record.job_id)}\n")
        return CompileJob(self, record, source, target_model)

    def submit_inference_job(self, model, device, inputs=None, name=None, options: str = "", retry: bool = True,
                             profile: bool = True, project=None):
        """``Client.submit_inference_job`` (``profile`` defaults to True in 0.56). ``inputs`` is
        ``{name: [arrays]}``, a ``Dataset`` or ``None`` (random data, only with ``profile=True``,
        and then no output dataset). Returns one :class:`InferenceJob` per device (a single job for
        a single device).

        Raises:
            UserError: no inputs without profiling, uncompiled model type, device without the
                model's framework, bad dataset; RateLimitedError / InternalError: injected.
        """
        if inputs is None and not profile:
            raise UserError("Inference requires inputs. Either supply `inputs`, or set `profile=True` to run with "
                            "random data.")
        model_type = self._determine_model_type(model)
        if model_type in (SourceModelType.TORCHSCRIPT, SourceModelType.TORCH_EXPORTED_PROGRAM,
                          SourceModelType.AIMET_ONNX):
            raise UserError("Inference cannot be run on the supplied model type until is has been compiled.")
        devices = self._check_devices(device, model_type)
        hub_model = self._upload_model_if_needed(model, model_type)
        dataset = None
        if inputs is not None:
            self._check_data_entries(inputs)
            dataset = self._upload_dataset(inputs)
        jobs = []
        for dev in devices:
            self._create_job("inference", retry)
            entries = dataset._entries if dataset is not None else {}
            record = self._new_record("inference", name or hub_model.name, options, dev, hub_model.model_id, profile,
                                      samples=len(next(iter(entries.values()))) if entries else 0,
                                      shapes={k: list(v[0].shape) for k, v in entries.items() if v}, profile=profile)
            record.result["profiling"] = profile
            self._run(record, hub_model, dataset, dev, profile)
            jobs.append(InferenceJob(self, record, hub_model, dataset))
            if self.verbose:
                print(f"Scheduled inference job ({record.job_id}) successfully. To see the status and results:\n"
                      f"    {self._web_url('jobs', record.job_id)}\n")
        return jobs[0] if len(jobs) == 1 else jobs

    def _run(self, record, hub_model, dataset, device: Device, profile: bool) -> None:
        stored = self._farm.models[hub_model.model_id]
        try:
            opts = parse_options(record.options, INFERENCE_FLAGS)
            producer = self._farm.jobs.get(stored.producer) if stored.producer else None
            if producer is not None and (producer.failure is not None or producer.plan == "hang"):
                raise CompileFailure(f"Model {stored.model_id} is not available: its compile job did not succeed.")
            target = stored.payload
            if not isinstance(target, Target):
                raise CompileFailure("Could not load the model on the device (the test double runs only targets "
                                     "compiled by its own compile jobs).")
            record.result["target"] = target
            built_for = {d.name: d for d in self._farm.devices}.get(target.device)
            chips = [{a for a in d.attributes if a.startswith("chipset:")} for d in (built_for, device) if d]
            if len(chips) == 2 and chips[0] != chips[1]:
                raise CompileFailure(f"The context binary was compiled for '{target.device}' and cannot run on "
                                     f"'{device.name}' (another chipset).")
            if dataset is not None:
                record.result["outputs"] = run_target(target, dataset._entries, self._farm.output_hook)
            if profile:
                samples = len(next(iter(dataset._entries.values()))) if dataset is not None else 1
                iterations = int(opts.get("max_profiler_iterations", 100)) // max(1, samples)
                record.result["profile"] = synth_profile(target, self._farm.cpu_op_types, self._farm.layer_time_us,
                                                         iterations)
        except CompileFailure as exc:
            if record.failure is None:
                record.failure = str(exc)

    def submit_profile_job(self, model, device, name=None, options: str = "", retry: bool = True, project=None):
        """``Client.submit_profile_job``: deprecated in 0.56 (prints a warning), returns
        ``submit_inference_job(model, device, inputs=None, profile=True, ...)``."""
        print("\033[31m\n===WARNING===\n\nsubmit_profile_job is deprecated and will be removed in a future release. "
              "Use submit_inference_job(..., profile=True) going forward. submit_profile_job now returns an "
              "InferenceJob.\n\n===WARNING===\n\033[0m")
        return self.submit_inference_job(model, device, inputs=None, name=name, options=options, retry=retry,
                                         profile=True, project=project)

    def get_job(self, job_id: str, job_type: JobType | None = None):
        """``Client.get_job``; ``job_type`` mismatch raises ``ValueError``, an unknown id ``UserError``."""
        self._api("get_job", job_id=job_id)
        record = self._farm.jobs.get(job_id)
        if record is None:
            raise UserError(f"ID '{job_id}' could not be found. It may not exist or you may not have permission "
                            f"to view it.")
        source = self.get_model(record.model_id)
        if record.kind == "compile":
            job = CompileJob(self, record, source, self.get_model(record.result["target_model_id"]))
        else:
            inputs = None
            job = InferenceJob(self, record, source, inputs)
        if job_type and job._job_type != job_type:
            raise ValueError(f"Requested job of type {job_type.display_name}, but got job of type "
                             f"{job._job_type.display_name}")
        return job
