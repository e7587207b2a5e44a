"""TEST DOUBLE of qai-hub 0.56's ``Model`` and ``Dataset`` (``qai_hub/client.py``, sections
"MODELS" and "DATASET"), plus the message helpers the real client uses for errors."""

from __future__ import annotations

import copy
import os
import textwrap
from datetime import datetime, timedelta

from ._compile import Target, write_target
from ._errors import UserError
from ._types import SourceModelType

__all__ = ["Model", "Dataset", "visible_textbox", "SUPPORT_EMAIL"]

SUPPORT_EMAIL = "ai-hub-support@qti.qualcomm.com"
_EPOCH = datetime(2026, 1, 1)


def visible_textbox(text: str) -> str:
    """``client._visible_textbox``: the boxed call-to-action text the real errors embed."""
    width = 70
    text = textwrap.dedent(text).strip()
    lines = ["| " + line.ljust(width - 4) + " |" for line in textwrap.TextWrapper(width=width - 4).wrap(text)]
    return "\n┌" + "─" * (width - 2) + "┐\n" + "\n".join(lines) + "\n└" + "─" * (width - 2) + "┘"


def sim_datetime(seconds: float) -> datetime:
    """Simulated wall time for dates (``Model.date``, ``Job.date``)."""
    return _EPOCH + timedelta(seconds=seconds)


class Model:
    """Mirrors ``client.Model``: ``model_id``, ``date``, ``model_type``, ``name``; ``input_spec`` /
    ``output_spec`` (``{None: [TensorSpec]}``) wait for the producing job (``_populate_produced_fields``).
    Built by the double's client only."""

    def __init__(self, owner, stored) -> None:
        self._owner, self._stored = owner, stored
        self.model_id = stored.model_id
        self.name = stored.name
        self.date = sim_datetime(stored.created)
        self.model_type = SourceModelType[stored.kind]
        self.verbose = owner.verbose
        self._producer_id = stored.producer

    def _target(self):
        payload = self._stored.payload
        return payload if isinstance(payload, Target) else None

    def _spec(self, which: str) -> dict:
        self.wait()
        target = self._target()
        if target is None:
            return {}
        return {None: list(target.inputs if which == "in" else target.outputs)}

    @property
    def input_spec(self) -> dict:
        """``Model.input_spec``: ``{None: [TensorSpec(name, dtype, shape, scale, zero_point)]}``."""
        return self._spec("in")

    @property
    def output_spec(self) -> dict:
        """``Model.output_spec``; same structure as :attr:`input_spec`."""
        return self._spec("out")

    @property
    def url(self) -> str:
        """``Model.url`` = ``urljoin(web_url, "models/<id>/")``."""
        return self._owner._web_url("models", self.model_id)

    def get_producer(self):
        """``Model.get_producer``: the job that produced this model, or ``None`` for uploads."""
        return self._owner.get_job(self._producer_id) if self._producer_id else None

    def wait(self, timeout: int | None = None) -> bool:
        """``Model.wait``: True if the model has no producer or its producer succeeded."""
        producer = self.get_producer()
        return True if producer is None else producer.wait(timeout).success

    def download(self, filename: str, timeout: int | None = None) -> str:
        """``Model.download``: waits for the producer, writes the file, prints "Downloaded model to
        <path>" (unconditionally, as the real client) and returns the path. A missing extension is
        appended (``api_utils._verify_download_path``); a directory gets ``<model_id><ext>``.

        Raises:
            UserError: the producing job failed (the double's stand-in for the server's 404).
            ValueError: the parent directory does not exist.
        """
        self.wait(timeout)
        self._owner._api("download_model", model_id=self.model_id)
        target = self._target()
        producer = self.get_producer()
        if producer is not None and not producer.get_status().success:
            raise UserError(f"Model ID '{self.model_id}' could not be found. It may not exist or you may not "
                            f"have permission to view it.")
        ext = ".bin" if self.model_type == SourceModelType.QNN_CONTEXT_BINARY else ".dlc" \
            if self.model_type == SourceModelType.QNN_DLC else ".onnx"
        path = os.path.expanduser(filename)
        if os.path.isdir(path):
            path = os.path.join(path, self.model_id + ext)
        elif not path.endswith(ext):
            path += ext
        parent = os.path.dirname(path)
        if parent and not os.path.exists(parent):
            raise ValueError(f"Download directory '{parent}' does not exist.")
        data = write_target(target) if target is not None else self._stored.payload.SerializeToString()
        with open(path, "wb") as f:
            f.write(data)
        print(f"Downloaded model to {path}")
        return path

    def __str__(self) -> str:
        return f"Model(model_id='{self.model_id}', name='{self.name}')"


class Dataset:
    """Mirrors ``client.Dataset``: ``dataset_id``, ``name``, ``creation_time``, ``expiration_time``
    (30 days after upload, ``upload_dataset`` docstring); ``download()`` returns the entries."""

    def __init__(self, owner, dataset_id: str, name: str, created: float, entries) -> None:
        self._owner, self._entries = owner, entries
        self.dataset_id, self.name = dataset_id, name
        self.creation_time = sim_datetime(created)
        self.expiration_time = sim_datetime(created + 30 * 24 * 3600)

    def is_expired(self) -> bool:
        """``Dataset.is_expired`` against the double's simulated clock."""
        return sim_datetime(self._owner._farm.clock.now) > self.expiration_time

    def download(self, filename: str | None = None):
        """``Dataset.download()``: ``{name: [arrays]}`` (copies, as the real client re-reads its h5
        file). The double does not write h5 files: ``filename`` raises ``NotImplementedError``.

        Raises:
            UserError: the dataset expired.
        """
        if self.is_expired():
            raise UserError(f"Cannot download expired dataset. {self}")
        if filename is not None:
            raise NotImplementedError("the qai-hub test double does not write h5 files; call download() "
                                      "without a filename")
        self._owner._api("download_dataset", dataset_id=self.dataset_id)
        return {k: [copy.deepcopy(a) for a in v] for k, v in self._entries.items()}

    def __str__(self) -> str:
        return f"Dataset(id='{self.dataset_id}', name='{self.name}', expiration_time='{self.expiration_time}')"
