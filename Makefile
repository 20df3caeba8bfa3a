# notification-service — developer and operator entry points. `make` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
SERVICES := . tests/scripts/services.sh
TOOLS := . tests/scripts/tools.sh

# Local settings for watch, invoke/* and stand-in/up (override: make watch EMAIL_FROM=…)
EMAIL_FROM ?= noreply@example.com
WATCH_PORT ?= 9000
WATCH_ADDRESS ?= 127.0.0.1
# Function instances watch runs at once, per function: the worker's fleet under watch
# (WORKER_MAX_INVOCATIONS follows it), and room for `make invoke/worker` beside a woken worker
WATCH_CONCURRENCY ?= 2
RUST_LOG ?= info
# the functions prepare their statements once per connection (decision 0014); false when
# DATABASE_URL names a transaction pooler (PgBouncer before 1.21, RDS Proxy)
DATABASE_PREPARED_STATEMENTS ?= true
SCHEDULED_EVENT := tests/fixtures/events/scheduled.json
# the token trigger's app-client map under watch: the client of the Cognito event fixture
CLIENT_ORGANIZATIONS ?= 1example23456789abcdefghij=0190d6a2-7b3c-7def-8a12-3456789abcde
TOKEN_EVENT := tests/fixtures/events/cognito_pre_token_client_credentials.json

# DB=docker: PostgreSQL from compose.yaml, in a container (a Docker engine and its compose
# plugin needed), instead of a throwaway cluster from this machine's PostgreSQL binaries. The
# targets that need a database start it first and hand its URL on as DATABASE_URL.
DB ?= local
DOCKER_DB_PORT ?= 54329
DOCKER_DATABASE_URL := postgres://postgres:postgres@127.0.0.1:$(DOCKER_DB_PORT)/postgres?sslmode=disable
ifeq ($(DB),docker)
export DATABASE_URL := $(DOCKER_DATABASE_URL)
DB_UP := db/up
endif

# After stand_in_up: when we run moto ourselves, make EMAIL_FROM's domain a verified SES
# identity in it (SES refuses to send from an unverified sender, and so does the stand-in).
STAND_IN_IDENTITY = stand_in_verify_sender '$(EMAIL_FROM)'

.PHONY: help
help: ## List the targets (the default)
	@echo "notification-service: make TARGET"
	@grep -hE '^[a-zA-Z/_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}'

.PHONY: setup
setup: ## Check and install the tools: Rust targets, PostgreSQL binaries, python3-venv, cargo-lambda (+zig), sam, cfn-lint, moto
	@tests/scripts/setup.sh

.PHONY: demo
demo: $(DB_UP) ## The whole flow on local defaults: Postgres, stand-in, cargo lambda watch, sample sends, worker + sweeper, provider feedback (delivered, bounced, suppressed), signed webhooks to a verifying receiver, final table
	tests/scripts/demo.sh

.PHONY: test
test: $(DB_UP) ## Run every test (starts PostgreSQL and the AWS stand-in unless DATABASE_URL / AWS_ENDPOINT_URL are set; DB=docker: compose.yaml's)
	tests/scripts/run-tests.sh

.PHONY: contract
contract: $(DB_UP) ## The API contract fuzzer alone: schemathesis over functions/ingest/openapi.yaml against cargo lambda watch (make test runs it too)
	tests/scripts/contract.sh

.PHONY: clients
clients: $(DB_UP) ## The generated clients alone: a Python and a TypeScript client from functions/ingest/openapi.yaml, each program run against cargo lambda watch (make test runs it too)
	tests/scripts/clients.sh

.PHONY: bench
bench: ## Benchmark on its own durable PostgreSQL: jobs/s grid, claim latency, ingest, latency, graphile-worker, pgbench ceiling
	tests/scripts/bench.sh

.PHONY: faults
faults: ## The fault suite: real binaries under kill -9, a PostgreSQL restart, a provider outage, load, hostile input; prints the table (QUICK=1: short version)
	tests/scripts/faults.sh $(if $(QUICK),--quick)

.PHONY: lint
lint: lint/template ## cargo fmt --check, clippy with warnings as errors, and the template checks
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

.PHONY: lint/template
lint/template: ## cfn-lint and sam validate --lint on template.yaml (offline, no AWS credentials)
	@tests/scripts/lint-template.sh

