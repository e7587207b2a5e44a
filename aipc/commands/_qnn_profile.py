"""``aipc compile --profile``: QNN's per-node profile of a compiled model, read from the CSV the QNN
EP writes (``profiling_level=detailed``)."""

from __future__ import annotations

import csv
import os
import re
import time
from typing import Any

import onnxwrapper

__all__ = ["profile_compiled", "read_qnn_profile"]

_NODE_ROW = re.compile(r"^(?P<name>.*?):?OpId_\d+ \(cycles\)$")


def read_qnn_profile(csv_path: str, op_types: dict[str, str] | None = None) -> dict[str, Any]:
    """Per-op table from a QNN EP profiling CSV (``profiling_level=detailed``).

    The CSV has one block per execution: ``NODE`` rows ``<node>:OpId_<n> (cycles)`` and ``ROOT``
    rows such as ``Accelerator (execute) time`` (µs) and ``QNN (execute) time`` (µs).

    Args:
        csv_path: the file written by the QNN EP (``profiling_file_path``).
        op_types: ``{node name: op type}`` of the model to label rows (``_token_<n>`` suffixes of
            ORT's layout transformation are stripped to find the node).

    Returns:
        ``{"executions": n, "execute_us": [...], "ops": [{"node", "op_type", "mean_cycles", "share"}]}``
        sorted by cycles, descending.
    """
    cycles: dict[str, list[int]] = {}
    execute_us: list[float] = []
    with open(csv_path, newline="", encoding="utf-8", errors="replace") as f:
        for row in csv.DictReader(f):
            ident = (row.get("Event Identifier") or "").strip()
            if row.get("Message") == "NODE" and row.get("Unit of Measurement") == "CYCLES":
                m = _NODE_ROW.match(ident)
                if m:
                    cycles.setdefault(m.group("name").strip() or ident, []).append(int(row.get("Time") or 0))
            elif ident == "QNN (execute) time":
                execute_us.append(float(row.get("Time") or 0))
    total = sum(sum(v) / len(v) for v in cycles.values()) or 1.0
    ops = []
    for name, values in cycles.items():
        base = re.sub(r"(_token_\d+)+$", "", name)
        label = (op_types or {}).get(base) or ("Input" if name.startswith("Input") else
                                               "Output" if name.startswith("Output") else
                                               "Transpose (layout)" if base.startswith("Transpose") else "")
        mean = sum(values) / len(values)
        ops.append({"node": name, "op_type": label, "mean_cycles": mean, "share": mean / total})
    ops.sort(key=lambda r: -r["mean_cycles"])
    return {"executions": len(execute_us), "execute_us": execute_us, "ops": ops}



def profile_compiled(ctx_path: str, feeds: list, options: dict, paths: dict, model) -> dict:
    """Run ``ctx_path`` on the QNN backend with detailed QNN profiling over ``feeds`` and summarize
    the CSV it writes (next to ``paths["ctx"]``): :func:`read_qnn_profile` plus wall seconds per run."""
    csv_path = os.path.splitext(paths["ctx"])[0] + "_profile.csv"
    opts = dict(options, profiling="detailed", provider_options={"profiling_file_path": csv_path})
    session = onnxwrapper.InferenceSession(ctx_path, backend="qnn", backend_options=opts)
    start = time.perf_counter()
    for feed in feeds:
        session.run(None, feed)
    wall = (time.perf_counter() - start) / len(feeds)
    session.close()
    del session
    table = read_qnn_profile(csv_path, {n.name: n.op_type for n in model.graph.node})
    table.update({"csv": csv_path, "wall_seconds_per_run": wall,
                  "note": "HTP simulator on this host: cycles and times are not device timings"})
    return table
