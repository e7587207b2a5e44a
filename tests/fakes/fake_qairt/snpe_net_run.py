"""FAKE for tests — NOT Qualcomm's snpe-net-run.

Emulates the documented command line and file conventions of SNPE's ``snpe-net-run`` (QAIRT SDK
docs "Tools"; Olive's snpe wrapper for the output naming) on a fake DLC (``fake_qnn_graph.py``):

* ``--container <dlc>`` and ``--input_list <file>`` are required; ``--output_dir`` defaults to
  ``./output``; runtime flags ``--use_gpu``/``--use_dsp``/``--use_aip`` (default CPU); unknown options
  are an error (exit 1), so a malformed command line fails the tests.
* input list: one inference per line, ``name:=path`` tokens separated by spaces (a bare path only
  for single-input graphs); lines starting with ``#`` or ``%`` name output layers/tensors.
* raw files are float32 unless ``--use_native_input_files`` (native dtypes); a file whose size
  differs from the tensor is an error (SNPE ≥ 2.6 checks buffer sizes in execute()).
* ``--use_native_input_files`` / ``--use_native_output_files`` without any ``--userbuffer_*`` flag
  is an error (exit 1), as the help says: "Must be used with --userbuffer_xxx"; so is
  ``--userbuffer_auto`` with ``--encoding_type`` ("Cannot be combined with --encoding_type").
* outputs go to ``<output_dir>/Result_<n>/<tensor name>.raw`` (``/`` in names makes folders; ``:``
  becomes ``_`` on Windows), float32 unless ``--use_native_output_files``; then outputs that are
  not float32 are written as ``<tensor name>_native.raw`` (as qnn-net-run names them; how
  snpe-net-run names them is undocumented), or ``<tensor name>.raw`` with
  ``FAKE_SNPE_NATIVE_OUTPUT_NAMES=plain``.
* with ``FAKE_SNPE_LOG=<file>`` each call appends its argument list as one JSON line there.
* runtimes not listed in ``FAKE_SNPE_RUNTIMES`` (default ``cpu,gpu,dsp``) fail with exit 1, as the
  real tool does without ``--enable_cpu_fallback``; a graph with ``"fail": true`` exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import fake_qnn_graph as fq  # noqa: E402


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="snpe-net-run", allow_abbrev=False, add_help=True)
    p.add_argument("--container", required=True)
    p.add_argument("--input_list", required=True)
    p.add_argument("--output_dir", default="output")
    for flag in ("--use_cpu", "--use_gpu", "--use_dsp", "--use_aip", "--use_native_input_files",
                 "--use_native_output_files", "--enable_cpu_fallback", "--debug", *_USERBUFFER_SWITCHES):
        p.add_argument(flag, action="store_true")
    for flag in _USERBUFFER_VALUES:
        p.add_argument(flag)
    p.add_argument("--encoding_type")
    p.add_argument("--perf_profile", choices=["default", "balanced", "high_performance", "power_saver",
                                              "system_settings", "sustained_high_performance", "burst",
                                              "low_power_saver", "high_power_saver", "low_balanced",
                                              "extreme_power_saver"])
    p.add_argument("--set_output_tensors")
    return p


_USERBUFFER_SWITCHES = ("--userbuffer_auto", "--userbuffer_float", "--userbuffer_tf8", "--userbuffer_float_output",
                        "--userbuffer_tf8_output")
_USERBUFFER_VALUES = ("--userbuffer_floatN", "--userbuffer_tfN", "--userbuffer_floatN_output",
                      "--userbuffer_tfN_output", "--userbuffer_uintN_output")


def _fail(message: str) -> int:
    sys.stderr.write(f"FAKE snpe-net-run: error: {message}\n")
    return 1


def main(argv=None) -> int:
    if os.environ.get("FAKE_SNPE_LOG"):
        with open(os.environ["FAKE_SNPE_LOG"], "a", encoding="utf-8") as f:
            f.write(json.dumps(sys.argv[1:] if argv is None else list(argv)) + "\n")
    args = _parser().parse_args(argv)
    userbuffer = any(getattr(args, f[2:]) for f in _USERBUFFER_SWITCHES + _USERBUFFER_VALUES)
    for flag in ("--use_native_input_files", "--use_native_output_files"):
        if getattr(args, flag[2:]) and not userbuffer:
            return _fail(f"{flag}: Must be used with --userbuffer_xxx.")
    if args.userbuffer_auto and args.encoding_type:
        return _fail("--userbuffer_auto cannot be combined with --encoding_type.")
    runtime = "dsp" if args.use_dsp else "gpu" if args.use_gpu else "aip" if args.use_aip else "cpu"
    available = os.environ.get("FAKE_SNPE_RUNTIMES", "cpu,gpu,dsp").split(",")
    if runtime not in available:
        return _fail(f"Selected runtime '{runtime}' is not available on this platform.")
    try:
        spec = fq.load_artifact(args.container)
    except fq.NotAFakeArtifact as exc:
        return _fail(f"Failed to open container {args.container}: {exc}")
    g = spec["graphs"][0]
    with open(args.input_list, encoding="utf-8") as f:
        lines = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith(("#", "%"))]
    for n, line in enumerate(lines):
        tokens = line.split()
        if len(tokens) == 1 and ":=" not in tokens[0] and len(g["inputs"]) == 1:
            paths = {g["inputs"][0]["name"]: tokens[0]}
        else:
            if not all(":=" in t for t in tokens):
                return _fail(f"input list line {n + 1}: expected name:=path tokens")
            paths = dict(t.split(":=", 1) for t in tokens)
        natives = []
        for t in g["inputs"]:
            if t["name"] not in paths:
                return _fail(f"input list line {n + 1} has no file for input '{t['name']}'")
            dtype = fq.storage(t["dtype"]) if args.use_native_input_files else np.dtype(np.float32)
            path = os.path.join(os.getcwd(), paths[t["name"]])
            data = np.fromfile(path, dtype=np.uint8)
            expected = int(np.prod(t["shape"])) * dtype.itemsize
            if data.size != expected:
                return _fail(f"input '{t['name']}': file {paths[t['name']]} has {data.size} bytes, expected {expected}")
            values = data.view(dtype)
            natives.append(values if args.use_native_input_files else fq.from_float(values, t))
        if g.get("fail"):
            return _fail("Failed to execute the network")
        outs = fq.compute(g, natives)
        result = os.path.join(args.output_dir, f"Result_{n}")
        for t, o in zip(g["outputs"], outs):
            name = t["name"].replace(":", "_") if sys.platform == "win32" else t["name"]
            native_name = (args.use_native_output_files and fq.storage(t["dtype"]) != np.float32
                           and os.environ.get("FAKE_SNPE_NATIVE_OUTPUT_NAMES", "native") == "native")
            path = os.path.join(result, *name.split("/")) + ("_native.raw" if native_name else ".raw")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            data = o if args.use_native_output_files else fq.to_float(o, t)
            np.ascontiguousarray(data).tofile(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
