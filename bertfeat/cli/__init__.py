"""The command line: the Typer app (``app.py``: extract, sweep, verify, info and the app itself), one module per
command group (``pca.py``, ``inspect.py``, ``cache.py``). A command validates its flags, calls one library function
and renders; nothing here computes. Importing it imports no numeric module (``bertfeat --help`` is instant)."""
