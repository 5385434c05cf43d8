# The two commands: `make demo` (main job) and `make test` (the test suite).
.PHONY: demo test unit bench bootstrap clean

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	.venv/bin/kafkatier demo

test: bootstrap
	.venv/bin/python -m pytest -q -rs tests

unit: bootstrap
	.venv/bin/python -m pytest -q tests/unit

bench: bootstrap
	.venv/bin/python benchmarks/run_all.py

clean:
	rm -rf .venv build *.egg-info
