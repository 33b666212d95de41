"""Keeping the index current: ingest of transcript files (and a fleet's over
NATS), the caches derived from them, the watcher and the Agent SDK session
store."""
