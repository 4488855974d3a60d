"""Lints and renders the Helm chart offline (helm-python-sdk has no CLI) with the default
values and with every switch on, validates each values set against values.schema.json, and
writes the rendered manifests of all of them for kubernetes-validate. The monitoring files
are checked here: the Grafana dashboard (JSON, uid, data source variable on every panel, a
panel for every metric) and the PrometheusRule, which kubernetes-validate cannot check (it
knows no CRD) and which is therefore kept out of its file; every PromQL expression of both is
parsed and every metric name in them must be one that src/metrics.rs defines. Exit status 1
on any problem."""
import glob
import json
import re
import sys

import jsonschema  # type: ignore  (installed with kubernetes-validate)
import promql_parser  # type: ignore  (Python bindings of the promql-parser crate)
import yaml  # type: ignore
from helm_python import chart as helm_chart  # type: ignore
from helm_python.chart import Chart  # type: ignore

path, out = sys.argv[1], sys.argv[2]
METRICS_RS = "src/metrics.rs"
DASHBOARD = f"{path}/dashboards/autoscaled.json"

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
    "dashboards": {"enabled": True, "annotations": {"grafana_folder": "autoscaled"}},
    "alerts": {
        "enabled": True,
        "labels": {"release": "kube-prometheus-stack"},
        "extraLabels": {"team": "platform"},
        "errorRate": {"threshold": 0.02},
    },
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


# --- Monitoring: metric names, PromQL, the Grafana dashboard, the PrometheusRule --------------
# PromQL is parsed with promql-parser from PyPI (Python bindings of the Rust promql-parser
# crate, which follows Prometheus' own grammar and function table), installed by
# check-packaging.sh: a syntax error, an unbalanced bracket, an unknown function or a wrong
# argument type fails here rather than in Prometheus. Grafana's interval variables are
# replaced by 5m before parsing; other variables may only appear inside label values.
GRAFANA_INTERVAL = re.compile(r"\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}")
DATASOURCE = "${datasource}"
DASHBOARD_MATCHERS = {"job": ("MatchOp.Re", "$job"), "namespace": ("MatchOp.Re", "$namespace")}
DURATION = re.compile(r"([0-9]+(ms|s|m|h|d|w|y))+")
SEVERITIES = {"critical", "warning", "info"}
COMPARISONS = {"==", "!=", ">", "<", ">=", "<="}
EXPECTED_ALERTS = {
    "AutoscaledHighErrorRate", "AutoscaledRecommendLatencyHigh", "AutoscaledStoreCommitLatencyHigh",
    "AutoscaledStoreConflicts", "AutoscaledTLSHandshakeFailures", "AutoscaledSecurityReloadFailed",
    "AutoscaledTargetDown", "AutoscaledMetricsAbsent",
}


def defined_metrics():
    """The series src/metrics.rs exposes, as {series name: base name}: counters and gauges as
    named (counters keep their `_total`), histograms only as NAME_bucket, NAME_sum, NAME_count;
    plus Prometheus' own `up`."""
    with open(METRICS_RS) as f:
        text = f.read()
    consts = dict(re.findall(r'pub\(crate\) const (\w+): &str = "(autoscaled_\w+)";', text))
    histograms = set(re.findall(r"\bhistogram!\(\s*(\w+)", text))
    if "BUILD_INFO" not in consts or not histograms & set(consts):
        sys.exit(f"chart: cannot read the metric names of {METRICS_RS} (did its form change?)")
    series = {"up": "up"}
    for const, name in consts.items():
        for suffix in (("_bucket", "_sum", "_count") if const in histograms else ("",)):
            series[name + suffix] = name
    return series


def selectors(expr, where, problems):
    """Parses one PromQL expression: (its AST or None, [(metric name, [alternative matchers
    as {label: (op, value)}])] for every vector selector in it)."""
    try:
        ast = promql_parser.parse(expr)
    except ValueError as e:
        problems.append(f"{where}: PromQL does not parse ({e}): {expr}")
        return None, []
    found = []

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            groups = node.matchers.or_matchers or [node.matchers.matchers]
            alternatives = [{m.name: (str(m.op), m.value) for m in group} for group in groups]
            name = node.name or next((a["__name__"][1] for a in alternatives if "__name__" in a), None)
            found.append((name, alternatives))

    promql_parser.walk(ast, visit)
    return ast, found


