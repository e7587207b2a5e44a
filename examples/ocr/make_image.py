"""Regenerate ``text.png``, the input of ``ocr.py``: three lines of printed text, black on white.

Deterministic for a given Pillow version (it uses Pillow's bundled font, no system fonts).
The shipped ``text.png`` was made with Pillow 13.0; ``ocr.py`` never regenerates it, so the
example's input is the same on every machine. Run: ``python examples/ocr/make_image.py``.
"""

from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

LINES = ["ONNX Runtime on the NPU", "aipc runs scripts unchanged", "Invoice 2026-11 total 42.50"]


def main() -> None:
    font = ImageFont.load_default(size=28)
    image = Image.new("L", (480, 160), 255)
    draw = ImageDraw.Draw(image)
    for number, line in enumerate(LINES):
        draw.text((20, 16 + 46 * number), line, fill=0, font=font)
    out = Path(__file__).with_name("text.png")
    image.save(out, optimize=True)
    print(f"wrote {out.name} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
