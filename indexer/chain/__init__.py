"""How a resume reads a transcript: the leaf rules of the Claude Code CLI, the
walks up parentUuid, and which main transcript a resume opens."""
