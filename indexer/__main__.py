"""``python -m indexer`` runs the session-index command."""

from indexer.cli.entry import main

main()
