"""One session answered and mended: the resume verdict (check), the
conversation it holds (show), repair, export and restore, and the real CLI
as the oracle (verify)."""