.PHONY: db/up
db/up: ## Start PostgreSQL: a throwaway local cluster, or compose.yaml's container with DB=docker (prints the DATABASE_URL to use)
ifeq ($(DB),docker)
	@docker compose version >/dev/null 2>&1 || { echo "db/up DB=docker: no 'docker compose' here (no docker command, or one without its compose plugin). Install a Docker engine with the compose plugin, or leave out DB=docker for a throwaway cluster from this machine's PostgreSQL binaries." >&2; exit 1; }
	@NOTIF_DB_PORT=$(DOCKER_DB_PORT) docker compose up --detach --wait db
	@echo "export DATABASE_URL='$(DOCKER_DATABASE_URL)'"
else
	@$(SERVICES); pg_up && if db_where "$$DATABASE_URL" --has-password; then \
	  echo "# DATABASE_URL is yours ($$(db_where "$$DATABASE_URL")); not repeated here: it holds a password"; \
	  else echo "export DATABASE_URL='$$DATABASE_URL'"; fi
endif

.PHONY: db/down
db/down: ## Stop the PostgreSQL db/up started (DB=docker: the container; its volume keeps the data)
ifeq ($(DB),docker)
	@docker compose version >/dev/null 2>&1 || { echo "db/down DB=docker: no 'docker compose' here" >&2; exit 1; }
	@docker compose stop db
else
	@$(SERVICES); pg_down
endif

.PHONY: migrate
migrate: $(DB_UP) ## Apply migrations/ to DATABASE_URL (or to the db/up cluster)
	@$(SERVICES); pg_up && cargo run -q --bin migrate

.PHONY: schema
schema: $(DB_UP) ## Write shared/postgres/schema.sql, the schema migrations/ build (a test compares them)
	@$(SERVICES); pg_up && WRITE_SCHEMA=1 cargo test -q -p integration-tests --test it -- schema::

.PHONY: queue
queue: $(DB_UP) ## The queue of DATABASE_URL's database: by state and organization, the oldest due job, the day's dead jobs by error code, suppressions
	@$(SERVICES); pg_up && cargo run -q -p notify-postgres --bin queue

.PHONY: stand-in/up
stand-in/up: ## Start the local AWS stand-in (moto server) with EMAIL_FROM's domain verified; prints the AWS_* settings
	@$(SERVICES); stand_in_up && $(STAND_IN_IDENTITY) \
	  && echo "export AWS_ENDPOINT_URL='$$AWS_ENDPOINT_URL' AWS_REGION='$$AWS_REGION'" \
	  && if [ "$$AWS_ACCESS_KEY_ID:$$AWS_SECRET_ACCESS_KEY" = testing:testing ]; then \
	    echo "export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing"; \
	  else echo "# AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY: the ones already in your environment (not shown)"; fi

.PHONY: stand-in/down
stand-in/down: ## Stop the AWS stand-in started by stand-in/up
	@$(SERVICES); stand_in_down

.PHONY: watch
watch: $(DB_UP) ## Serve the functions (ingest, worker, sweeper, feedback, token) with cargo lambda watch on local settings, ingest waking the worker through watch (starts db and stand-in; Ctrl-C stops)
	@$(SERVICES); $(TOOLS); tools_install cargo-lambda && tools_path \
	  && pg_up && stand_in_up && $(STAND_IN_IDENTITY) && mkdir -p "$$NOTIF_STATE" \
	  && printf '%s\n' \
	    "DATABASE_URL='$$DATABASE_URL'" \
	    "MIGRATE_ON_START='true'" \
	    "DATABASE_PREPARED_STATEMENTS='$(DATABASE_PREPARED_STATEMENTS)'" \
	    "AWS_ENDPOINT_URL='$$AWS_ENDPOINT_URL'" \
	    "AWS_ENDPOINT_URL_LAMBDA='http://$(WATCH_ADDRESS):$(WATCH_PORT)'" \
	    "WORKER_FUNCTION_NAME='worker'" \
	    "WORKER_MAX_INVOCATIONS='$(WATCH_CONCURRENCY)'" \
	    "AWS_REGION='$$AWS_REGION'" \
	    "AWS_ACCESS_KEY_ID='$$AWS_ACCESS_KEY_ID'" \
	    "AWS_SECRET_ACCESS_KEY='$$AWS_SECRET_ACCESS_KEY'" \
	    "ALLOW_ORG_HEADER='true'" \
	    "WEBHOOK_ALLOW_PRIVATE_ADDRESSES='true'" \
	    "EMAIL_FROM='$(EMAIL_FROM)'" \
	    "RUST_LOG='$(RUST_LOG)'" \
	    "CLIENT_ORGANIZATIONS='$(CLIENT_ORGANIZATIONS)'" \
	    >"$$NOTIF_STATE/watch.env" \
	  && echo "watch: settings in $$NOTIF_STATE/watch.env; ingest at http://localhost:$(WATCH_PORT)/lambda-url/ingest/notifications" \
	  && echo "watch: an accepted notification wakes the worker (its Lambda endpoint is watch's own invoke API); make invoke/worker, make invoke/sweeper, make invoke/feedback, make invoke/token in another shell; make db/down stand-in/down when done" \
	  && cargo lambda watch --invoke-address $(WATCH_ADDRESS) --invoke-port $(WATCH_PORT) --concurrency $(WATCH_CONCURRENCY) --env-file "$$NOTIF_STATE/watch.env"