def check_expr(expr, series, required, where, problems):
    """Parses `expr`; every selector must name a metric of src/metrics.rs and carry `required`."""
    ast, found = selectors(expr, where, problems)
    if ast is not None and not found:
        problems.append(f"{where}: no metric in {expr}")
    for name, alternatives in found:
        if name not in series:
            problems.append(f"{where}: metric {name!r} is not one src/metrics.rs exposes (histograms only as _bucket/_sum/_count)")
        for alternative in alternatives:
            for label, matcher in required.items():
                if alternative.get(label) != matcher:
                    problems.append(f"{where}: {name} lacks the matcher {label}{matcher}")
    return ast, {name for name, _ in found}


def check_dashboard(dash, series, where, problems):
    uid = dash.get("uid")
    if not isinstance(uid, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid):
        problems.append(f"{where}: uid {uid!r} is not 1 to 40 letters, digits, - or _")
    if not dash.get("title"):
        problems.append(f"{where}: no title")
    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource", {})
    if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append(f"{where}: no `datasource` variable of Prometheus data sources")
    used = set()
    for name in ("namespace", "job"):
        variable = variables.get(name, {})
        query = variable.get("query", {})
        query = query.get("query") if isinstance(query, dict) else query
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query or "")
        if variable.get("type") != "query" or not m or m.group(2) != name:
            problems.append(f"{where}: no `{name}` variable of the form label_values(METRIC, {name})")
            continue
        if (variable.get("datasource") or {}).get("uid") != DATASOURCE:
            problems.append(f"{where}: variable {name} does not use the {DATASOURCE} data source")
        used |= check_expr(m.group(1), series, {}, f"{where}: variable {name}", problems)[1]
    panels, ids = [], set()
    for panel in dash.get("panels", []):
        panels += [panel] + panel.get("panels", [])
    for panel in panels:
        title = panel.get("title", "?")
        at = f"{where}: panel {title!r}"
        if not isinstance(panel.get("id"), int) or panel["id"] in ids:
            problems.append(f"{at}: id {panel.get('id')!r} missing or not unique")
        ids.add(panel.get("id"))
        if not {"h", "w", "x", "y"} <= set(panel.get("gridPos", {})):
            problems.append(f"{at}: no gridPos")
        if panel.get("type") == "row":  # a row only groups panels: no query, no data source
            if panel.get("targets"):
                problems.append(f"{at}: a row with queries")
            continue
        if (panel.get("datasource") or {}).get("uid") != DATASOURCE:
            problems.append(f"{at}: data source is not {DATASOURCE}")
        if not panel.get("targets"):
            problems.append(f"{at}: no query")
        for target in panel.get("targets", []):
            if (target.get("datasource") or {}).get("uid") != DATASOURCE:
                problems.append(f"{at}: query {target.get('refId')} data source is not {DATASOURCE}")
            expr = GRAFANA_INTERVAL.sub("5m", target.get("expr") or "")
            used |= check_expr(expr, series, DASHBOARD_MATCHERS, f"{at} {target.get('refId')}", problems)[1]
    # Every metric the server exposes has a panel: a new metric needs one.
    for base in sorted(set(series.values()) - {"up"}):
        if not any(series.get(name) == base for name in used):
            problems.append(f"{where}: no panel shows {base}")


