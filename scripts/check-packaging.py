"""Lints and renders the Helm chart offline (helm-python-sdk has no CLI) with the default
values and with every switch on, validates each values set against values.schema.json, and
writes the rendered manifests of all of them for kubernetes-validate. Exit status 1 on any
lint or schema error."""
import json
import sys

import jsonschema  # type: ignore  (installed with kubernetes-validate)
import yaml  # type: ignore
from helm_python import chart as helm_chart  # type: ignore
from helm_python.chart import Chart  # type: ignore

path, out = sys.argv[1], sys.argv[2]

# Every switch on (the etcd store is its own variant below: it replaces the StatefulSet).
ALL_ON = {
    "image": {"repository": "registry.example.com/autoscaled", "tag": "dev", "pullPolicy": "Always"},
    "service": {"type": "ClusterIP", "port": 50051},
    "metrics": {"enabled": True, "port": 9090},
    "persistence": {"enabled": True, "size": "2Gi", "storageClassName": "fast"},
    "env": {"AUTOSCALED_DURABILITY": "relaxed", "AUTOSCALED_OTLP_ENDPOINT": "http://otel-collector:4317"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "autoscaled", "effect": "NoSchedule"}],
    "tls": {"enabled": True, "secretName": "autoscaled-tls", "clientCA": True, "clientAuth": "optional"},
    "authz": {"enabled": True},
}
NO_PERSISTENCE = {"persistence": {"enabled": False}}


def merge(base, over):
    result = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = value
    return result


with open(f"{path}/values.yaml") as f:
    defaults = yaml.safe_load(f)
with open(f"{path}/values.schema.json") as f:
    schema = json.load(f)
all_on = dict(ALL_ON)

# The etcd variant (docs/ha.md): a Deployment of several replicas, a PodDisruptionBudget, TLS.
ETCD = {"store": "etcd", "etcd": {"replicas": 3, "tls": {"secretName": "etcd-client-tls"}}}
variants = {"defaults": {}, "all-on": all_on, "no-persistence": NO_PERSISTENCE, "etcd": ETCD}
problems = []
with open(out, "w") as f:
    for variant, overrides in variants.items():
        values = merge(defaults, overrides)
        for error in jsonschema.Draft7Validator(schema).iter_errors(values):
            problems.append(f"{variant}: values.schema.json: {'.'.join(map(str, error.path))}: {error.message}")
        # helm lint also validates the merged values against values.schema.json.
        result = helm_chart.lint(path, values=overrides, strict=True, kube_version="v1.30.0")
        problems += [f"{variant}: lint: {m}" for m in result.get("messages") or [] if m.get("severity", 0) >= 2]
        problems += [f"{variant}: lint: {e}" for e in result.get("errors") or []]
        rendered = Chart.load(path).render(overrides, name="autoscaled", namespace="default")
        count = 0
        for name, manifest in sorted(rendered.items()):
            if name.endswith(".yaml") and manifest.strip():
                count += 1
                f.write(f"---\n# {variant}: {name}\n{manifest}\n")
        text = "\n".join(m for n, m in rendered.items() if n.endswith(".yaml"))
        if variant == "all-on":
            for needle in ["name: metrics", "AUTOSCALED_METRICS_LISTEN", "storageClassName: fast", "AUTOSCALED_DURABILITY", "AUTOSCALED_TLS_CERT", "AUTOSCALED_AUTHZ", "AUTOSCALED_HEALTH_LISTEN"]:
                if needle not in text:
                    problems.append(f"{variant}: rendered manifests lack {needle!r}")
        if variant == "etcd":
            for needle in ("kind: Deployment", "kind: PodDisruptionBudget", "AUTOSCALED_ETCD_CA", "replicas: 3"):
                if needle not in text:
                    problems.append(f"{variant}: rendered manifests lack {needle!r}")
            if "volumeClaimTemplates" in text or "kind: StatefulSet" in text:
                problems.append(f"{variant}: still renders the sled StatefulSet/PVC")
        if variant == "no-persistence" and "volumeClaimTemplates" in text:
            problems.append(f"{variant}: still renders volumeClaimTemplates")
        print(f"chart ({variant}): rendered {count} templates")

# A value the schema forbids must be rejected, by the schema and by helm itself (the schema
# is live, not decoration).
bad_overrides = {"persistence": {"enabled": "yes"}}
if not list(jsonschema.Draft7Validator(schema).iter_errors(merge(defaults, bad_overrides))):
    problems.append("values.schema.json accepts persistence.enabled: \"yes\"")
if not helm_chart.lint(path, values=bad_overrides, strict=True, kube_version="v1.30.0").get("errors"):
    problems.append("helm lint accepts persistence.enabled: \"yes\" (values.schema.json not applied)")

for p in problems:
    print("chart:", p, file=sys.stderr)
print(f"chart: {len(variants)} values sets, {len(problems)} problems")
sys.exit(1 if problems else 0)
