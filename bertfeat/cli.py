"""The `bertfeat` command line: thin Typer commands over the library.

Each command validates its options, calls one library function and renders the result.
A BertfeatError becomes ``Error: what - how to fix`` on stderr with exit code 1, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from . import __version__
from .errors import BertfeatError

app = typer.Typer(
    name="bertfeat",
    help="Offline BERT sentence features in pure NumPy: extract, reduce with PCA, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)
out_console = Console()

MODEL_HELP = "Model: a local directory, a hub id in the Hugging Face cache, or all-MiniLM-L6-v2 (default)."


def _version(value: bool):
    if value:
        typer.echo(f"bertfeat {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit.")):
    """Offline BERT sentence features in pure NumPy."""


@app.command()
def info(
    model: Optional[str] = typer.Argument(None, help=MODEL_HELP),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
):
    """Show a model's config, parameter count, default pooling and where it was found."""
    from .inspect import model_info

    d = model_info(model)
    if json_out:
        import json

        typer.echo(json.dumps(d, indent=2))
        return
    from rich.table import Table

    t = Table(title=f"bertfeat info: {d['model_id']}", show_header=False)
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    for k, v in d.items():
        if k == "config":
            continue
        t.add_row(k, str(v))
    for k, v in d["config"].items():
        t.add_row(f"config.{k}", str(v))
    out_console.print(t)


def _register_optional():
    """Sub-commands that live in their own modules."""
    try:
        from .cli_pca import pca_app, report_command
    except ImportError:  # pragma: no cover - during development
        return
    app.add_typer(pca_app, name="pca", help="Fit a PCA on a features file, or apply one.")
    app.command("report")(report_command)


_register_optional()


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app, turning library errors into one-line messages."""
    try:
        app(args=argv, standalone_mode=False, prog_name="bertfeat")
    except BertfeatError as e:
        err_console.print(f"Error: {e.message}", markup=False, highlight=False, soft_wrap=True)
        return e.exit_code
    except KeyboardInterrupt:
        err_console.print("Interrupted.", markup=False)
        return 130
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        err_console.print("Aborted.", markup=False)
        return 1
    except Exception as e:  # click usage errors
        import click

        if isinstance(e, click.ClickException):
            e.show()
            return e.exit_code
        raise
    return 0


def entry():  # pragma: no cover
    sys.exit(main())
