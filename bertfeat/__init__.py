"""bertfeat: offline BERT sentence features in pure NumPy."""

from .version import __version__  # noqa: E402

from .ops.threads import prefer_avx512_blas  # noqa: E402  (must run before NumPy loads)

prefer_avx512_blas()

from .errors import BertfeatError  # noqa: E402

__all__ = ["Encoder", "PCA", "BertfeatError", "extract", "__version__"]


def __getattr__(name):  # lazy: `import bertfeat` stays cheap for the CLI
    if name == "Encoder":
        from .model.encoder import Encoder

        return Encoder
    if name == "extract":
        from .run.api import extract

        return extract
    if name == "PCA":
        from .pca.estimator import PCA

        return PCA
    raise AttributeError(name)
