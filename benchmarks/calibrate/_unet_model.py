"""The generated diffusion-style U-Net of ``calibrate_fix_speed.py`` (about 2000 nodes), built with the
generated-model helpers of the test suite (tests/repair_models.py)."""

from __future__ import annotations

import numpy as np
import onnx.numpy_helper as nh
from onnx import helper as h

from tests.repair_models import _conv, _silu, _vi, make_model

__all__ = ["unet"]


def unet(blocks: int = 55, levels: int = 3, channels: int = 8, size: int = 32, seed: int = 25) -> bytes:
    """A generated diffusion-style U-Net for the speed of ``aipc fix`` at scale: ``levels`` encoder levels
    of ``blocks`` residual blocks ``h + Conv(SiLU(InstanceNorm(Conv(h))))`` (6 nodes each) and a stride-2
    ``Conv`` down; a bottleneck block whose first ``Conv`` has a weight 1e6 times larger (its output,
    ≈ 1e6, leaves FP16's range right before an ``InstanceNormalization``, as the real U-Net's 2.2e10);
    ``levels`` decoder levels of ``Resize`` ×2, ``Concat`` with the encoder's skip, a ``Conv`` back to
    ``channels`` and ``blocks`` residual blocks. 12·levels·blocks + 4·levels + 7 nodes (1999 by
    default). x, y: float[1, channels, size, size]."""
    rng = np.random.default_rng(seed)
    c = channels
    nodes, inits = [], [nh.from_array(np.ones(c, np.float32), "gamma"), nh.from_array(np.zeros(c, np.float32), "beta"),
                        nh.from_array(np.array([1, 1, 2, 2], np.float32), "up2")]

    def weight(name, shape, scale):
        inits.append(nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def block(x, p, first_scale=0.3, second_scale=0.05):
        w1, w2 = weight(f"{p}/w1", (c, c, 3, 3), first_scale), weight(f"{p}/w2", (c, c, 3, 3), second_scale)
        nodes.extend([_conv(x, w1, f"{p}/c1", f"{p}/conv1"),
                      h.make_node("InstanceNormalization", [f"{p}/c1", "gamma", "beta"], [f"{p}/n"], name=f"{p}/norm",
                                  epsilon=1e-5)]
                     + _silu(f"{p}/n", f"{p}/s", f"{p}/act")
                     + [_conv(f"{p}/s", w2, f"{p}/c2", f"{p}/conv2"),
                        h.make_node("Add", [x, f"{p}/c2"], [f"{p}/h"], name=f"{p}/skip")])
        return f"{p}/h"

    x, skips = "x", []
    for lv in range(levels):
        for b in range(blocks):
            x = block(x, f"down{lv}/b{b}")
        skips.append(x)
        nodes.append(h.make_node("Conv", [x, weight(f"down{lv}/wd", (c, c, 3, 3), 0.3)], [f"down{lv}/d"],
                                 name=f"down{lv}/downsample", pads=[1, 1, 1, 1], strides=[2, 2]))
        x = f"down{lv}/d"
    x = block(x, "mid", first_scale=1e6, second_scale=3.0)
    for lv in reversed(range(levels)):
        nodes += [h.make_node("Resize", [x, "", "up2"], [f"up{lv}/u"], name=f"up{lv}/upsample", mode="nearest"),
                  h.make_node("Concat", [f"up{lv}/u", skips[lv]], [f"up{lv}/cat"], name=f"up{lv}/concat", axis=1),
                  _conv(f"up{lv}/cat", weight(f"up{lv}/wc", (c, 2 * c, 3, 3), 0.2), f"up{lv}/m", f"up{lv}/merge")]
        x = f"up{lv}/m"
        for b in range(blocks):
            x = block(x, f"up{lv}/b{b}")
    nodes.append(h.make_node("Identity", [x], ["y"], name="out"))
    shape = [1, c, size, size]
    return make_model(h.make_graph(nodes, "unet", [_vi("x", shape)], [_vi("y", shape)], inits))
