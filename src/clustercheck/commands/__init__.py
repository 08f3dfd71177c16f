"""Subcommands beyond the core ones of app.py: one module each, with `register(app)`.

A module here defines its Typer command(s) and registers them on the app; app.py finds
every module of this package, so adding a subcommand touches no other file.
"""
