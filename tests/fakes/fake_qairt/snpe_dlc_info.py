"""FAKE for tests — NOT Qualcomm's snpe-dlc-info.

``snpe-dlc-info -i <dlc> [-s <csv>]`` on a fake DLC (``fake_qnn_graph.py``): writes the IO tables
in the CSV layout consumers of the real tool parse (sections ``Input Name,Dimensions,Type`` and
``Output Name,Dimensions,Type``, dims as a quoted comma list, SNPE type names such as
``Float_32``/``uFxp_8``), followed by ``Total parameters``; without ``-s`` it prints a ``|`` table.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fake_qnn_graph as fq  # noqa: E402


def render(spec: dict, pipes: bool) -> str:
    g = spec["graphs"][0]
    lines = []
    for section, tensors in (("Input", g["inputs"]), ("Output", g["outputs"])):
        rows = [(f"{section} Name", "Dimensions", "Type")]
        rows += [(t["name"], ",".join(str(d) for d in t["shape"]), fq.dlc_type_name(t["dtype"])) for t in tensors]
        for i, (a, b, c) in enumerate(rows):
            if pipes:
                lines.append(f"| {a} | {b} | {c} |")
                if i == 0:
                    lines.append("|----|----|----|")
            else:
                lines.append(f'{a},"{b}",{c}' if i else f"{a},{b},{c}")
    lines.append("Total parameters: 0 (0 MB assuming single precision float)")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="snpe-dlc-info", allow_abbrev=False)
    p.add_argument("-i", "--input_dlc", required=True)
    p.add_argument("-s", "--save")
    args = p.parse_args(argv)
    try:
        spec = fq.load_artifact(args.input_dlc)
    except fq.NotAFakeArtifact as exc:
        sys.stderr.write(f"FAKE snpe-dlc-info: error: cannot read {args.input_dlc}: {exc}\n")
        return 1
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            f.write(render(spec, pipes=False))
    else:
        sys.stdout.write(f"DLC info for: {os.path.abspath(args.input_dlc)}\n" + render(spec, pipes=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
