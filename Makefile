# notification-service — developer and operator entry points. `make` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
SERVICES := . tests/scripts/services.sh

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z/_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}'

.PHONY: test
test: ## Run every test (starts PostgreSQL and the AWS stand-in unless DATABASE_URL / AWS_ENDPOINT_URL are set)
	tests/scripts/run-tests.sh

.PHONY: lint
lint: ## cargo fmt --check and clippy with warnings as errors
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

.PHONY: db/up
db/up: ## Start a throwaway local PostgreSQL (prints the DATABASE_URL to use)
	@$(SERVICES); pg_up && echo "export DATABASE_URL='$$DATABASE_URL'"

.PHONY: db/down
db/down: ## Stop the local PostgreSQL started by db/up
	@$(SERVICES); pg_down

.PHONY: migrate
migrate: ## Apply migrations/ to DATABASE_URL (or to the db/up cluster)
	@$(SERVICES); pg_up && cargo run -q -p shared --bin migrate
