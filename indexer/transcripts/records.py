"""What a transcript record is, for every reader of the package.

(For now the chain types only, which the chain's SQL needs below the index:
the record model of issue 25 is being built here.)"""

from __future__ import annotations

# The record types that carry uuid/parentUuid links (the Agent SDK's
# _TRANSCRIPT_ENTRY_TYPES): the one list resume.py, chain.py, conversation.py
# and the pages use. Other record types are metadata.
CHAIN_TYPES = ("user", "assistant", "progress", "system", "attachment")
CHAIN_TYPES_SQL = "(" + ",".join(f"'{t}'" for t in CHAIN_TYPES) + ")"
