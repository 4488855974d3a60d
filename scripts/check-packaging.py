"""Lints and renders the Helm chart offline (helm-python-sdk has no CLI), then writes the
rendered manifests for kubernetes-validate. Exit status 1 on any lint error."""
import sys

from helm_python import chart as helm_chart  # type: ignore
from helm_python.chart import Chart  # type: ignore

path, out = sys.argv[1], sys.argv[2]
result = helm_chart.lint(path, strict=True, kube_version="v1.30.0")
problems = [m for m in result.get("messages") or [] if m.get("severity", 0) >= 2]
problems += [{"error": e} for e in result.get("errors") or []]
for p in problems:
    print("chart lint:", p, file=sys.stderr)
rendered = Chart.load(path).render({}, name="autoscaled", namespace="default")
# The etcd variant (docs/ha.md): a Deployment of several replicas, a PodDisruptionBudget, TLS.
rendered_etcd = Chart.load(path).render(
    {"store": "etcd", "etcd": {"replicas": 3, "tls": {"secretName": "etcd-client-tls"}}},
    name="autoscaled",
    namespace="default",
)
etcd_kinds = "".join(rendered_etcd.values())
for needed in ("kind: Deployment", "kind: PodDisruptionBudget", "AUTOSCALED_ETCD_CA", "replicas: 3"):
    if needed not in etcd_kinds:
        problems.append({"error": f"store=etcd render lacks {needed!r}"})
if "volumeClaimTemplates" in etcd_kinds or "kind: StatefulSet" in etcd_kinds:
    problems.append({"error": "store=etcd render still has the sled StatefulSet/PVC"})
with open(out, "w") as f:
    for variant, manifests in (("sled", rendered), ("etcd", rendered_etcd)):
        for name, manifest in sorted(manifests.items()):
            if name.endswith(".yaml") and manifest.strip():
                f.write(f"---\n# {variant}: {name}\n{manifest}\n")
print(f"chart: rendered {sum(1 for n in rendered if n.endswith('.yaml'))} templates, {len(problems)} lint problems")
sys.exit(1 if problems else 0)
