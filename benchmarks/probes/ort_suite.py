"""Run ONNX Runtime's own Python API tests against onnxruntime and onnxwrapper, and compare per test.

The yardstick of a drop-in is the test suite of what it replaces: ONNX Runtime's
``onnxruntime/test/python/onnxruntime_test_python.py`` (class ``TestInferenceSession``), run
unchanged. Its files are MIT licensed and not part of onnxwrapper; get them from the GitHub
repository ``microsoft/onnxruntime`` (ideally at the tag of the installed onnxruntime; tests newer
than the installed version fail the same way in every mode, so they move no count):

* ``onnxruntime/test/python/onnxruntime_test_python.py`` and ``onnxruntime/test/python/helper.py``;
* the models they load, from ``onnxruntime/test/testdata/`` (mul_1, matmul_1, matmul_2, logicaland,
  identity_string, identity_opt, sequence_length/construct/insert, abs_free_dimensions, add_mul_add,
  mnist, identity_9799, issue4829, model_with_valid_ort_config_json,
  model_with_external_initializer_come_from_user, model_with_orig_ext_data (+ ``.bin``), ``lora/``
  two_params_lora_model (+ ``.onnx_adapter``); all ``.onnx``), into ``TEST_DIR/testdata/``.

The class ``TestInferenceSession`` is run once per mode, each in its own process, in a fresh copy of
TEST_DIR (the tests write files into their working directory):

``ort``
    plain onnxruntime: ``python -m pytest …``.
``cpu`` / ``qnn``
    ``python -m aipc --backend cpu|qnn -m pytest …``: every session the test file creates is an
    onnxwrapper session on that backend (qnn: the HTP simulator on x86-64 hosts).
``ort-qnn``
    plain onnxruntime with the QNN plugin EP, no onnxwrapper. This file, loaded as a pytest plugin,
    registers the plugin before the test module is imported (so ``get_available_providers()`` lists
    it, as the test file's own QNN branch expects) and wraps ``InferenceSession.__init__``: every
    session gets the QNN EP devices through ``SessionOptions.add_provider_for_devices`` with
    onnxwrapper's default QNN EP options (what an onnxwrapper qnn session reports in
    ``get_provider_options()``; on the simulator ``backend_type=htp, soc_model=60, htp_arch=73,
    enable_htp_fp16_precision=1``), and its ``providers``/``provider_options`` are dropped: onnxruntime
    1.32 lets them override the EP devices (measured) and ``aipc --backend qnn`` ignores them too.
    A ``SessionOptions`` that already has EP devices is left alone, else it is modified in place.

Outcome of a test: ``passed``, ``failed`` (in the test or a subtest), ``error`` (setup/teardown),
``skipped``, ``crashed`` (the process died or timed out while it ran; the rest runs in a new
process) or ``not run``; the first line of the failure is kept.

Output: a row per test (outcome per mode; ``c=a``: qnn's outcome equals plain onnxruntime's,
``c=d``: equals onnxruntime + QNN EP's, …), the counts over all tests and over those that do
something on this host (not ``--inert``: by default the ones needing CUDA, TensorRT, TVM or a
custom-op library built from ORT's sources), the failure lines of differing tests; ``--json``.

Usage::

    python benchmarks/probes/ort_suite.py TEST_DIR [--modes ort,cpu,qnn,ort-qnn] [--json results.json]
                                       [--timeout 3600] [--test-timeout 600] [--cache-dir DIR] [-k EXPR]

Modes run one after another. Exit status 0 when every mode ran to completion, 1 otherwise."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

TEST_FILE = "onnxruntime_test_python.py"
PLUGIN = os.path.splitext(os.path.basename(__file__))[0]  # this file, as pytest plugin of the test processes
TEST_CLASS = "TestInferenceSession"
MODES = ("ort", "cpu", "qnn", "ort-qnn")
OUTCOMES = ("passed", "failed", "error", "skipped", "crashed", "not run")
#: tests whose body does nothing on a host without CUDA/TensorRT/TVM, and the custom-op test that
#: needs ``libcustom_op_library.so`` built from ONNX Runtime's sources
DEFAULT_INERT = ("test_tvm_imported", "test_set_providers", "test_set_providers_with_options",
                 "test_session_providers", "test_get_and_set_tuning_results", "test_ort_value_gh_issue9799",
                 "test_run_model_with_cuda_copy_stream", "test_multiple_devices", "test_register_custom_ops_library")
#: onnxwrapper's QNN EP options on a host without NPU (used when onnxwrapper cannot be imported)
FALLBACK_QNN_OPTIONS = {"backend_type": "htp", "soc_model": "60", "htp_arch": "73", "enable_htp_fp16_precision": "1"}

ENV_RESULTS = "ORT_SUITE_RESULTS"
ENV_QNN_OPTIONS = "ORT_SUITE_QNN_EP_OPTIONS"
ENV_TEST_TIMEOUT = "ORT_SUITE_TEST_TIMEOUT"
TIMEOUT_EXIT_STATUS = 124
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
#: compared pairs: (mode, reference mode, column, sentence of the count)
PAIRS = (("cpu", "ort", "b=a", "(b) aipc --backend cpu: same outcome as plain onnxruntime"),
         ("qnn", "ort", "c=a", "(c) aipc --backend qnn: same outcome as plain onnxruntime"),
         ("ort-qnn", "ort", "d=a", "(d) onnxruntime + QNN plugin EP: same outcome as plain onnxruntime"),
         ("qnn", "ort-qnn", "c=d", "(c) vs (d): qnn backend same outcome as onnxruntime + QNN plugin EP"))


# -- pytest plugin part (loaded in the test process with ``-p ort_suite``) -------------------------
def _record(event: dict) -> None:
    """Append one JSON event line to the results file named by the environment (if any)."""
    path = os.environ.get(ENV_RESULTS)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")


def _install_qnn_ep(options: dict) -> None:
    """Register the QNN plugin EP and give every new InferenceSession the QNN EP devices."""
    import onnxruntime
    import onnxruntime_qnn
    from onnxruntime.capi import onnxruntime_inference_collection as collection

    name = "QNNExecutionProvider"
    if not any(d.ep_name == name for d in onnxruntime.get_ep_devices()):
        onnxruntime.register_execution_provider_library(name, onnxruntime_qnn.get_library_path())
    devices = [d for d in onnxruntime.get_ep_devices() if d.ep_name == name]
    original_init = collection.InferenceSession.__init__

    def init_with_qnn(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        if sess_options is None:
            sess_options = onnxruntime.SessionOptions()
        if not sess_options.has_providers():
            sess_options.add_provider_for_devices(devices, dict(options))
            providers = provider_options = None
        original_init(self, path_or_bytes, sess_options, providers, provider_options, **kwargs)

    collection.InferenceSession.__init__ = init_with_qnn


def pytest_configure(config) -> None:
    """In the ort-qnn mode: QNN EP registered and enforced before the test module is imported."""
    options = os.environ.get(ENV_QNN_OPTIONS)
    if options:
        _install_qnn_ep(json.loads(options))


def pytest_collection_modifyitems(session, config, items) -> None:
    _record({"event": "collected", "tests": [item.name for item in items]})


_watchdog = None


def _test_timed_out(name: str, seconds: float) -> None:
    _record({"event": "timeout", "test": name, "seconds": seconds})
    os._exit(TIMEOUT_EXIT_STATUS)


def pytest_runtest_logstart(nodeid, location) -> None:
    """Record the start and arm the per-test watchdog (ends the process when the test hangs)."""
    global _watchdog
    import threading
    name = nodeid.split("::")[-1]
    _record({"event": "start", "test": name})
    seconds = float(os.environ.get(ENV_TEST_TIMEOUT) or 0)
    if seconds > 0:
        _watchdog = threading.Timer(seconds, _test_timed_out, (name, seconds))
        _watchdog.daemon = True
        _watchdog.start()


def pytest_runtest_logfinish(nodeid, location) -> None:
    if _watchdog is not None:
        _watchdog.cancel()
    _record({"event": "finish", "test": nodeid.split("::")[-1]})


def _first_line(report) -> str:
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    elif isinstance(longrepr, tuple):  # skip: (file, line, reason)
        return str(longrepr[2]).splitlines()[0] if str(longrepr[2]) else ""
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):  # "AssertionError:" + the message on the next line
        lines[0] = f"{lines[0]} {lines[1]}"
    return lines[0][:400] if lines else ""


def pytest_runtest_logreport(report) -> None:
    if report.passed and report.when != "call":
        return
    if report.failed:
        outcome = "failed" if report.when == "call" else "error"
    else:
        outcome = "skipped" if report.skipped else "passed"
    _record({"event": "report", "test": report.nodeid.split("::")[-1], "when": report.when, "outcome": outcome,
             "message": _first_line(report) if outcome != "passed" else ""})


# -- harness part ---------------------------------------------------------------------------------
def default_qnn_options() -> dict:
    """onnxwrapper's QNN EP options for a session without backend options, on this host (public API)."""
    try:
        import onnxwrapper
        from onnx import TensorProto, helper

        value = helper.make_tensor_value_info
        graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"])], "probe",
                                  [value("X", TensorProto.FLOAT, [1])], [value("Y", TensorProto.FLOAT, [1])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        with tempfile.TemporaryDirectory() as cache:
            session = onnxwrapper.InferenceSession(model.SerializeToString(), backend="qnn",
                                                   backend_options={"cache_dir": cache})
            return dict(session.get_provider_options()["QNNExecutionProvider"])
    except Exception:  # noqa: BLE001 - no onnxwrapper/onnxruntime-qnn here: the documented defaults
        return dict(FALLBACK_QNN_OPTIONS)


def command(mode: str, python: str, test_ids: list[str], keyword: str | None) -> list[str]:
    """The command line of one mode (run in the copied test directory)."""
    pytest_args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", PLUGIN, *test_ids]
    if keyword:
        pytest_args += ["-k", keyword]
    if mode in ("cpu", "qnn"):
        return [python, "-m", "aipc", "--backend", mode, *pytest_args]
    return [python, *pytest_args]


def _parse(path: str) -> tuple[list[str] | None, dict, str | None]:
    """``(collected test names, {test: result}, test started but not finished)`` of one process."""
    collected, results, running = None, {}, None
    if not os.path.exists(path):
        return collected, results, running
    with open(path, encoding="utf-8") as f:
        for line in f:
            event = json.loads(line)
            if event["event"] == "collected":
                collected = collected or event["tests"]
            elif event["event"] == "start":
                running = event["test"]
            elif event["event"] == "finish":
                running = None
            elif event["event"] == "timeout":
                results[event["test"]] = {"outcome": "crashed",
                                          "message": f"test timeout ({event['seconds']:.0f} s) reached"}
            elif event["event"] == "report":
                name, outcome = event["test"], event["outcome"]
                old = results.get(name)
                if old is None or (old["outcome"] in _RANK and _RANK[outcome] > _RANK[old["outcome"]]):
                    results[name] = {"outcome": outcome, "message": event["message"]}
    return collected, results, running


def run_mode(mode: str, test_dir: str, *, python: str, timeout: float, test_timeout: float, keyword: str | None,
             cache_dir: str | None, qnn_options: dict, log) -> dict:
    """Run one mode in a fresh copy of ``test_dir`` and return its results.

    A process that dies (or exceeds the remaining time) while a test runs marks that test
    ``crashed``; the tests after it run in a new process.

    Raises:
        RuntimeError: the first process collected nothing (its output tail is in the message).
    """
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix=f"ort_suite_{mode}_") as tmp:
        work = os.path.join(tmp, "tests")
        shutil.copytree(test_dir, work)
        results_path = os.path.join(tmp, "results.jsonl")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        env[ENV_RESULTS] = results_path
        env.pop(ENV_QNN_OPTIONS, None)
        env[ENV_TEST_TIMEOUT] = str(test_timeout)
        if mode == "ort-qnn":
            env[ENV_QNN_OPTIONS] = json.dumps(qnn_options)
        if mode == "qnn":
            env["ONNXWRAPPER_CACHE_DIR"] = cache_dir or os.path.join(tmp, "cache")
        results: dict = {}
        collected: list[str] | None = None
        start = time.monotonic()
        runs = 0
        while collected is None or any(t not in results for t in collected):
            remaining = [t for t in collected if t not in results] if collected is not None else None
            budget = timeout - (time.monotonic() - start)
            if budget <= 0:
                results.update({t: {"outcome": "not run", "message": "mode timeout reached"} for t in remaining})
                break
            ids = [f"{TEST_FILE}::{TEST_CLASS}::{t}" for t in remaining] if remaining else [
                f"{TEST_FILE}::{TEST_CLASS}"]
            open(results_path, "w").close()
            runs += 1
            output = os.path.join(tmp, f"output_{runs}.txt")
            with open(output, "w") as out:
                try:
                    proc = subprocess.run(command(mode, python, ids, keyword), cwd=work, env=env, stdout=out,
                                          stderr=subprocess.STDOUT, timeout=budget)
                    reason = f"process exited with status {proc.returncode}"
                except subprocess.TimeoutExpired:
                    reason = f"mode timeout ({timeout:.0f} s) reached"
            got_collected, got, running = _parse(results_path)
            if collected is None:
                collected = got_collected
                if collected is None:
                    with open(output) as f:
                        tail = f.read()[-3000:]
                    raise RuntimeError(f"mode {mode}: nothing was collected ({reason}). Output tail:\n{tail}")
            results.update(got)
            if running is not None:
                if results.get(running, {}).get("outcome") != "crashed":  # a watchdog timeout says why
                    results[running] = {"outcome": "crashed", "message": reason}
                log(f"  {mode}: {running} did not finish ({reason}); the rest runs in a new process")
            elif not got:  # no progress: nothing left that this process would run
                results.update({t: {"outcome": "not run", "message": reason}
                                for t in collected if t not in results})
        seconds = time.monotonic() - start
    return {"tests": {t: results[t] for t in collected}, "seconds": round(seconds, 1), "processes": runs,
            "command": " ".join(command(mode, "python", [f"{TEST_FILE}::{TEST_CLASS}"], keyword))}


