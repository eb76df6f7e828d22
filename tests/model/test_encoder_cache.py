"""encoder_cache: one loaded Encoder per model files and settings per process, reloaded when a file changes."""

from __future__ import annotations

import json
import os
import shutil

from bertfeat.model.encoder_cache import clear, shared_encoder


def test_the_same_model_and_settings_share_one_encoder(minilm_dir, tmp_path):
    clear()
    a = shared_encoder(str(minilm_dir))
    assert shared_encoder(str(minilm_dir)) is a
    assert shared_encoder(str(minilm_dir), max_batch_tokens=128) is not a  # another load setting: another Encoder


def test_an_edited_module_folder_loads_again(minilm_dir, tmp_path):
    """A sentence-transformers Pooling config edited on disk (a subfolder, not the top level) is seen."""
    clear()
    d = tmp_path / "m"
    shutil.copytree(minilm_dir, d)
    a = shared_encoder(str(d))
    cfg = d / "1_Pooling" / "config.json"
    data = json.loads(cfg.read_text())
    data["pooling_mode_mean_tokens"], data["pooling_mode_cls_token"] = False, True
    cfg.write_text(json.dumps(data))
    os.utime(cfg, ns=(cfg.stat().st_atime_ns, cfg.stat().st_mtime_ns + 10**9))
    b = shared_encoder(str(d))
    assert b is not a and b.default_pooling == "cls" and a.default_pooling == "mean"
