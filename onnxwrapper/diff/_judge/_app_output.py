"""The application-level comparison: does the script print (and write) the same result on every backend?

Tensor metrics say how far each output is from the reference; they do not say whether the *app*
still gives its answer — a segmenter can print another word boundary while its first model's
tensors pass, and a VAD can print identical segments while a speech probability is off by 0.46.
So the script's own observable result is compared too: its standard output (each run's
``stdout.txt``), its exit status, and files the user names (copied per run into the run's
directory, see :mod:`onnxwrapper.diff._runs._orchestrate`).

Text is compared line by line, the way GNU ``numdiff`` compares numerical output:

* lines are split into text and numbers; the text must be identical and the numbers must agree
  within ``|a − b| ≤ rtol·max(|a|, |b|) + one unit of the last printed digit`` (``0.994`` and
  ``0.969`` agree at rtol 0.0443; ``685`` and ``684`` too). Numbers inside quotes (``'2024'``) and
  inside words (``v3``) are text. ``rtol`` defaults to the run's tensor error budget
  (:func:`onnxwrapper.diff._judge._tolerance.error_budget`: FP16 4.4 %), 0 compares exactly;
* **volatile** numbers — those that differ between two runs of the reference itself (timings,
  dates, random values) — are masked; the orchestrator runs the reference a second time only when
  a difference is found (``<reference>+rerun``);
* **timings** are not judged: a duration (a number with a time unit: ``s``, ``ms``, ``µs``, ``min``
  …) in parentheses or after *took*, *elapsed*, *time*, *latency* or *runtime*, and a throughput
  (``it/s``, ``fps``, ``tokens/s``). An NPU (or its simulator) takes another time than the CPU, and
  a short timing can print the same on two reference runs by chance (``(0.02s)``), so the second
  run alone would not catch it. Durations elsewhere (``speech 0.46s - 4.34s``) are results and
  are compared;
* ``filter_regex`` keeps only the lines it matches (``re.search``) before anything else.

A file that is not valid UTF-8 is compared byte for byte.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field

__all__ = ["OutputItem", "compare_texts", "compare_bytes", "volatile_mask", "tokenize", "timing_positions"]

_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_UNIT = re.compile(r"\s?(?:s|sec|secs|seconds?|ms|msec|us|µs|ns|min|mins|minutes?|h)(?![A-Za-z])")
_RATE = re.compile(r"\s?(?:it/s|s/it|fps|FPS|ips|tokens/s|tok/s|samples/s|img/s)")
_TIMING_WORD = re.compile(r"(?:took|elapsed|time|latency|runtime|wall)\W{0,3}$", re.IGNORECASE)
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_MAX_DIFF_LINES = 40
_MAX_ALIGN_LINES = 20000


@dataclass
class OutputItem:
    """One compared observable of one backend's run against the reference's.

    Attributes:
        what: ``"stdout"``, ``"exit status"`` or ``"file <path>"``.
        identical: equal after filtering, masking volatile numbers and the numeric tolerance.
        exact: byte-for-byte equal (before any of that).
        diff: unified diff of the differing lines (reference ``-``, backend ``+``), bounded.
        numeric: examples of numbers that differ within the tolerance, e.g. ``"0.994 vs 0.969"``.
        masked: volatile numbers masked (they differ between two reference runs).
        timings: timings not judged (durations and throughputs, module docstring).
        lines: lines compared (reference side).
        detail: a sentence (e.g. "not written by qnn").
    """

    what: str
    identical: bool
    exact: bool = False
    diff: list = field(default_factory=list)
    numeric: list = field(default_factory=list)
    masked: int = 0
    timings: int = 0
    lines: int = 0
    detail: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def timing_positions(line: str) -> set[int]:
    """Indices (in :func:`tokenize`'s number list) of the numbers of ``line`` that are timings
    (module docstring)."""
    found, k = set(), 0
    quoted = [(m.start(), m.end()) for m in _QUOTED.finditer(line)]
    for m in _NUMBER.finditer(line):
        if any(a <= m.start() < b for a, b in quoted):
            continue
        rest = line[m.end():]
        if _RATE.match(rest):
            found.add(k)
        elif _UNIT.match(rest):
            before = line[:m.start()].rstrip()
            if before.endswith("(") or _TIMING_WORD.search(before):
                found.add(k)
        k += 1
    return found


def tokenize(line: str) -> tuple[tuple, list[str]]:
    """``(template, numbers)``: the line with each number replaced by ``\\0`` (quoted strings kept
    verbatim) and the numbers' texts in order."""
    parts, numbers, pos = [], [], 0
    quoted = [(m.start(), m.end()) for m in _QUOTED.finditer(line)]

    def in_quotes(i: int) -> bool:
        return any(a <= i < b for a, b in quoted)

    for m in _NUMBER.finditer(line):
        if in_quotes(m.start()):
            continue
        parts.append(line[pos:m.start()])
        numbers.append(m.group())
        pos = m.end()
    parts.append(line[pos:])
    return tuple(parts), numbers


def _unit(text: str) -> float:
    """One unit of the last printed digit of a number's text (0 for integers)."""
    mantissa, _, exponent = text.lower().partition("e")
    if "." not in mantissa:
        return 0.0 if not exponent else 10.0 ** int(exponent)
    decimals = len(mantissa.split(".", 1)[1])
    return 10.0 ** (-decimals + (int(exponent) if exponent else 0))


def _agree(a: str, b: str, rtol: float) -> bool:
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    if not (math.isfinite(x) and math.isfinite(y)):
        return x == y
    return abs(x - y) <= rtol * max(abs(x), abs(y)) + max(_unit(a), _unit(b)) * (1 + 1e-9)


def _lines(text: str, filter_regex: str | None) -> list[str]:
    lines = [ln.rstrip() for ln in text.splitlines()]
    if filter_regex:
        rx = re.compile(filter_regex)
        lines = [ln for ln in lines if rx.search(ln)]
    return lines


def _align(a: list, b: list) -> list[tuple]:
    """difflib opcodes on the two template lists (plain index pairing for huge outputs)."""
    if len(a) > _MAX_ALIGN_LINES or len(b) > _MAX_ALIGN_LINES:
        n = min(len(a), len(b))
        ops = [("equal" if a[i] == b[i] else "replace", i, i + 1, i, i + 1) for i in range(n)]
        if len(a) != len(b):
            ops.append(("replace", n, len(a), n, len(b)))
        return ops
    return difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()


def volatile_mask(first: str, second: str, filter_regex: str | None = None) -> dict[int, set | None]:
    """Where two runs of the same (reference) script differ: ``{line index of first: set of
    number positions}`` (``None`` = the whole line differs in text)."""
    a, b = _lines(first, filter_regex), _lines(second, filter_regex)
    ta, tb = [tokenize(x) for x in a], [tokenize(x) for x in b]
    mask: dict[int, set | None] = {}
    for op, i1, i2, j1, j2 in _align([t[0] for t in ta], [t[0] for t in tb]):
        if op == "equal":
            for i, j in zip(range(i1, i2), range(j1, j2)):
                pos = {k for k, (x, y) in enumerate(zip(ta[i][1], tb[j][1])) if x != y}
                if pos:
                    mask[i] = pos
        else:
            for i in range(i1, i2):
                mask[i] = None
    return mask


def compare_texts(what: str, reference: str, backend: str, *, rtol: float, filter_regex: str | None = None,
                  mask: dict | None = None, labels: tuple = ("reference", "backend")) -> OutputItem:
    """Compare a backend's text output with the reference's (module docstring).

    Args:
        what: the item's name for the report. reference / backend: the two texts.
        rtol: relative tolerance for numbers (≥ 0). filter_regex: keep only matching lines.
        mask: :func:`volatile_mask` of the reference (line indices refer to the filtered lines).
        labels: names of the two sides in the diff header.
    """
    mask = mask or {}
    a, b = _lines(reference, filter_regex), _lines(backend, filter_regex)
    item = OutputItem(what=what, identical=True, exact=reference == backend, lines=len(a))
    ta, tb = [tokenize(x) for x in a], [tokenize(x) for x in b]
    diff: list[str] = []
    differing = 0
    for op, i1, i2, j1, j2 in _align([t[0] for t in ta], [t[0] for t in tb]):
        if op != "equal":
            if op == "delete" and all(mask.get(i, ()) is None and i in mask for i in range(i1, i2)):
                item.masked += i2 - i1  # lines the reference itself does not print every time
                continue
            differing += max(i2 - i1, j2 - j1)
            diff += [f"-{a[i]}" for i in range(i1, i2)] + [f"+{b[j]}" for j in range(j1, j2)]
            continue
        for i, j in zip(range(i1, i2), range(j1, j2)):
            line_bad = False
            timings = None
            for k, (x, y) in enumerate(zip(ta[i][1], tb[j][1])):
                if x == y:
                    continue
                if timings is None:
                    timings = timing_positions(a[i])
                if k in timings:
                    item.timings += 1
                elif i in mask and (mask[i] is None or k in mask[i]):
                    item.masked += 1
                elif _agree(x, y, rtol):
                    if len(item.numeric) < 5:
                        item.numeric.append(f"{x} vs {y}")
                else:
                    line_bad = True
            if line_bad:
                differing += 1
                diff += [f"-{a[i]}", f"+{b[j]}"]
    if differing:
        item.identical = False
        item.diff = [f"--- {labels[0]}", f"+++ {labels[1]}"] + diff[:_MAX_DIFF_LINES]
        if len(diff) > _MAX_DIFF_LINES:
            item.diff.append(f"… ({len(diff) - _MAX_DIFF_LINES} more diff lines)")
        item.detail = f"{differing} line(s) differ"
    return item


def compare_bytes(what: str, reference: bytes | None, backend: bytes | None, *, rtol: float,
                  filter_regex: str | None = None, mask: dict | None = None,
                  labels: tuple = ("reference", "backend")) -> OutputItem:
    """Compare a file's contents: as text (:func:`compare_texts`) when both decode as UTF-8, else
    byte for byte; a side that did not write the file (``None``) differs."""
    if reference is None or backend is None:
        who = labels[0] if reference is None else labels[1]
        return OutputItem(what=what, identical=reference is None and backend is None,
                          detail=f"not written by {who}" if reference is None or backend is None else "")
    try:
        ta, tb = reference.decode("utf-8"), backend.decode("utf-8")
    except UnicodeDecodeError:
        same = reference == backend
        return OutputItem(what=what, identical=same, exact=same,
                          detail="" if same else f"binary contents differ ({len(reference)} vs {len(backend)} bytes)")
    return compare_texts(what, ta, tb, rtol=rtol, filter_regex=filter_regex, mask=mask, labels=labels)
