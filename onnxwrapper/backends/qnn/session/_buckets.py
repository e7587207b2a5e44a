"""Which compiled size serves a call of a dynamic-shape session: its shape, or a certified bucket.

:class:`BucketRouter` is consulted by :class:`~onnxwrapper.backends.qnn.session._session.QnnDynamicSession`
for every new kind of call (once per call key; later calls of the key reuse the decision):

1. the call's dim-group sizes are solved from its input shapes
   (:meth:`~onnxwrapper.backends.qnn.model.DimGroups.solve`; a call that does not fit runs at its shape);
2. a group is *growing* once the session has seen it at two sizes, or when an earlier session of
   this model certified a rule for it (kept in the compile cache);
3. a growing group whose size is not on the ladder (:func:`~onnxwrapper.backends.qnn.model.bucket_size`)
   gets its padding rule, found once per model on ORT's CPU with this call's inputs
   (:func:`~onnxwrapper.backends.qnn.session._certify.discover_rule`), or is refused for good (the
   reason is logged on ``onnxwrapper.qnn`` at INFO, i.e. under ``aipc -v``);
4. before a bucket serves its first call, the padded call is certified against the unpadded one on
   ORT's CPU (:func:`~onnxwrapper.backends.qnn.session._certify.certify`); certificates are cached per
   model, bucket and padded groups (with ``strict``: per exact shape as well: every new size is
   certified). A bucket that fails its certificate is not used; the call runs at its own shape.

The CPU runs use ORT's CPU session of the original model the session already keeps for feeds with a
size-0 dim. :meth:`BucketRouter.stats` feeds the session's partition report: the compiled sizes, the
calls and distinct shapes each served, and the compiles saved.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from onnxwrapper.backends.qnn.compile import CompileMemo
from onnxwrapper.backends.qnn.model import DimGroups, GroupRule, Linear, Padding, bucket_size, inferred_merges
from onnxwrapper.backends.qnn.session._certify import certify, discover_rule
from onnxwrapper.kernel import shapes_note

__all__ = ["BUCKETS_FORMAT", "BucketRouter", "as_array", "as_ort_value"]

_log = logging.getLogger("onnxwrapper.qnn")

#: part of every bucket memo key: bump when rules or certificates are computed differently
BUCKETS_FORMAT = 1


class BucketRouter:
    """Decides, per kind of call, whether it runs padded into a bucket (module docstring).

    Args:
        groups: the model's ``DimGroups`` by name. model / dynamic: the ``onnx.ModelProto`` and its
            dynamic inputs, to refine the groups with ORT's symbolic shape inference at the first call
            when they may be related (:attr:`~onnxwrapper.backends.qnn.model.DimGroups.needs_inference`;
            the merges are kept in the compile cache); ``None``: the groups as given. cache: the compile cache (``ArtifactCache``) the
            rules and certificates are kept in, or ``None`` (kept in memory only).
        model_hash: the model identity of the session's cache keys. strict: certify every new size.
        label: the model's name in log lines.
    """

    def __init__(self, groups, *, cache, model_hash: str, strict: bool, label: str, model=None,
                 dynamic=None) -> None:
        self.groups, self.cache, self.model_hash = groups, cache, model_hash
        self._model, self._dynamic = (model, dynamic) if groups.needs_inference else (None, None)
        self.strict, self.label = strict, label
        self._seen: dict[str, set] = {g: set() for g in groups.groups}
        self._rules: dict[str, GroupRule | str] = {}
        self._certified: dict[tuple, str | None] = {}
        self._usage: dict[tuple, dict] = {}  # run shapes → {"calls": n, "shapes": {exact shapes}}

    # -- persistence -------------------------------------------------------------------------------
    def _memo(self, kind: str, **material) -> CompileMemo | None:
        if self.cache is None:
            return None
        return CompileMemo(self.cache, {f"qnn-bucket-{kind}": self.model_hash, "format": BUCKETS_FORMAT,
                                        "groups": self.groups.describe(), **material}, kind)

    def _known_rule(self, group: str) -> GroupRule | str | None:
        if group in self._rules:
            return self._rules[group]
        memo = self._memo("rule", group=group)
        data = memo.known() if memo is not None else None
        if isinstance(data, dict):
            try:
                self._rules[group] = GroupRule.from_dict(data) if "refused" not in data else str(data["refused"])
            except (KeyError, TypeError, ValueError):  # a damaged memo: found again
                return None
            return self._rules[group]
        return None

    def _remember_rule(self, group: str, rule: GroupRule | str) -> None:
        self._rules[group] = rule
        memo = self._memo("rule", group=group)
        if memo is not None:
            memo.remember(rule.to_dict() if isinstance(rule, GroupRule) else {"refused": rule})

    def _refine(self) -> None:
        """Group the dims through ORT's symbolic shape inference, once (the merges kept in the cache)."""
        model, dynamic, self._model, self._dynamic = self._model, self._dynamic, None, None
        memo = self._memo("merges")
        known = memo.known() if memo is not None else None
        try:
            merges = {str(k): Linear(tuple((str(n), int(c)) for n, c in v[0]), int(v[1])) for k, v in known.items()} \
                if isinstance(known, dict) else None
        except (TypeError, ValueError, IndexError):
            merges = None
        if merges is None:
            merges = inferred_merges(model)
            if memo is not None:
                memo.remember({k: [[list(t) for t in v.terms], v.constant] for k, v in merges.items()})
        if merges:
            self.groups = DimGroups.of(model, dynamic, merges=merges)
            self._seen = {g: set() for g in self.groups.groups}

    # -- routing -----------------------------------------------------------------------------------
    def _growing(self, group: str) -> bool:
        return len(self._seen[group]) > 1 or isinstance(self._known_rule(group), GroupRule)

    def route(self, shapes: Mapping[str, tuple], feed: Mapping[str, Any], cpu_session: Callable[[], Any]
              ) -> Padding | None:
        """The :class:`~onnxwrapper.backends.qnn.model.Padding` a call with dynamic-input ``shapes`` and
        ``feed`` (numpy arrays) runs with, or ``None`` to run it at its own shapes. ``cpu_session()``
        gives ORT's CPU session of the original model, for the certifying runs."""
        session = None

        def run(data):
            nonlocal session
            session = session or cpu_session()
            return session.run(None, dict(data))

        def names():
            nonlocal session
            session = session or cpu_session()
            return [o.name for o in session.get_outputs()]

        if self._model is not None:
            self._refine()
        sizes = self.groups.solve(shapes)
        if sizes is None:
            return None
        for group, size in sizes.items():
            self._seen.setdefault(group, set()).add(size)
        targets, rules = dict(sizes), {}
        reference = None
        for group, size in sorted(sizes.items()):
            if bucket_size(size) == size or not self._growing(group):
                continue
            rule = self._known_rule(group)
            if rule is None:
                reference = reference if reference is not None else run(feed)
                rule = discover_rule(run, names(), feed, reference, self.groups, sizes, group)
                self._remember_rule(group, rule)
                if isinstance(rule, GroupRule):
                    _log.info("onnxwrapper qnn: shape buckets for %s: dim group '%s' padded %s with %s up to powers "
                              "of two (certified on ORT's CPU with this call's inputs)", self.label, group,
                              "in front" if rule.side == "left" else "at the end", rule.fill)
                else:
                    _log.info("onnxwrapper qnn: no shape buckets for dim group '%s' of %s: one specialization per "
                              "size (padding changes the answer on ORT's CPU: %s)", group, self.label, rule)
            if isinstance(rule, GroupRule):
                targets[group], rules[group] = bucket_size(size), rule
        if not rules:
            return None
        padding = Padding(self.groups, sizes, targets, rules)
        run_shapes = padding.shapes(shapes)
        key = (tuple(sorted(run_shapes.items())), padding.padded) + ((tuple(sorted(shapes.items())),)
                                                                        if self.strict else ())
        if key not in self._certified:
            self._certified[key] = self._certificate(key, feed, padding, reference, shapes, run_shapes, run, names)
        return padding if self._certified[key] is None else None

    def _certificate(self, key: tuple, feed, padding: Padding, reference, shapes, run_shapes, run, names
                     ) -> str | None:
        memo = self._memo("certificate", key=repr(key))
        known = memo.known() if memo is not None else None
        if isinstance(known, dict) and ("ok" in known or "refused" in known):
            return None if known.get("ok") is True else str(known.get("refused"))
        reference = reference if reference is not None else run(feed)
        why = certify(run, names(), feed, reference, padding)
        if why is not None:
            _log.info("onnxwrapper qnn: shape bucket %s of %s not used for %s: %s", shapes_note(run_shapes),
                      self.label, shapes_note(shapes), why)
        if memo is not None:
            memo.remember({"ok": True} if why is None else {"refused": why})
        return why

    # -- statistics --------------------------------------------------------------------------------
    def served(self, run_shapes: Mapping[str, tuple], shapes: Mapping[str, tuple]) -> dict:
        """Count a new kind of call (exact ``shapes``) served at ``run_shapes``; returns the usage record
        whose ``"calls"`` the run plan increments per call."""
        record = self._usage.setdefault(tuple(sorted(run_shapes.items())), {"calls": 0, "shapes": set()})
        record["shapes"].add(tuple(sorted(shapes.items())))
        return record

    def stats(self) -> tuple[dict, ...]:
        """Per compiled size used so far: ``{"shapes": text, "calls": n, "distinct_shapes": k}``,
        plus the compiles saved (distinct shapes served minus sizes compiled) in the last entry's
        ``"saved"``; ``()`` when no call was padded."""
        if not any(shape != key for key, r in self._usage.items() for shape in r["shapes"]):
            return ()
        rows = [{"shapes": shapes_note(dict(k)), "calls": r["calls"], "distinct_shapes": len(r["shapes"])}
                for k, r in self._usage.items()]
        saved = sum(row["distinct_shapes"] for row in rows) - len(rows)
        return tuple(dict(row, saved=saved) if i == len(rows) - 1 else row for i, row in enumerate(rows))

    def rules(self) -> dict[str, str]:
        """``{group: "right/zeros" | "refused: …"}`` for the groups decided so far."""
        return {g: f"{r.side}/{r.fill}" if isinstance(r, GroupRule) else f"refused: {r}" for g, r in self._rules.items()}


def as_array(value):
    """A numpy view of a feed value (an ``OrtValue`` on the CPU is read into numpy), to pad it."""
    if hasattr(value, "numpy") and hasattr(value, "_get_c_value"):
        return value.numpy()
    return value


def as_ort_value(array):
    """An ``OrtValue`` holding the numpy ``array`` (a cut output of a padded ``run_with_ort_values``)."""
    from onnxruntime import OrtValue  # imported here: only padded run_with_ort_values calls need it

    return OrtValue.ortvalue_from_numpy(array)
