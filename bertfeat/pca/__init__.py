"""The streaming exact PCA and what surrounds it: the estimator (``estimator.py``, scikit-learn's conventions and its
protocol without importing it: ``sklearn_protocol.py``), input checks (``validation.py``), streaming statistics
(``stats.py``), solvers and signs (``solvers.py``), the ``.npz`` model file (``file.py``), file-level fit / transform
(``reduce.py``) and which PCA reduced which features (``lineage.py``), the explained-variance report (``report.py``) with its linear probe of a label (``probe.py``), and
the key-by-key comparison of two settings dicts behind PCA fingerprints and resume manifests (``diffs.py``)."""


def __getattr__(name):  # lazy: importing a submodule (the CLI's) does not import the estimator
    if name == "PCA":
        from .estimator import PCA

        return PCA
    raise AttributeError(name)