def compare(by_mode: dict, inert: set[str]) -> dict:
    """Per-test rows and the counts of equal outcomes between modes."""
    tests: list[str] = []
    for data in by_mode.values():
        for name in data["tests"]:
            if name not in tests:
                tests.append(name)
    pairs = [p for p in PAIRS if p[0] in by_mode and p[1] in by_mode]
    rows, counts = [], {p[2]: {"all": [0, 0], "host": [0, 0]} for p in pairs}
    for name in tests:
        outcome = {m: by_mode[m]["tests"].get(name, {}).get("outcome", "not run") for m in by_mode}
        row = {"test": name, "inert": name in inert, "outcome": outcome,
               "message": {m: by_mode[m]["tests"].get(name, {}).get("message", "") for m in by_mode}}
        for mode, reference, column, _sentence in pairs:
            row[column] = same = outcome[mode] == outcome[reference]
            for scope in ("all", "host") if name not in inert else ("all",):
                counts[column][scope][0] += same
                counts[column][scope][1] += 1
        rows.append(row)
    return {"rows": rows, "counts": counts}


def print_report(by_mode: dict, comparison: dict, out=sys.stdout) -> None:
    modes = list(by_mode)
    short = {"passed": "pass", "failed": "FAIL", "error": "ERR", "skipped": "skip", "crashed": "CRASH",
             "not run": "-"}
    keys = list(comparison["counts"])
    width = max(len(r["test"]) for r in comparison["rows"]) + 2
    header = f"{'test':<{width}}" + "".join(f"{m:>9}" for m in modes) + "".join(f"{k:>6}" for k in keys)
    print(header, file=out)
    print("-" * len(header), file=out)
    for row in comparison["rows"]:
        line = f"{row['test'] + (' *' if row['inert'] else ''):<{width}}"
        line += "".join(f"{short[row['outcome'][m]]:>9}" for m in modes)
        line += "".join(f"{'yes' if row[k] else 'NO':>6}" for k in keys)
        print(line, file=out)
    print("* = does nothing on this host (--inert); counted in 'all tests' only\n", file=out)
    sentences = {p[2]: p[3] for p in PAIRS}
    for key, value in comparison["counts"].items():
        host, alltests = value["host"], value["all"]
        print(f"{sentences[key]}: {host[0]}/{host[1]} (all tests: {alltests[0]}/{alltests[1]})", file=out)
    for mode in modes:
        tally = {o: sum(1 for t in by_mode[mode]["tests"].values() if t["outcome"] == o) for o in OUTCOMES}
        print(f"  {mode}: " + ", ".join(f"{n} {o}" for o, n in tally.items() if n)
              + f" in {by_mode[mode]['seconds']} s ({by_mode[mode]['processes']} process(es))", file=out)
    differing = [r for r in comparison["rows"] if len(set(r["outcome"].values())) > 1]
    if differing:
        print("\nFirst failure line of every test whose outcomes differ:", file=out)
        for row in differing:
            print(f"  {row['test']}", file=out)
            for mode in modes:
                if row["outcome"][mode] != "passed":
                    print(f"    {mode:<8} {row['outcome'][mode]}: {row['message'][mode]}", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("test_dir", help=f"folder with {TEST_FILE}, helper.py and testdata/")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {', '.join(MODES)}")
    parser.add_argument("--json", help="write all results to this JSON file")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per mode (default 3600)")
    parser.add_argument("--test-timeout", type=float, default=600.0,
                        help="seconds per test before it counts as crashed (default 600, 0 = none)")
    parser.add_argument("--python", default=sys.executable, help="interpreter with onnxruntime/onnxwrapper/pytest")
    parser.add_argument("--cache-dir", help="onnxwrapper compile cache for the qnn mode (default: a fresh one)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression to run a subset")
    parser.add_argument("--inert", default=",".join(DEFAULT_INERT),
                        help="comma-separated tests that do nothing on this host (excluded from the host counts)")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {unknown}; choose from {', '.join(MODES)}")
    if not os.path.isfile(os.path.join(args.test_dir, TEST_FILE)):
        parser.error(f"{args.test_dir} has no {TEST_FILE}")
    qnn_options = default_qnn_options() if "ort-qnn" in modes else {}
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731

    by_mode, complete = {}, True
    for mode in modes:
        log(f"running mode {mode} …")
        by_mode[mode] = run_mode(mode, os.path.abspath(args.test_dir), python=args.python, timeout=args.timeout,
                                 test_timeout=args.test_timeout, keyword=args.keyword, cache_dir=args.cache_dir,
                                 qnn_options=qnn_options, log=log)
        complete &= all(t["outcome"] != "not run" for t in by_mode[mode]["tests"].values())
        log(f"  {mode}: done in {by_mode[mode]['seconds']} s")
    comparison = compare(by_mode, {t.strip() for t in args.inert.split(",") if t.strip()})
    print_report(by_mode, comparison)
    if args.json:
        import onnxruntime
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"onnxruntime": onnxruntime.__version__, "qnn_ep_options": qnn_options, "modes": by_mode,
                       **comparison}, f, indent=1)
    return 0 if complete else 1


if __name__ == "__main__":
    raise SystemExit(main())