.PHONY: invoke/worker
invoke/worker: ## Invoke the worker under make watch with an EventBridge scheduled event (tests/fixtures/events/scheduled.json)
	@$(TOOLS); tools_install cargo-lambda && tools_path \
	  && cargo lambda invoke worker --invoke-address $(WATCH_ADDRESS) --invoke-port $(WATCH_PORT) --data-file $(SCHEDULED_EVENT)

.PHONY: invoke/sweeper
invoke/sweeper: ## Invoke the sweeper under make watch with the same scheduled event
	@$(TOOLS); tools_install cargo-lambda && tools_path \
	  && cargo lambda invoke sweeper --invoke-address $(WATCH_ADDRESS) --invoke-port $(WATCH_PORT) --data-file $(SCHEDULED_EVENT)

.PHONY: invoke/feedback
invoke/feedback: EVENT ?= tests/fixtures/feedback/ses-delivery.json
invoke/feedback: ## Invoke feedback under make watch with a provider event: EVENT=<path> (default: an SES Delivery in an SNS record)
	@$(TOOLS); tools_install cargo-lambda && tools_path \
	  && cargo lambda invoke feedback --invoke-address $(WATCH_ADDRESS) --invoke-port $(WATCH_PORT) --data-file '$(EVENT)'

.PHONY: invoke/token
invoke/token: ## Invoke the Cognito token trigger under make watch with a client-credentials event (tests/fixtures/events/cognito_pre_token_client_credentials.json)
	@$(TOOLS); tools_install cargo-lambda && tools_path \
	  && cargo lambda invoke token --invoke-address $(WATCH_ADDRESS) --invoke-port $(WATCH_PORT) --data-file $(TOKEN_EVENT)

.PHONY: build
build: ## Build the functions (ingest, worker, sweeper, feedback, migrator) for Lambda arm64 (cargo lambda build --release --arm64 → target/lambda/*/bootstrap)
	@$(TOOLS); tools_install cargo-lambda && tools_path \
	  && cargo lambda build --release --arm64 \
	  && ls -l target/lambda/*/bootstrap

# The stack `make deploy`, `logs`, `sync` and `delete` act on (samconfig.toml's by default).
SAM_CONFIG_ENV ?= default

.PHONY: deploy
deploy: ## Build with SAM and deploy: guided (asks for the parameters, saves them in samconfig.toml) the first time, without prompts after
	@$(TOOLS); tools_install sam cargo-lambda && tools_path && tools_check_versions >/dev/null \
	  && sam build --config-env $(SAM_CONFIG_ENV) \
	  && if grep -q '^parameter_overrides' samconfig.toml; then \
	    sam deploy --config-env $(SAM_CONFIG_ENV); \
	  else sam deploy --guided --config-env $(SAM_CONFIG_ENV); fi

.PHONY: sync
sync: ## A development stack kept in step with the code (sam sync --watch, samconfig.toml's `dev` environment; never production)
	@$(TOOLS); tools_install sam cargo-lambda && tools_path && tools_check_versions >/dev/null \
	  && sam sync --config-env dev

.PHONY: logs
logs: ## Tail the deployed functions' logs (FN=ingest|worker|sweeper|feedback|migrate for one; all by default)
	@$(TOOLS); tools_install sam && tools_path \
	  && sam logs --config-env $(SAM_CONFIG_ENV) $(if $(FN),--name $(call fn_resource,$(FN)))

.PHONY: delete
delete: ## Delete the deployed stack (sam delete asks first; the database and its secret are yours and stay)
	@$(TOOLS); tools_install sam && tools_path && sam delete --config-env $(SAM_CONFIG_ENV)

# ingest → IngestFunction, migrate → MigrateFunction: the template's resource for a function folder
fn_resource = $(shell echo $(1) | awk '{print toupper(substr($$0,1,1)) substr($$0,2) "Function"}')

