#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian bookworm machine (Python 3.11, Java 17, root):
# creates .venv, installs kafkatier with its test extras, and the Debian tools the tests use.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3

if ! command -v java >/dev/null 2>&1; then
    echo "kafkatier: Java (17+) is required for the embedded ZooKeeper; install openjdk-17-jre-headless" >&2
    exit 1
fi

need_apt=()
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
if [ ${#need_apt[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
    echo "bootstrap: apt-get install ${need_apt[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}") >/dev/null \
        || echo "bootstrap: warning: could not install ${need_apt[*]}" >&2
fi

stamp=.venv/.kafkatier-installed
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ] || [ setup.py -nt "$stamp" ] \
        || [ kafkatier/log/_record_walk.c -nt "$stamp" ]; then
    .venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
    # Compat mode: a .pth puts the project directory on sys.path, so PySpark's look-up of installed
    # top-level pyspark_* modules (pkgutil.iter_modules) finds pyspark_kafkatier; the default editable mode's
    # import hook is invisible to that scan.
    # setup.py also builds the optional compiled record walk in place (kafkatier/log/_record_walk.c; skipped
    # without a C compiler).
    .venv/bin/pip install -q -e '.[test]' --config-settings editable_mode=compat
    touch "$stamp"
fi

# KafkaJS for the consumer-group e2e tests, in a project-local node_modules (.node/); skipped without npm
# (the KafkaJS test then skips with its reason).
if command -v npm >/dev/null 2>&1 && [ ! -d .node/node_modules/kafkajs ]; then
    npm install --prefix .node --no-audit --no-fund --silent kafkajs@2 >/dev/null 2>&1 \
        || echo "bootstrap: warning: could not install KafkaJS (npm install kafkajs)" >&2
fi
