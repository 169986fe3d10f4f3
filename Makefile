# Two commands for a newcomer: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint pytest dist wheel-check zoo zoo-layout zoo-calibrate cluster-demo bench bench-kineto bench-dashboard install clean bench-record bench-synth bench-scale fuzz

$(STAMP): pyproject.toml tools/setup_venv.py
	@# torch: the one $(PYTHON) has, else a wheel on this machine, else the CPU-only build (never PyPI's
	@# multi-GB CUDA build on Linux); pip's output goes to $(VENV)/install.log. TORCH_INDEX_URL=... overrides.
	@$(PYTHON) tools/setup_venv.py $(VENV)
	@touch $(STAMP)

install: $(STAMP)

DEMO_OUT ?= runs/demo
# Records a fresh 4-rank Gloo run (TP=2 x DP=2, about 12 s on 2 cores) and prints its analysis last. 20 profiled
# steps: fewer are too few to tell a straggler from a rank a busy host held back (make zoo-calibrate).
# OMP_NUM_THREADS=1 and KINETO_LOG_LEVEL=6 only silence torchrun's OMP notice and the profiler's
# start/stop lines in the demo; a run of yours keeps its own settings. tests/test_demo.py runs this target.
demo: $(STAMP)
	@echo "demo: recording sample_traces/train_3d.py on 4 CPU ranks (TP=2 x DP=2, Gloo) into $(DEMO_OUT)"
	@echo "demo: how to read what follows: docs/reading.md; explore it: $(BIN)/commprof dashboard $(DEMO_OUT)"
	@OMP_NUM_THREADS=1 KINETO_LOG_LEVEL=6 $(BIN)/commprof record -o $(DEMO_OUT) --force --active 20 -- \
		$(BIN)/torchrun --nproc-per-node 4 sample_traces/train_3d.py --tp 2 --dp 2 --steps 24

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test: lint pytest

# the sdist and the wheel into dist/ (python -m build: the wheel is built from the sdist), their metadata and the
# wheel's files checked: commprof/, analyzers/ and dashboard/ as commprof.analyzers and commprof.dashboard, their data
# files, the script (tools/check_dist.py). The build's output goes to $(VENV)/build.log
dist: $(STAMP)
	@rm -rf dist
	@$(BIN)/python -m build --outdir dist . >$(VENV)/build.log 2>&1 || { tail -30 $(VENV)/build.log; exit 1; }
	$(BIN)/python tools/check_dist.py dist

# the wheel as a user installs it: a fresh venv without torch, `pip install dist/<wheel>` (its requirements from the
# index, never torch), then that venv's commprof analyzes a sample, answers dashboard --help and serves the sample
# from outside the checkout (about 1 min; CI runs it after make test)
wheel-check: dist
	$(BIN)/python tools/check_dist.py dist --install

# the fault zoo: every fault of tests/zoo/train_zoo.py and its clean twins recorded 3 times on 4 Gloo ranks, each
# fault's cost by A/B inside one job twice, the calibration table printed and written to ZOO_OUT/calibration.md
# (about 35 min on 2 cores); then the multi-node case (make zoo-layout) into ZOO_OUT/layout. ZOO_ARGS="--reps 1 --faults slow_rank,clean"; --reanalyze DIR re-judges old recordings.
ifeq ($(origin ZOO_OUT), undefined)
ZOO_OUT := runs/zoo-$(shell date -u +%Y%m%d-%H%M%S)
endif
zoo: $(STAMP)
	$(BIN)/python tests/zoo/zoo.py --out $(ZOO_OUT) $(ZOO_ARGS)
	@# the multi-node case (TP inside vs across nodes) on a namespace cluster; exit 2: no namespaces here (not root)
	@$(BIN)/python tests/zoo/layout_zoo.py --out $(ZOO_OUT)/layout $(ZOO_LAYOUT_ARGS); s=$$?; \
		if [ $$s -eq 2 ]; then echo "zoo: the layout case needs network namespaces (root); skipped"; else exit $$s; fi

# the calibration the product reads: (1) the straggler rule: clean jobs (4 and 8 ranks, a pp=2 x dp=2 pipeline) and a
# slow-rank job recorded beside a busy process, cut into windows of 3, 5, 10 and 20 profiled steps and judged; (2) every
# kind of what-if against running the changed job (single node, and a namespace cluster as root); (3) make demo afresh
# 20 times beside a busy process. Tables into docs/findings.md, the measured rates and error bands into analyzers/calibration.json
# (about 30 min).
# CALIBRATE_ARGS="--reps 2 --busy 2" WHATIF_ARGS="--reps 2 --no-cluster"
CALIBRATE_OUT ?= runs/calibrate
zoo-calibrate: $(STAMP)
	$(BIN)/python tests/zoo/calibrate.py record --out $(CALIBRATE_OUT) $(CALIBRATE_ARGS)
	$(BIN)/python tests/zoo/calibrate.py table $(CALIBRATE_OUT) --write
	@# make demo recorded afresh 20 times beside a busy process: at most 1 may name a rank above info (exit 1 otherwise)
	$(BIN)/python tests/zoo/calibrate.py demo --out $(CALIBRATE_OUT)/demo --runs 20 --busy 1
	@# every kind of what-if against running the changed job (the cluster cases need root: skipped without it)
	$(BIN)/python tests/zoo/whatif_check.py --out $(CALIBRATE_OUT)/whatif --write $(WHATIF_ARGS)

# a job across a cluster of network namespaces (root): nodes with their own hostname and loopback, linked at 4 Gbit/s
# (tests/netns_cluster.py), sample_traces/train_3d.py recorded by one commprof record per node into one folder,
# then analyzed. CLUSTER_ARGS="--nodes 4 --racks 2 --shape separate|srun|mpirun --tp-across-nodes"
cluster-demo: $(STAMP)
	$(BIN)/python tests/multinode.py $(CLUSTER_ARGS)

