# The two commands of the README. Only Python 3.11+ is needed; everything else is installed here.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: dev test lint bench clean fuzz isolation faults soak citus citus-stop test-citus

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

## make dev: embedded Postgres, migrations, the sample knowledge base, and the server on 127.0.0.1:8000
## (PORT=8001 make dev for another port). Ctrl-C, SIGTERM or SIGHUP stop the server and its Postgres.
PORT ?= 8000
dev: $(STAMP)
	$(BIN)/chatbot dev --host 127.0.0.1 --port $(PORT)

## make test: lint and types, then the whole suite against a real Postgres (embedded unless
## CHATBOT_TEST_DATABASE_URL is set). CI (.ci/run) runs only `make test`, so the checks live here.
## Modules are spread over TEST_WORKERS processes (pytest-xdist), whole: a module's tests share
## its database (tests/fixtures/postgres.py), and each worker starts its own embedded Postgres.
## The tests mostly wait (on Postgres, on streams), so more workers than cores pays.
TEST_WORKERS ?= 4
test: lint
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

## The long suites below grow with their parameters: each test may take up to LONG_TIMEOUT
## seconds there (make test keeps pyproject's 600 s per test, which turns a hang into a failure).
LONG_TIMEOUT ?= 3600

## make fuzz: the long fuzzing run (OpenAPI fuzzer, hostile raw requests); `make test` runs 25 examples each
FUZZ_EXAMPLES ?= 500
fuzz: $(STAMP)
	CHATBOT_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -s -p no:cacheprovider \
		--timeout=$(LONG_TIMEOUT) tests/hardening/test_fuzz_openapi.py tests/hardening/test_hostile_corpus.py

## make lint: the format check, ruff and mypy alone (seconds, no database)
lint: $(STAMP)
	$(BIN)/ruff format --check src tests bench
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .chatbot

## make isolation: the long isolation matrix (two tenants x two users x every endpoint, two replicas);
## `make test` runs one round of 10 raced thread ids. ISOLATION_SEED=N replays a run's timing.

ISOLATION_ROUNDS ?= 5
ISOLATION_THREADS ?= 40
isolation: $(STAMP)
	CHATBOT_ISOLATION_ROUNDS=$(ISOLATION_ROUNDS) CHATBOT_ISOLATION_THREADS=$(ISOLATION_THREADS) \
		$(if $(ISOLATION_SEED),CHATBOT_ISOLATION_SEED=$(ISOLATION_SEED)) \
		$(BIN)/python -m pytest -q -s -p no:cacheprovider --timeout=$(LONG_TIMEOUT) \
		tests/hardening/test_isolation_matrix.py

## make faults: the long fault suite: 50 replica kills at seeded random points (CHATBOT_FAULT_SEED
## replays a run), a replica killed in its memory work, Postgres outages mid-run, faulty models,
## and 1,000 examples (about 2,000 interleavings) of cancel/end/delete/erase/feedback on two
## replicas (CHATBOT_INTERLEAVINGS_SEED replays a run), and 50 of lost lock sessions in a run's summary
## fold or at its recall step against DELETE and erasure; `make test` runs 3 kills, 100 examples and 5
FAULT_KILLS ?= 50
FAULT_INTERLEAVINGS ?= 1000
faults: $(STAMP)
	CHATBOT_FAULT_KILLS=$(FAULT_KILLS) CHATBOT_INTERLEAVINGS=$(FAULT_INTERLEAVINGS) \
		$(BIN)/python -m pytest -q -s -p no:cacheprovider --timeout=$(LONG_TIMEOUT) \
		tests/hardening/test_faults_kill.py tests/hardening/test_faults_postgres.py tests/hardening/test_faults_model.py \
		tests/hardening/test_interleavings.py tests/hardening/test_interleavings_lost_locks.py

## make soak: ten minutes of mixed traffic on two replicas, every transcript checked against what
## the clients were acknowledged (`make test` runs the same for 30 s); figures in docs/measurements/reliability.md
SOAK_SECONDS ?= 600
SOAK_USERS ?= 5
soak: $(STAMP)
	CHATBOT_SOAK_SECONDS=$(SOAK_SECONDS) CHATBOT_SOAK_USERS=$(SOAK_USERS) $(BIN)/python -m pytest -q -s \
		-p no:cacheprovider tests/hardening/test_soak.py

## make citus: a real Citus cluster on this machine (docs/scaling.md): builds Citus 13.2.2 and
## pgvector 0.8.1 from the vendored sources into Debian's PostgreSQL 15 the first time (apt, as
## root, 5-8 minutes on two cores), then starts a coordinator on 127.0.0.1:9700 and two workers
## on :9701 and :9702 (data under .chatbot/citus/). Not part of `make test` nor of .ci/run.
citus:
	scripts/citus.sh start

## make citus-stop: stop the three servers (by the pid in each postmaster.pid)
citus-stop:
	scripts/citus.sh stop

## make test-citus: the whole suite against that cluster (every test database a Citus database,
## migrated and placed; the statement audit checked against the cluster's own counts), then stop it
## Three workers: each makes its own Citus databases on the one cluster (9 min on two cores, 40 serially).
CITUS_TEST_WORKERS ?= 3
test-citus: $(STAMP)
	scripts/citus.sh start
	CHATBOT_TEST_DATABASE_URL=$$(scripts/citus.sh url) $(BIN)/python -m pytest -q -p no:cacheprovider \
		-n $(CITUS_TEST_WORKERS) --dist loadfile; \
		status=$$?; scripts/citus.sh stop; exit $$status
