"""Texts to vectors: finding a model's files (``hub.py``), its config (``config.py``) and weights (``weights.py``:
one name table per family, every shape asserted; every weights file, the encoder's and its modules', is read there), tokenization (``tokenize.py``; the special and added tokens a folder declares: ``declared.py``), the forward passes (``bert.py``,
``mpnet.py``, ``modernbert.py``; ``families.py`` loads a family's weights by model_type and runs its forward pass by the weights' class), pooling (``pooling.py``), the model's own
sentence-transformers modules (``stmodules.py``; torch.save's ``pytorch_model.bin``, the encoder's or a module's, read
without unpickling: ``torchfile.py``) and ``Encoder`` (``encoder.py``: batches, long texts, threads; what a vector means:
``spec.py``; the texts' checks and the errors naming rows: ``inputs.py``; batches and windows: ``batching.py``;
``encoder_cache.py`` keeps one per model and settings per process). Every linear layer goes through ``bertfeat.ops``."""
