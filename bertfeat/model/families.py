"""One dispatch point per model family: which weights loader, forward pass and MLM head a config.json's model_type
takes. BERT, RoBERTa, XLM-RoBERTa, CamemBERT, ELECTRA and DistilBERT share BERT's (weights.py maps their names;
bert.py); MPNet and ModernBERT have their own (mpnet.py, modernbert.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .config import MODERNBERT_TYPES, MPNET_TYPES, ROBERTA_TYPES, BertConfig
from .bert import ForwardOutput, Workspace, bert_forward, mlm_logits
from .modernbert import ModernBertWeights, load_modernbert_weights, modernbert_forward, modernbert_mlm_logits
from .mpnet import MPNetWeights, load_mpnet_weights, mpnet_forward
from .weights import BertWeights, load_weights


def load_model_weights(model_dir: str | Path, config: BertConfig, precision: str = "fp32") -> BertWeights:
    """The family's weights loader (every tensor name and shape checked)."""
    if config.model_type in MPNET_TYPES:
        return load_mpnet_weights(model_dir, config, precision)
    if config.model_type in MODERNBERT_TYPES:
        return load_modernbert_weights(model_dir, config, precision)
    return load_weights(model_dir, config, precision)


def forward(w: BertWeights, input_ids: np.ndarray, token_type_ids: np.ndarray, attention_mask: np.ndarray,
            keep: tuple[int, ...] | None = None, output_attentions: bool = False,
            ws: Workspace | None = None, at: np.ndarray | None = None) -> ForwardOutput:
    """The family's forward pass (bert.bert_forward's arguments and result)."""
    if isinstance(w, MPNetWeights):
        return mpnet_forward(w, input_ids, token_type_ids, attention_mask, keep, output_attentions, ws, at)
    if isinstance(w, ModernBertWeights):
        return modernbert_forward(w, input_ids, token_type_ids, attention_mask, keep, output_attentions, ws, at)
    return bert_forward(w, input_ids, token_type_ids, attention_mask, keep, output_attentions, ws, at)


def mlm_head_logits(w: BertWeights, h: np.ndarray) -> np.ndarray:
    """(M, H) last hidden states -> (M, V) logits of the family's masked-LM head."""
    if isinstance(w, MPNetWeights):
        return mlm_logits(w, h, act="gelu")  # MPNetLMHead: the exact GELU, whatever hidden_act says
    if isinstance(w, ModernBertWeights):
        return modernbert_mlm_logits(w, h)
    if w.config.model_type in ROBERTA_TYPES:
        return mlm_logits(w, h, act="gelu")  # RobertaLMHead (XLM-R, CamemBERT): the exact GELU too
    return mlm_logits(w, h)
