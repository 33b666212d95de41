"""The session-index command: a thin click CLI, the console script's fast
paths, output formats and the web service launcher."""
