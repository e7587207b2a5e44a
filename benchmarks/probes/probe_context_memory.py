"""Does a released QNN context give its memory back? Load and release one context N times and
print the process's resident memory (RSS) as it goes; optionally keep distinct contexts loaded
until a load fails, to find the HTP's limit on this host.

Usage::

    python benchmarks/probes/probe_context_memory.py [--dim 2048] [--loops 50]
    python benchmarks/probes/probe_context_memory.py --dim 4096 --until-failure   # minutes on the simulator

The model is ``y = MatMul(Relu(MatMul(x, W1)), W2)`` with ``W`` of ``dim × dim`` floats (a context
binary of ≈ 2·dim² FP16 bytes: 16 MiB at 2048, 64 MiB at 4096). Measured on the x86-64 HTP simulator
(onnxruntime-qnn 2.7.0), see docs/backends/qnn.md "Loaded contexts". Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxwrapper


def rss_mb() -> float:
    """Resident memory of this process in MiB."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def model(dim: int, batch) -> bytes:
    """The probe model (module docstring); ``batch`` an int or a dim name."""
    rng = np.random.default_rng(0)
    weights = [nh.from_array(rng.standard_normal((dim, dim)).astype(np.float32) * 0.01, n) for n in ("w1", "w2")]
    g = h.make_graph([h.make_node("MatMul", ["x", "w1"], ["t"]), h.make_node("Relu", ["t"], ["r"]),
                      h.make_node("MatMul", ["r", "w2"], ["y"])], "ctx_probe",
                     [h.make_tensor_value_info("x", T.FLOAT, [batch, dim])],
                     [h.make_tensor_value_info("y", T.FLOAT, [batch, dim])], weights)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9).SerializeToString()


def loop(dim: int, loops: int, cache: str) -> None:
    data = model(dim, 1)
    x = np.ones((1, dim), np.float32)
    first = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"cache_dir": cache})
    first.run(None, {"x": x})
    ctx = first.backend_session.ort_args.path_or_bytes
    size = sum(os.path.getsize(os.path.join(os.path.dirname(ctx), f)) for f in os.listdir(os.path.dirname(ctx))
               if f.endswith(".bin"))
    first.close()
    del first
    gc.collect()
    start = rss_mb()
    print(f"context binary {size / 2**20:.1f} MiB; RSS after the first load and release {start:.0f} MiB")
    t0 = time.perf_counter()
    for i in range(1, loops + 1):
        session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"cache_dir": cache})
        session.run(None, {"x": x})
        session.close()
        del session
        gc.collect()
        if i % 5 == 0 or i == 1:
            print(f"load+release {i:3d}: RSS {rss_mb():6.0f} MiB ({rss_mb() - start:+.0f})")
    print(f"{loops} loads in {time.perf_counter() - t0:.1f} s; RSS grew {rss_mb() - start:+.0f} MiB in all "
          f"({(rss_mb() - start) / loops:.1f} MiB per load vs {size / 2**20:.1f} MiB per context)")


def until_failure(dim: int, cache: str) -> None:
    data = model(dim, "n")
    session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={
        "cache_dir": cache, "max_specializations": 1000, "context_memory_mb": 1 << 20})
    for n in range(1, 1000):
        try:
            session.run(None, {"x": np.ones((n, dim), np.float32)})
        except Exception as exc:  # noqa: BLE001 - the probe reports whatever ends it
            print(f"load {n} failed with {len(session.backend_session._live)} contexts loaded "
                  f"({session.backend_session._live_mb():.0f} MiB): {type(exc).__name__}: {str(exc)[:200]}")
            return
        print(f"{n} contexts loaded, {session.backend_session._live_mb():.0f} MiB of binaries, RSS {rss_mb():.0f} MiB",
              flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--loops", type=int, default=50)
    parser.add_argument("--until-failure", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as cache:
        if args.until_failure:
            until_failure(args.dim, cache)
        else:
            loop(args.dim, args.loops, cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
