"""One error type for everything a user can fix.

Every library error carries *what* went wrong and *how to fix it*; the CLI prints
``Error: what - how to fix`` on stderr and exits non-zero, with no traceback.
"""

from __future__ import annotations


class BertfeatError(ValueError):
    """An error the user can act on: ``what`` happened, ``fix`` says what to do.

    A ``ValueError``, so code written for scikit-learn or NumPy conventions (``except ValueError``)
    catches bertfeat's bad-input errors too.
    """

    exit_code = 1

    def __init__(self, what: str, fix: str | None = None):
        self.what = what
        self.fix = fix
        super().__init__(self.message)

    @property
    def message(self) -> str:
        return f"{self.what} - {self.fix}" if self.fix else self.what


class ModelNotFoundError(BertfeatError):
    """The model could not be found locally."""


class ConfigError(BertfeatError):
    """config.json asks for something bertfeat does not support."""


class WeightsError(BertfeatError):
    """A checkpoint is missing a tensor or has one of the wrong shape."""


class InputError(BertfeatError):
    """The input data (file, row, column) is bad."""


class ResumeError(BertfeatError):
    """A resume was refused because settings or inputs differ."""
