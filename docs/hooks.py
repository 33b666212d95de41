"""mkdocs hook (mkdocs.yml): the generated parts of the pages, made at build
time from the code (indexer/cli/reference.py), so they cannot drift."""

from indexer.cli import reference


def on_page_markdown(markdown, page, config, files):
    return reference.expand(markdown)
