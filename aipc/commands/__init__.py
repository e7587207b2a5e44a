"""The aipc subcommands, one module each (``aipc.commands.<name>``: ``add_arguments(parser)``, ``main(args)``)."""

__all__: list[str] = []
