"""visible.py: what the command's own styling needs goes through, nothing else."""

from indexer.cli import visible


def test_the_commands_own_styles_and_progress_bar_go_through():
    styled = "\x1b[31m\x1b[1mWARNING: x\x1b[0m and \x1b[1mmatch\x1b[0m\tcol\n"
    assert visible.escape(styled) == styled
    for level in ("\x1b[33mWARNING\x1b[0m", "\x1b[91mCRITICAL\x1b[0m"):   # uvicorn's
        assert visible.escape(level, visible.STDERR) == level
    bar = "\r\x1b[?25lIndexing  [####----]   50%\x1b[?25h\n"
    assert visible.escape(bar, visible.STDERR) == bar
    assert visible.escape(bar) == "\\u000d\\u001b[?25lIndexing  [####----]   50%\\u001b[?25h\n"


def test_every_other_control_is_its_json_escape():
    assert visible.escape("\x1b[8mhidden\x1b[30;40mblack\x1b[30m\x1b[97m\x1b[5m") == (
        "\\u001b[8mhidden\\u001b[30;40mblack\\u001b[30m\\u001b[97m\\u001b[5m")
    assert visible.escape("\x1b]52;c;c2VjcmV0\x07 \x1b[H\x9b2J \u202e\u2066 \x00\x7f") == (
        "\\u001b]52;c;c2VjcmV0\\u0007 \\u001b[H\\u009b2J \\u202e\\u2066 \\u0000\\u007f")


def test_the_writer_is_a_text_stream_click_uses_as_it_is():
    import io

    import click

    raw = io.StringIO()
    out = visible.Writer(raw)
    click.echo("a\x1b]0;t\x07b", file=out, color=True)
    assert raw.getvalue() == "a\\u001b]0;t\\u0007b\n"
    try:
        out.write(b"bytes")
    except TypeError:
        pass
    else:
        raise AssertionError("bytes written to the text layer")
