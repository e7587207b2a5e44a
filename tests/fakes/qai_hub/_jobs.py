"""TEST DOUBLE of qai-hub 0.56's job objects (``qai_hub/client.py``, section "JOBS").

``Job.wait`` reproduces the real polling loop exactly, with the farm's clock instead of
``time.sleep``: poll every ``Job._polling_interval`` = 10 simulated seconds (1 s when the client is
verbose); ``timeout`` counts those sleeps and raises the builtin ``TimeoutError`` once elapsed >=
timeout (so ``wait(timeout=5)`` raises after 10 s); ``timeout=None`` or ``0`` never times out
client-side (the server fails over-long jobs instead). A terminal status is cached
(``Job.get_status``: ``_final_status``).
"""

from __future__ import annotations

from ._assets import Dataset, sim_datetime
from ._types import JobStatus, JobType

__all__ = ["Job", "CompileJob", "InferenceJob", "ProfileJob"]


class Job:
    """Mirrors ``client.Job`` (job_id, name, date, options, url, job_type, wait, get_status, set_name)."""

    _polling_interval: int = 10
    _job_type = JobType.UNSPECIFIED

    def __init__(self, owner, record) -> None:
        self._owner, self._record = owner, record
        self.job_id = record.job_id
        self.name = record.name
        self.date = sim_datetime(record.created)
        self.options = record.options
        self.verbose = owner.verbose
        self._final_status: JobStatus | None = None

    @property
    def url(self) -> str:
        """``Job.url`` = ``urljoin(web_url, "jobs/<job_id>/")``."""
        return self._owner._web_url("jobs", self.job_id)

    @property
    def job_type(self) -> str:
        """``Job.job_type``: ``"compile"`` / ``"inference"``."""
        return self._job_type.display_name

    def get_status(self) -> JobStatus:
        """``Job.get_status``: one API call; terminal statuses are cached.

        Raises:
            InternalError: injected poll failures (``farm.fail_next_polls``).
        """
        if self._final_status is not None:
            return self._final_status
        self._owner._api("get_job", job_id=self.job_id, poll=True)
        status = self._owner._farm.status(self._record)
        if status.finished:
            self._final_status = status
        return status

    def wait(self, timeout: int | None = None) -> JobStatus:
        """``Job.wait``: block (simulated time) until SUCCESS or FAILED; see the module docstring.

        Raises:
            TimeoutError: client-side timeout only ("Waiting for <type> job (<id>) completion timed
                out after <n> seconds.").
        """
        status = self.get_status()
        if status.running or status.pending:
            time_elapsed = 0
            sleep_seconds = Job._polling_interval if not self.verbose else 1
            while status.running or status.pending:
                if timeout and time_elapsed >= timeout:
                    raise TimeoutError(f"Waiting for {self.job_type} job ({self.job_id}) completion timed out"
                                       f" after {time_elapsed} seconds.")
                self._owner._farm.clock.sleep(sleep_seconds)
                time_elapsed += sleep_seconds
                if time_elapsed % Job._polling_interval == 0:
                    status = self.get_status()
        return status

    def set_name(self, job_name: str) -> None:
        """``Job.set_name``."""
        self._owner._api("set_job_name", job_id=self.job_id)
        self.name = self._record.name = job_name

    def __str__(self) -> str:
        return f"Job(job_id={self.job_id}, device={self._record.device})"


class CompileJob(Job):
    """Mirrors ``client.CompileJob``: ``device``, ``model``, ``shapes``; ``get_target_model()``,
    ``get_target_shapes(timeout)``, ``download_target_model(filename)``."""

    _job_type = JobType.COMPILE

    def __init__(self, owner, record, model, target_model) -> None:
        super().__init__(owner, record)
        self.device = record.device
        self.model = model
        self.shapes = dict(record.result.get("shapes", {}))
        self._target_model = target_model
        self._target_shapes = None

    def get_target_model(self):
        """``CompileJob.get_target_model``: the target ``Model`` (returned at once; its
        ``download``/``input_spec`` wait for the job)."""
        return self._target_model

    def get_target_shapes(self, timeout: int | None = None):
        """``CompileJob.get_target_shapes``: ``{name: (shape, dtype)}`` of the compiled inputs after
        success, ``None`` if the job failed (waits first)."""
        if self._target_shapes is None:
            status = self.wait(timeout)
            if not status.success:
                return None
            self._target_shapes = {t.name: (tuple(t.shape), t.dtype) for t in self._record.result["target"].inputs}
        return self._target_shapes

    def download_target_model(self, filename: str) -> str | None:
        """``CompileJob.download_target_model(filename)`` -> path (extension appended) or ``None``
        when there is no target model. Raises what ``Model.download`` raises."""
        target_model = self.get_target_model()
        return None if target_model is None else target_model.download(filename)

    def download_results(self, artifacts_dir: str):
        raise NotImplementedError("CompileJob.download_results is not modelled by the qai-hub test double")


class InferenceJob(Job):
    """Mirrors ``client.InferenceJob`` (``ProfileJob`` is the same class since 0.56): ``device``,
    ``model``, ``inputs`` (Dataset or None), ``shapes``, ``profiling``."""

    _job_type = JobType.INFERENCE

    def __init__(self, owner, record, model, dataset: Dataset | None) -> None:
        super().__init__(owner, record)
        self.device = record.device
        self.model = model
        self.inputs = dataset
        self.shapes: dict = {}
        self.outputs: Dataset | None = None
        self.profiling = bool(record.result.get("profiling"))

    def wait(self, timeout: int | None = None) -> JobStatus:
        """``InferenceJob.wait``: ``Job.wait`` then fills ``shapes`` from the job."""
        status = super().wait(timeout)
        if not self.shapes and "target" in self._record.result:
            self.shapes = {t.name: (tuple(t.shape), t.dtype) for t in self._record.result["target"].inputs}
        return status

    def get_output_dataset(self) -> Dataset | None:
        """``InferenceJob.get_output_dataset``: waits; the output ``Dataset`` if the job succeeded
        and had inputs, else ``None``."""
        if not self.outputs:
            status = self.wait()
            entries = self._record.result.get("outputs")
            if status.success and entries is not None:
                farm = self._owner._farm
                dataset_id = self._record.result.setdefault("output_dataset_id", farm.new_id("d"))
                farm.datasets.setdefault(dataset_id, entries)
                self.outputs = Dataset(self._owner, dataset_id, f"{self.name}_output", farm.clock.now, entries)
        return self.outputs

    def download_output_data(self, filename: str | None = None):
        """``InferenceJob.download_output_data()``: ``{output name: [one array per sample]}`` or
        ``None`` (job failed, or no inputs were given). Blocks until the job finishes."""
        dataset = self.get_output_dataset()
        return None if dataset is None else dataset.download(filename)

    def download_profile(self, filename: str | None = None):
        """``InferenceJob.download_profile()``: waits; the profile dict (``execution_summary``,
        ``execution_detail``) when the job succeeded with profiling, else ``{}``."""
        status = self.wait()
        profile = {}
        if status.success:
            self._owner._api("get_job_results", job_id=self.job_id)
            profile = self._record.result.get("profile") or {}
        if profile and filename is not None:
            raise NotImplementedError("the qai-hub test double does not write profile files")
        return profile

    def download_results(self, artifacts_dir: str):
        raise NotImplementedError("InferenceJob.download_results is not modelled by the qai-hub test double")


ProfileJob = InferenceJob
