"""``python -m aipc …``: the aipc command line (see ``aipc --help``).

``python -m`` puts the working directory first on ``sys.path``; it is taken out before anything
else of aipc is imported (:func:`aipc._shadowing.drop_working_directory`), so that ``python -m aipc
fix .`` in a diff folder from elsewhere imports nothing shipped there (docs/security.md).
"""

if __name__ == "__main__":
    from aipc import _shadowing

    _shadowing.drop_working_directory()
    from aipc.cli import main

    raise SystemExit(main())
