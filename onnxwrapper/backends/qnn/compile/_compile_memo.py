"""What the compile cache remembers of a compile that gave no compiled model: a meta-only cache entry
(no files) keyed next to the compile's own key, so that a later session does not pay for the same
failure again.

One mechanism, three facts (the key material names which):

* ``{"qnn-took-no-node": key, "patches": …}`` → ``"partition"``: the QNN EP took no node of the
  model (the no-node verdict; the session runs on ORT's CPU EP);
* ``{"qnn-recovery": key}`` → ``"recovery"``: the compile as given failed and the recovery ladder
  found the rung recorded here (replayed instead of failing again);
* ``{"failed-patched-compile": key}`` → ``"error"``: the operator-patched model failed to compile
  (the unpatched one is used).

Reading and writing are best effort: an unreadable or read-only cache costs the compile attempt
again, never an error.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel import make_key

__all__ = ["CompileMemo"]

_log = logging.getLogger("onnxwrapper.qnn")


class CompileMemo:
    """One remembered fact about a compile (see the module docstring).

    Args:
        cache: the :class:`~onnxwrapper.kernel.ArtifactCache`.
        material: the key material, e.g. ``{"qnn-recovery": compile_key}`` (hashed with
            :func:`~onnxwrapper.kernel.make_key`).
        field: the meta field holding the fact (``"partition"``, ``"recovery"``, ``"error"``).
        unless_entry: the compile's own cache key: while that entry exists (a cache hit, the usual
            case) :meth:`known` answers ``None`` after one ``stat``, without reading the memo.
    """

    def __init__(self, cache, material: Mapping[str, Any], field: str, *, unless_entry: str | None = None) -> None:
        self.cache, self.field, self.unless_entry = cache, field, unless_entry
        self.key = make_key(dict(material))

    def known(self) -> Any:
        """The remembered value, or ``None`` (nothing remembered, the compile's entry exists, or the
        cache cannot be read). Read without the entry's lock first (a whole entry or none: entries
        appear by one rename), so a process that only reads a memo imports no file-lock layer
        (≈ 20 ms of a new process, measured); anything off takes the locked path, which reports and
        repairs."""
        if self.unless_entry is not None and os.path.isdir(self.cache.entry_dir(self.unless_entry)):
            return None
        if not os.path.isdir(self.cache.entry_dir(self.key)):
            return None
        try:
            entry = self.cache.peek(self.key) or self.cache.lookup(self.key)
        except (ArtifactError, OSError) as exc:
            _log.debug("onnxwrapper qnn: compile memo %s not readable (%s)", self.field, exc)
            return None
        return None if entry is None else entry.meta.get(self.field)

    def remember(self, value: Any) -> None:
        """Record ``value`` (JSON-ready; best effort: a read-only cache only costs the attempt next time)."""
        try:
            self.cache.get_or_create(self.key, lambda _directory: {self.field: value})
        except (ArtifactError, OSError) as exc:
            _log.debug("onnxwrapper qnn: compile memo %s not cached (%s)", self.field, exc)
