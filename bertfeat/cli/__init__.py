"""The command line: the Typer app (``app.py``: extract, sweep, verify, info and the app itself), the other commands
(``pca.py``: pca fit / transform and report; ``inspect.py``: tokens, attention, fill-mask; ``cache.py``: cache info /
clear), and how a failure is shown (``render.py``: one line, what and how to fix; the traceback only with
``--debug``). A command validates its flags, calls one library function and renders; nothing here computes.
Importing it imports no numeric module (``bertfeat --help`` is instant)."""
