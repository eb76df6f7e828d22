"""A run of ``bertfeat extract``, from options to files: ``api.py`` (``bertfeat.extract``), ``options.py`` (every option
declared once: ``ExtractOptions``), ``plan.py`` (every option checked once into one frozen ``ExtractPlan``), the two
engines that execute a plan (``local.py``, ``dask.py`` with ``dask_cluster.py``), their one failure policy
(``failures.py``), a chunk's work (``chunks.py``), what both engines share (``jobcore.py``: feature settings,
provenance, the resume manifest, the PCA steps, the summary), output rules and the run lock (``safety.py``,
``outlock.py``), progress (``progress.py``) and ``--estimate`` (``estimate.py``). Nothing below this folder knows
which engine runs it."""
