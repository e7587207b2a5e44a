"""``python -m aipc …``: the aipc command line (see ``aipc --help``)."""

if __name__ == "__main__":
    from aipc.cli import main

    raise SystemExit(main())
