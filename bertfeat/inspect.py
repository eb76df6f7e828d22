"""Looking inside a model: info, tokens, attention maps, fill-mask."""

from __future__ import annotations

from pathlib import Path

from .config import BertConfig
from .hub import resolve_model


def model_info(model: str | None = None) -> dict:
    """Config, parameter count, default pooling, max length and where the model was found."""
    from .encoder import Encoder

    enc = Encoder(model)
    w = enc.weights
    return {
        "model_id": enc.model_id,
        "path": str(enc.location.path),
        "found_in": enc.location.source,
        "parameters": w.n_params,
        "weights_files": [Path(f).name for f in w.files],
        "pooler": "yes" if w.pooler_w is not None else f"no ({w.missing_pooler_reason})",
        "mlm_head": "yes" if w.mlm is not None else "no",
        "default_pooling": f"{enc.default_pooling} ({enc.pooling_source})",
        "max_length": enc.max_length,
        "tokenizer": enc.tokenizer.source,
        "config": enc.config.to_dict(),
    }