# the zoo's multi-node case (root): TP inside vs across nodes on a namespace cluster, the tp_across_nodes finding and
# the layout what-if against the measured difference (about 5 min). ZOO_LAYOUT_ARGS="--reps 3 --gbit 0.5"
zoo-layout: $(STAMP)
	$(BIN)/python tests/zoo/layout_zoo.py $(ZOO_LAYOUT_ARGS)

# hostile input, thousands of cases: mutated traces, NCCL logs, reports, configs, nsys exports, Flight Recorder
# pickles, NCCL Inspector logs; then operator faults (kill -9 of a worker pool, concurrent commands on one folder,
# full disks) each followed by a clean re-run (make test: a small budget)
fuzz: $(STAMP)  # FUZZ_ARGS="--traces 2000 --logs 1000 --others 600 --operator 30 --seed 1"
	$(BIN)/python tests/fuzzlib.py $(FUZZ_ARGS)

# the revision before "one analysis, many views" (issue 9): the analysis must not be slower than it
BENCH_BASE ?= b7b7cbc

# vs HTA on the same files, nsys exports vs a bare SQL scan, this HEAD vs BENCH_BASE on the real trace and 64
# synthetic ranks; then issue 24's rows (Kineto, NCCL logs, 5,000 small traces, the dashboard under load), each
# against a floor measured in the same script, and one table of them all (bench/summary.py). About 25 min.
bench: $(STAMP)
	$(BIN)/python bench/bench_ingest.py
	$(BIN)/python bench/bench_nsys.py $(BENCH_NSYS_ARGS)
	$(BIN)/python bench/bench_versions.py --base $(BENCH_BASE) $(BENCH_VERSIONS_ARGS)
	$(BIN)/python bench/bench_kineto.py $(BENCH_KINETO_ARGS)
	$(BIN)/python bench/bench_nccl.py $(BENCH_NCCL_ARGS)
	$(BIN)/python bench/bench_small.py $(BENCH_SMALL_ARGS)
	$(BIN)/python bench/bench_dashboard_load.py $(BENCH_LOAD_ARGS)
	$(BIN)/python bench/summary.py

bench-kineto: $(STAMP)  # issue 24's Kineto rows: cold/warm analyze vs HTA, ingest MB/s per core, peak RSS of a 0.5 GB trace
	$(BIN)/python bench/bench_kineto.py $(BENCH_KINETO_ARGS)
	$(BIN)/python bench/summary.py

bench-versions: $(STAMP)  # HEAD vs BENCH_BASE only (BENCH_VERSIONS_ARGS="--repeat 7")
	$(BIN)/python bench/bench_versions.py --base $(BENCH_BASE) $(BENCH_VERSIONS_ARGS)

bench-dashboard: $(STAMP)
	$(BIN)/python bench/bench_dashboard.py

bench-record: $(STAMP)  # what record costs per step, by phase, 1 and 2 ranks (ranks <= cores); ~25 min
	$(BIN)/python bench/bench_record.py --nproc 1 --tp 1 --dp 1 $(BENCH_RECORD_ARGS)
	$(BIN)/python bench/bench_record.py --nproc 2 --tp 1 --dp 2 $(BENCH_RECORD_ARGS)

bench-nccl: $(STAMP)  # NCCL logs: all-NCCL 93 MB + a 1 GB app log with NCCL at its ends, rows to .bench/nccl.json (BENCH_NCCL_ARGS="--rare-mb 100 --base /tmp/base")
	$(BIN)/python bench/bench_nccl.py $(BENCH_NCCL_ARGS)

bench-synth: $(STAMP)  # 64-rank synthetic run, ~50 MB/rank: generate + analyze, vs HTA (BENCH_SYNTH_ARGS="--mb-per-rank 5")
	$(BIN)/python bench/bench_synth.py $(BENCH_SYNTH_ARGS)

# 256 ranks x >= 20 MB: 1 vs 2 workers, RSS per worker, HTA on 16 ranks, Flight Recorder dumps of 16,384 ranks
# (BENCH_SCALE_ARGS="--ranks 64 --no-fr"); then issue 39's frontier runs: 16,384 ranks cold / warm / Dask / --ranks,
# the 5,000-rank DP-2,500 run against BENCH_FRONTIER_BASE (a checkout of the revision before; none: not compared)
# (BENCH_FRONTIER_ARGS="--only 5k-dp2500 --no-dask"), and the cost of each stage as ranks, groups, calls and steps
# grow (BENCH_FITS_ARGS="--max-ranks 2048"), and the 16,384-rank run's NCCL logs (one per process) against the same
# lines in one file (and BENCH_NCCL_MANY_BASE's). About 1.5 h on 2 cores, the runs generated once (~15 GB under
# $COMMPROF_BENCH_CACHE, default /tmp/commprof-bench-scale).
bench-scale: $(STAMP)
	$(BIN)/python bench/bench_scale.py $(BENCH_SCALE_ARGS)
	$(BIN)/python bench/bench_frontier.py $(if $(BENCH_FRONTIER_BASE),--base $(BENCH_FRONTIER_BASE)) $(BENCH_FRONTIER_ARGS)
	$(BIN)/python bench/bench_fits.py $(BENCH_FITS_ARGS)
	$(BIN)/python bench/bench_nccl_many.py $(if $(BENCH_NCCL_MANY_BASE),--base $(BENCH_NCCL_MANY_BASE))

clean:
	rm -rf $(VENV) .bench-venv .pytest_cache .mypy_cache .ruff_cache
	find . -name tables -path '*sample_traces*' -type d -prune -exec rm -rf {} +
