"""``python -m indexer`` runs the session-index command."""

from .entry import main

main()
