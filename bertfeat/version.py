"""The package version (its own module, so that modules that record it import no package __init__)."""

__version__ = "0.3.0.dev0"
