"""The optional features' packages, each named once, as the message that asks
for one says to install them: by their names on PyPI (session-index itself is
not published there, so the extra's name on PyPI would name a
package that does not exist, or someone else's). From a checkout the extras
of pyproject.toml bring the same: ``pip install '.[fleet]'``."""

from __future__ import annotations

# Each extra of pyproject.toml: the PyPI requirements it stands for.
PACKAGES = {
    "fleet": ("nats-py[nkeys]", "prometheus-client"),   # ship, ingest --from, --metrics
    "store": ("claude-agent-sdk",),   # the SessionStore's summaries
    "verify": ("claude-agent-sdk",),  # verify: it bundles the Claude Code binary
}


def install_hint(extra: str) -> str:
    """``pip install ...`` for an extra's packages, quoted for a shell."""
    return "pip install " + " ".join(f"'{p}'" if "[" in p else p for p in PACKAGES[extra])
