"""``python -m bertfeat``: the same CLI as the ``bertfeat`` command."""

from .cli.app import entry

if __name__ == "__main__":
    entry()
