"""A run of ``bertfeat extract``, from options to files: ``api.py`` (``bertfeat.extract``), ``options.py`` (every option
declared once: ``ExtractOptions``), ``plan.py`` (every option checked once into one frozen ``ExtractPlan``), the two
engines that execute a plan (``local.py``, ``dask.py`` with ``dask_cluster.py``), their one failure policy
(``failures.py``), a chunk's work (``chunks.py``), what both engines share (the loaded model and its feature
settings: ``encoder_setup.py``; the resume manifest: ``manifest.py``; the PCA steps and the report's label probe:
``pca_steps.py``; the run's counts: ``summary.py``; the provenance: ``provenance.py``), what a command writes and its
overwrite rules (``outputs.py``), the run lock (``outlock.py``), progress (``progress.py``) and ``--estimate``
(``estimate.py``). Nothing below this folder knows which engine runs it."""