def check_prometheus_rule(doc, series, required, extra_labels, where, problems):
    """What the PrometheusRule CRD and Prometheus' rule loader require of an alerting rule
    group (kubernetes-validate has no CRD schemas), and what this chart promises of each."""
    if doc.get("apiVersion") != "monitoring.coreos.com/v1" or doc.get("kind") != "PrometheusRule":
        problems.append(f"{where}: not a monitoring.coreos.com/v1 PrometheusRule")
    if not (doc.get("metadata") or {}).get("name"):
        problems.append(f"{where}: no metadata.name")
    if not string_map((doc.get("metadata") or {}).get("labels", {})):
        problems.append(f"{where}: metadata.labels is not a map of strings")
    spec = doc.get("spec") or {}
    groups = spec.get("groups")
    if set(spec) != {"groups"} or not isinstance(groups, list) or not groups:
        problems.append(f"{where}: spec must be groups: [...]")
        return set()
    alerts, group_names = set(), set()
    for group in groups:
        unknown = set(group) - {"name", "interval", "rules", "limit", "partial_response_strategy"}
        if unknown or not group.get("name") or group["name"] in group_names:
            problems.append(f"{where}: group {group.get('name')!r}: no or duplicate name, or unknown keys {sorted(unknown)}")
        group_names.add(group.get("name"))
        if not isinstance(group.get("rules"), list) or not group["rules"]:
            problems.append(f"{where}: group {group.get('name')!r} has no rules")
            continue
        for rule in group["rules"]:
            name = rule.get("alert")
            at = f"{where}: alert {name!r}"
            unknown = set(rule) - {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
            if unknown:
                problems.append(f"{at}: unknown keys {sorted(unknown)}")
            if not isinstance(name, str) or not re.fullmatch(r"[A-Z][A-Za-z0-9]*", name) or name in alerts:
                problems.append(f"{at}: not a unique CamelCase alert name")
            alerts.add(name)
            if not isinstance(rule.get("for"), str) or not DURATION.fullmatch(rule["for"]):
                problems.append(f"{at}: for {rule.get('for')!r} is not a duration")
            labels, annotations = rule.get("labels") or {}, rule.get("annotations") or {}
            if not string_map(labels) or labels.get("severity") not in SEVERITIES:
                problems.append(f"{at}: labels must be strings with severity one of {sorted(SEVERITIES)}")
            for key, value in extra_labels.items():
                if labels.get(key) != value:
                    problems.append(f"{at}: lacks the extra label {key}={value}")
            for key in ("summary", "description"):
                text = annotations.get(key)
                if not isinstance(text, str) or not text.strip():
                    problems.append(f"{at}: no {key} annotation")
                elif text.count("{{") != text.count("}}"):
                    problems.append(f"{at}: unbalanced {{{{ }}}} in {key}")
            if not isinstance(rule.get("expr"), str):
                problems.append(f"{at}: no expr")
                continue
            ast, _ = check_expr(rule["expr"], series, required, at, problems)
            # An alert fires on any sample its expression returns: without a threshold it would
            # fire whenever the metric exists.
            is_threshold = isinstance(ast, promql_parser.BinaryExpr) and str(ast.op) in COMPARISONS
            is_absent = isinstance(ast, promql_parser.Call) and ast.func.name in ("absent", "absent_over_time")
            if ast is not None and not (is_threshold or is_absent):
                problems.append(f"{at}: expr is neither a comparison nor absent(...)")
    return alerts


def string_map(value):
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


with open(f"{path}/values.yaml") as f:
    defaults = yaml.safe_load(f)
with open(f"{path}/values.schema.json") as f:
    schema = json.load(f)
all_on = dict(ALL_ON)

# The etcd variant (docs/ha.md): a Deployment of several replicas, a PodDisruptionBudget, TLS.
ETCD = {"store": "etcd", "etcd": {"replicas": 3, "tls": {"secretName": "etcd-client-tls"}, "peerSecret": {"secretName": "autoscaled-peer"}}}
variants = {"defaults": {}, "all-on": all_on, "no-persistence": NO_PERSISTENCE, "etcd": ETCD}
problems = []
series = defined_metrics()
# Every dashboard shipped: valid JSON, a uid of its own, every query checked.
uids = {}
for file in sorted(glob.glob(f"{path}/dashboards/*.json")):
    try:
        with open(file) as f:
            board = json.load(f)
    except ValueError as e:
        problems.append(f"{file}: not JSON: {e}")
        continue
    check_dashboard(board, series, file, problems)
    if board.get("uid") in uids:
        problems.append(f"{file}: uid {board.get('uid')!r} also used by {uids[board.get('uid')]}")
    uids[board.get("uid")] = file
with open(DASHBOARD) as f:
    dashboard = json.load(f)
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
        count, docs = 0, []
        for name, manifest in sorted(rendered.items()):
            if name.endswith(".yaml") and manifest.strip():
                count += 1
                these = [d for d in yaml.safe_load_all(manifest) if d]
                docs += these
                # kubernetes-validate knows no CRD: the PrometheusRule is checked below instead.
                if not any(d.get("kind") == "PrometheusRule" for d in these):
                    f.write(f"---\n# {variant}: {name}\n{manifest}\n")
        text = "\n".join(m for n, m in rendered.items() if n.endswith(".yaml"))
        rules = [d for d in docs if d.get("kind") == "PrometheusRule"]
        boards = [d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]
        if values["alerts"]["enabled"] != bool(rules) or values["dashboards"]["enabled"] != bool(boards):
            problems.append(f"{variant}: dashboards/alerts rendered although off, or missing although on")
        for board in boards:
            label, wanted = values["dashboards"]["label"], values["dashboards"]["labelValue"]
            if board["metadata"]["labels"].get(label) != wanted:
                problems.append(f"{variant}: the dashboard ConfigMap lacks the label {label}: {wanted!r}")
            try:
                if json.loads(board["data"]["autoscaled.json"]) != dashboard:
                    problems.append(f"{variant}: the dashboard ConfigMap differs from {DASHBOARD}")
            except ValueError as e:
                problems.append(f"{variant}: the dashboard in the ConfigMap is not JSON: {e}")
        for rule in rules:
            selector = values["alerts"]["selector"]
            required = {} if selector else {"job": ("MatchOp.Equal", "autoscaled-autoscaled")}
            alerts = check_prometheus_rule(rule, series, required, values["alerts"]["extraLabels"], f"{variant}: PrometheusRule", problems)
            if alerts != EXPECTED_ALERTS:
                problems.append(f"{variant}: PrometheusRule alerts {sorted(alerts ^ EXPECTED_ALERTS)} unexpected or missing")
            for key, value in values["alerts"]["labels"].items():
                if rule["metadata"]["labels"].get(key) != value:
                    problems.append(f"{variant}: PrometheusRule lacks the label {key}={value}")
        if variant == "all-on":
            for needle in ["name: metrics", "AUTOSCALED_METRICS_LISTEN", "storageClassName: fast", "AUTOSCALED_DURABILITY", "AUTOSCALED_TLS_CERT", "AUTOSCALED_AUTHZ", "AUTOSCALED_HEALTH_LISTEN", "grafana_dashboard: \"1\"", "grafana_folder: autoscaled", "kind: PrometheusRule", "team: platform"]:
                if needle not in text:
                    problems.append(f"{variant}: rendered manifests lack {needle!r}")
        if variant == "etcd":
            for needle in ("kind: Deployment", "kind: PodDisruptionBudget", "AUTOSCALED_ETCD_CA", "replicas: 3", "AUTOSCALED_PEER_SECRET_FILE", "secretName: autoscaled-peer"):
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

# Alerts read the server's metrics: without the metrics port they would only ever report
# absence, so the chart refuses the combination.
try:
    Chart.load(path).render({"alerts": {"enabled": True}}, name="autoscaled", namespace="default")
    problems.append("alerts.enabled renders without metrics.enabled")
except Exception as e:  # helm_python.errors.HelmRenderError
    if "needs metrics.enabled" not in str(e):
        problems.append(f"alerts without metrics fail for another reason: {e}")

# The monitoring checks are live: a renamed metric, a bare histogram name, a missing
# variable matcher and broken PromQL must each be reported.
for expr, why in [
    ('rate(autoscaled_grpc_requests{job=~"$job", namespace=~"$namespace"}[5m])', "renamed metric"),
    ('autoscaled_store_commit_duration_seconds{job=~"$job", namespace=~"$namespace"}', "bare histogram name"),
    ('rate(autoscaled_grpc_requests_total{job=~"$job"}[5m])', "no namespace matcher"),
    ('sum(rate(autoscaled_grpc_requests_total{job=~"$job", namespace=~"$namespace"}[5m])', "unbalanced"),
    ('rates(autoscaled_grpc_requests_total{job=~"$job", namespace=~"$namespace"}[5m])', "unknown function"),
]:
    caught = []
    check_expr(expr, series, DASHBOARD_MATCHERS, "self-test", caught)
    if not caught:
        problems.append(f"the PromQL check accepts a {why}: {expr}")

for p in problems:
    print("chart:", p, file=sys.stderr)
print(f"chart: {len(variants)} values sets, {len(problems)} problems")
sys.exit(1 if problems else 0)
