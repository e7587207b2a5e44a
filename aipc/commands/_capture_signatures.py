"""What ``aipc compile --from-capture`` compiles: per model of a capture, its distinct signatures.

A QNN session of a model with dynamic input dims (or control inputs) compiles one specialization
per *signature* — the shapes of its dynamic inputs plus the values of its control inputs
(:func:`onnxwrapper.kernel.control_scalars`) — the first time a feed with that signature arrives.
:func:`plan_capture` reads a capture directory (``aipc capture``, format in docs/diff.md) and
lists, per model, the signatures its recorded calls used, in order of first use, as the entries
:func:`onnxwrapper.backends.qnn.precompile` takes. A model with static inputs and no control
inputs has one specialization (``[{}]``).

Which file: sessions open the model *path* recorded in the capture, so that file is compiled
(its content is part of the cache key) when it still has the captured sha256; a model given to
the session as bytes is compiled from the copy stored in the capture. A model whose file changed
or vanished is a per-model failure (:attr:`ModelPlan.error`), not a reason to stop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import onnx

from aipc._exit_codes import EXIT_USAGE
from onnxwrapper.diff import CaptureFormatError, read_capture, sha256_file
from onnxwrapper.kernel import control_scalars, dynamic_inputs, has_control_flow

__all__ = ["CaptureProblem", "ModelPlan", "plan_capture"]


class CaptureProblem(Exception):
    """The capture directory cannot be used: ``what`` is wrong, what is ``expected``, what ``todo``.

    Attributes:
        path: the directory given. status: the command's exit status (64: missing, not a
            capture, unreadable, nothing recorded, no such model; :mod:`aipc._exit_codes`).
    """

    def __init__(self, path: str, what: str, expected: str, todo: str, status: int) -> None:
        self.path, self.what, self.expected, self.todo, self.status = path, what, expected, todo, status
        super().__init__(f"--from-capture {path}: {what}. Expected: {expected}. To fix: {todo}.")


_EXPECTED = ("a directory written by `aipc capture -o DIR script.py` (capture.json, calls.jsonl and one .npz "
             "per call)")
_RECORD = "record one with `aipc capture -o DIR your_script.py [args…]`, then run `aipc compile --from-capture DIR`"


@dataclass
class ModelPlan:
    """The compiles of one model of the capture.

    Attributes:
        key: the capture's model key (``<stem>-<sha256[:12]>``). name: the file's base name.
        source: the model file to compile (the path sessions open, or the capture's stored copy),
            or ``None`` when unusable (see ``error``). size_bytes: its size.
        signatures: entries for :func:`~onnxwrapper.backends.qnn.precompile`: the recorded feed of the
            first call of each signature, in order of first use (its values certify shape buckets and
            bind control inputs, as the session does with the same calls).
        calls: recorded calls of the model. notes: facts the summary shows.
        error: ``"<Reason>: <message>"`` when the model cannot be precompiled, else ``None``.
    """

    key: str
    name: str
    source: str | None
    size_bytes: int = 0
    signatures: list = field(default_factory=list)
    calls: int = 0
    notes: list = field(default_factory=list)
    error: str | None = None


def _read(directory: str):
    if not os.path.exists(directory):
        raise CaptureProblem(directory, "no such directory", _EXPECTED, _RECORD, EXIT_USAGE)
    if not os.path.isdir(directory):
        raise CaptureProblem(directory, "is a file, not a directory", _EXPECTED,
                             "pass the capture directory (the -o DIR of `aipc capture`)", EXIT_USAGE)
    try:
        return read_capture(directory)
    except CaptureFormatError as exc:
        inner = sorted(n for n in os.listdir(directory)
                       if os.path.isfile(os.path.join(directory, n, "capture.json")))
        todo = (f"it holds the capture(s) {', '.join(inner)}: pass one of them, e.g. --from-capture "
                f"{os.path.join(directory, inner[0])}" if inner else _RECORD)
        raise CaptureProblem(directory, str(exc).rstrip("."), _EXPECTED, todo, EXIT_USAGE) from exc
    except OSError as exc:
        raise CaptureProblem(directory, f"cannot be read ({type(exc).__name__}: {exc})", _EXPECTED,
                             "check the directory's permissions", EXIT_USAGE) from exc


def _source(info) -> tuple[str | None, str | None]:
    """``(file to compile, None)`` or ``(None, "<Reason>: <message>")``."""
    if info.path:
        if not os.path.isfile(info.path):
            return None, (f"ModelMissing: {info.path} no longer exists; the app's sessions open it, so there is "
                          f"nothing to compile for them (re-run `aipc capture` after reinstalling the app)")
        if sha256_file(info.path) != info.sha256:
            return None, (f"ModelChanged: {info.path} changed since the capture (sha256 differs); the app would "
                          f"open the new file, whose specializations have other cache keys: re-run `aipc capture`")
        return info.path, None
    if info.stored and os.path.isfile(info.stored):
        if sha256_file(info.stored) != info.sha256:  # the capture's copy is not the model it recorded
            return None, (f"ModelChanged: the capture's copy {info.stored} is not the recorded model (sha256 "
                          f"differs from {info.sha256[:12]}…); re-run `aipc capture`")
        return info.stored, None
    return None, "ModelMissing: the session got the model as bytes and the capture holds no copy of it"


def _dynamic_and_control(path: str) -> tuple[list[str], list[str]]:
    proto = onnx.load(path, load_external_data=False)
    control = control_scalars(proto) if has_control_flow(proto) else []
    return [n for n in dynamic_inputs(proto) if n not in control], control


def _signatures(calls: list, dynamic: list[str], control: list[str], plan: ModelPlan) -> None:
    seen: dict[Any, None] = {}
    unknown = 0
    for call in calls:
        shapes = {m["name"]: tuple(int(d) for d in (m.get("shape") or ())) for m in call.input_meta}
        if not shapes:
            unknown += 1
            continue
        key = (tuple((n, shapes.get(n)) for n in dynamic),)
        if not control and key in seen:
            continue
        feed = call.inputs()  # the call's own inputs: certify shape buckets, bind control values
        values = tuple(repr(feed[n].reshape(-1)[0].item()) for n in control if n in feed)
        key = key + (values,)
        if key in seen:
            continue
        seen[key] = None
        plan.signatures.append(feed)
    if unknown:
        plan.notes.append(f"{unknown} call(s) without recorded inputs (run_with_iobinding): their shapes are "
                          f"unknown and were not precompiled")


def plan_capture(directory: str, only: str | None = None) -> tuple[Any, list[ModelPlan]]:
    """Read the capture at ``directory`` and plan the compiles of each of its models.

    Args:
        directory: the capture directory. only: a model path or file name, or a capture model
            key, to restrict to (``None``: every model).

    Returns:
        ``(Capture, [ModelPlan])`` in order of the models' first call.

    Raises:
        CaptureProblem: no such directory, not a capture, no recorded call, ``only`` matches no model.
    """
    directory = os.path.abspath(os.path.expanduser(directory))
    capture = _read(directory)
    if not capture.calls:
        raise CaptureProblem(directory, f"the capture holds no session call ({capture.status})",
                             "a capture of a script that ran its onnxruntime sessions in its own process "
                             "(aipc capture records no child process)", _RECORD, EXIT_USAGE)
    order = list(dict.fromkeys(c.model for c in capture.calls))
    if only is not None:
        wanted = os.path.abspath(only) if os.path.exists(only) else None
        order = [k for k in order if only in (k, os.path.basename(capture.models[k].path or ""))
                 or (wanted and capture.models[k].path == wanted)]
        if not order:
            names = ", ".join(f"{k} ({capture.models[k].path or 'bytes'})" for k in capture.models)
            raise CaptureProblem(directory, f"no model of the capture is {only!r}", f"one of: {names}",
                                 "give the model's path, file name or capture key, or leave MODEL out", EXIT_USAGE)
    plans = []
    for key in order:
        info = capture.models[key]
        name = os.path.basename(info.path) if info.path else f"{key} (bytes)"
        calls = list(capture.calls_of(key))
        source, error = _source(info)
        plan = ModelPlan(key, name, source, os.path.getsize(source) if source else 0, calls=len(calls), error=error)
        if source is not None:
            try:
                dynamic, control = _dynamic_and_control(source)
            except Exception as exc:  # noqa: BLE001 - a model onnx cannot read is this model's failure
                plan.source, plan.error = None, f"{type(exc).__name__}: {exc}"
            else:
                if dynamic or control:
                    _signatures(calls, dynamic, control, plan)
                else:
                    plan.signatures.append({})  # static: one specialization
        plans.append(plan)
    return capture, plans
