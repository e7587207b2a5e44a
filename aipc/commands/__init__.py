"""The aipc subcommands, one public module each, imported by name only when invoked (:mod:`aipc.cli`).

Each ``aipc.commands.<name>`` exposes ``add_arguments(parser)`` and ``main(args) -> int`` and ends
in public calls of :mod:`aipc_loader`, :mod:`onnxwrapper`, :mod:`onnxwrapper.diff` or
:mod:`onnxwrapper.toolkit`:

* :mod:`~aipc.commands.run` — ``aipc [run] script.py`` (parsed by hand: the script's arguments
  stay untouched), and the dispatch of a ``.onnx`` path to :mod:`~aipc.commands.model`;
* :mod:`~aipc.commands.model` — ``aipc run MODEL.onnx`` / ``aipc diff --model``, a plan of calls
  built from argument groups (:mod:`aipc.args`);
* :mod:`~aipc.commands.diff`, :mod:`~aipc.commands.fix`, :mod:`~aipc.commands.inspect`,
  :mod:`~aipc.commands.compile`, :mod:`~aipc.commands.precompile` (``aipc compile
  --from-capture``), :mod:`~aipc.commands.capture`, :mod:`~aipc.commands.doctor`.

Private helpers: ``_progress`` (tqdm bars of the commands that run backends), ``_qnn_profile`` and
``_compile_recipe`` (``aipc compile --profile`` / ``--repairs``), ``_capture_signatures`` (what
``--from-capture`` compiles). Importing this package imports no command.
"""

__all__: list[str] = []
