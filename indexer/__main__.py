"""``python -m indexer`` runs the session-index command."""

from .cli import cli

cli()
