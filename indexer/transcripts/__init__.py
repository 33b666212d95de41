"""What Claude Code writes: the record model, a line made a row, the files
found under a source, the settings that say how long they are kept, and the
Agent SDK's reader ported."""
