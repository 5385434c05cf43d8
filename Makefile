# The two commands: `make demo` (main job) and `make test` (the test suite).
.PHONY: demo test unit bench docs bootstrap clean

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

# The documentation site (docs/, mkdocs.yml) into site/; strict: a broken link or anchor fails the build.
docs: bootstrap
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -d site

clean:
	rm -rf .venv build site *.egg-info
