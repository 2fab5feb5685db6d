.PHONY: run test setup lint
run:   ## the portal + simulated cluster on the embedded default; prints URL and login
	scripts/run.sh
test:  ## lint, type check, compose validation, the whole test suite
	scripts/test.sh
setup:
	scripts/setup.sh
lint:
	scripts/setup.sh && .venv/bin/ruff check . && .venv/bin/mypy
