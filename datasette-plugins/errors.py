"""How a Datasette with the plugin answers an error (the ``handle_exception``
hook): as Datasette's own handler does (the same status, the same JSON for a
``.json`` path, the same ``{status}.html`` or ``error.html`` template), but
without printing it with rich.

Datasette 0.65's default handler (datasette/handle_exception.py) calls
``rich.get_console().print_exception(show_locals=True)`` whenever rich is
importable, for every error: a 404 then costs 0.3-0.5 s and a traceback with
its locals on stdout, and a URL no route matches (handled outside an
``except`` block) makes rich raise ValueError, which answers 500. Datasette
awaits the answer of every implementation of the hook and sends the first, so
another answer first does not stop that one from printing: the plugin puts
its answer in the place of the default's (``instead_of_default``, called from
a hook wrapper), and the other plugins' answers keep theirs.
"""

from __future__ import annotations

import functools
import pdb
import traceback

from datasette import Response
from datasette.utils import add_cors_headers
from datasette.utils.asgi import Base400
from datasette.views.base import DatasetteError
from markupsafe import Markup

# The module of Datasette's default handle_exception hook: the answer it
# gives (its inner coroutine function) is defined there.
DEFAULT_HANDLER_MODULE = "datasette.handle_exception"


def instead_of_default(answers: list, datasette, request, exception) -> list:
    """The hook's answers with the plugin's ``answer`` in the place of
    Datasette's default one (the others as they are, in their order)."""
    ours = functools.partial(answer, datasette, request, exception)
    return [ours if getattr(a, "__module__", None) == DEFAULT_HANDLER_MODULE else a
            for a in answers]


async def answer(datasette, request, exception) -> Response:
    """Datasette's answer to ``exception`` (datasette/handle_exception.py),
    rich left out: a 4xx (Base400, or a DatasetteError with its status) is
    answered with its message and nothing printed; any other exception is a
    500 whose traceback goes to stderr."""
    if datasette.pdb:
        pdb.post_mortem(exception.__traceback__)
    title = None
    if isinstance(exception, Base400):
        status, info, message = exception.status, {}, exception.args[0]
    elif isinstance(exception, DatasetteError):
        status, info, message = exception.status, exception.error_dict, exception.message
        if exception.message_is_html:
            message = Markup(message)
        title = exception.title
    else:
        status, info, message = 500, {}, str(exception)
        traceback.print_exception(type(exception), exception, exception.__traceback__)
    info.update({"ok": False, "error": message, "status": status, "title": title})
    headers = {}
    if datasette.cors:
        add_cors_headers(headers)
    if request.path.split("?")[0].endswith(".json"):
        return Response.json(info, status=status, headers=headers)
    template = datasette.jinja_env.select_template([f"{status}.html", "error.html"])
    return Response.html(await template.render_async(dict(
        info, urls=datasette.urls, app_css_hash=datasette.app_css_hash(),
        menu_links=lambda: [])), status=status, headers=headers)
