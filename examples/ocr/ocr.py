"""Read the printed text in an image with RapidOCR on ONNX Runtime and print one line per text line.

A plain onnxruntime application: nothing in it knows about onnxwrapper or aipc. Run it as is
on the CPU, or unchanged on the NPU backend::

    python examples/ocr/ocr.py                   # onnxruntime, CPU
    python -m aipc examples/ocr/ocr.py           # the same script, sessions on the QNN backend

It uses the three ONNX models that ship inside the ``rapidocr`` wheel (text detector, angle
classifier, recognizer) by explicit path, so nothing is ever downloaded, and prints only the
recognised text, so the output can be compared across runs. See README.md.

Usage: ``python examples/ocr/ocr.py [--models DIR] [IMAGE]`` (default image: ``text.png`` next to
this file; default models: the ones inside the rapidocr package). ``--models DIR`` reads the three
models from a folder of your own, e.g. a copy next to which ``aipc compile`` put precompiled
``<stem>_ctx.onnx`` artifacts.
"""

import argparse
import sys
from pathlib import Path

import rapidocr
from rapidocr import EngineType, RapidOCR

MODELS = Path(rapidocr.__file__).resolve().parent / "models"
DET, CLS, REC = "PP-OCRv6_det_small.onnx", "ch_ppocr_mobile_v2.0_cls_mobile.onnx", "PP-OCRv6_rec_small.onnx"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Print the text lines RapidOCR reads in an image.")
    parser.add_argument("image", nargs="?", type=Path, default=Path(__file__).with_name("text.png"))
    parser.add_argument("--models", type=Path, default=MODELS, help="folder holding the three ONNX models")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    image, models = args.image, args.models
    missing = [name for name in (DET, CLS, REC) if not (models / name).is_file()]
    if missing:
        print(f"this example needs the models that rapidocr 3.10 ships ({', '.join(missing)} not in {models}); "
              f"pip install 'rapidocr==3.10.0'", file=sys.stderr)
        return 1
    engine = RapidOCR(params={
        "Global.log_level": "error",
        "Det.engine_type": EngineType.ONNXRUNTIME,
        "Det.model_path": str(models / DET),
        "Det.limit_type": "max",          # detect at the image's own size (at most 640 px) instead
        "Det.limit_side_len": 640,        # of upscaling its short side to 736 px
        "Cls.engine_type": EngineType.ONNXRUNTIME,
        "Cls.model_path": str(models / CLS),
        "Rec.engine_type": EngineType.ONNXRUNTIME,
        "Rec.model_path": str(models / REC),
    })
    result = engine(str(image))
    for text in result.txts or ():
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
