use super::*;

fn parse_file(text: &str) -> Result<Config, ConfigError> {
    let file: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
        path: PathBuf::from("test.toml"),
        message: e.message().to_owned(),
    })?;
    ServeArgs::default().merge(file)
}

#[test]
fn defaults_are_documented_values() {
    let c = parse_file("").unwrap();
    assert_eq!(c.listen, "127.0.0.1:50051".parse().unwrap());
    assert_eq!(c.data_dir, PathBuf::from("./data"));
    assert_eq!(c.durability, Durability::Strict);
    assert_eq!(c.shutdown_grace, Duration::from_secs(10));
    assert_eq!(c.decision_log_len, 100);
    assert!(!c.trust_request_time);
    assert_eq!(c.hpa, Settings::default());
    assert_eq!(c.vpa_max_clock_skew, Duration::from_secs(300));
    assert_eq!(c.limits.max_samples, 100_000);
    assert_eq!(c.limits.max_containers, 100_000);
    assert_eq!(c.limits.max_batch_requests, 100);
    assert_eq!(c.max_concurrent_requests, 32);
    assert_eq!(c.max_queued_requests, 1024);
    assert_eq!(c.max_queue_wait, Duration::from_secs(1));
    assert_eq!(c.max_buffered_request_bytes, 64 << 20);
    assert_eq!(c.otlp_endpoint, None);
    assert_eq!(c.metrics_listen, None);
}

#[test]
fn telemetry_keys_come_from_the_file_and_are_validated() {
    let c = parse_file("otlp_endpoint = \"http://collector:4317\"").unwrap();
    assert_eq!(c.otlp_endpoint.as_deref(), Some("http://collector:4317"));
    let err = parse_file("otlp_endpoint = \"collector:4317\"").unwrap_err();
    assert!(err.to_string().contains("otlp_endpoint"), "{err}");
    let c = parse_file("metrics_listen = \"0.0.0.0:9090\"").unwrap();
    assert_eq!(c.metrics_listen, Some("0.0.0.0:9090".parse().unwrap()));
    assert!(parse_file("metrics_listen = \"nowhere\"").is_err());
}

#[test]
fn etcd_keys_come_from_the_file_and_flags_and_are_validated() {
    let c = parse_file("").unwrap();
    assert_eq!(c.store, StoreKind::Sled);
    assert_eq!(c.etcd.endpoints, ["http://127.0.0.1:2379"]);
    assert_eq!(c.etcd.prefix, "autoscaled/");
    let c = parse_file(
        "store = \"etcd\"\netcd_endpoints = \"https://a:2379, https://b:2379\"\netcd_prefix = \"x/\"\netcd_ca = \"ca.pem\"",
    )
    .unwrap();
    assert_eq!(c.store, StoreKind::Etcd);
    assert_eq!(c.etcd.endpoints, ["https://a:2379", "https://b:2379"]);
    assert_eq!(c.etcd.prefix, "x/");
    assert_eq!(c.etcd.ca, Some(PathBuf::from("ca.pem")));
    let file: FileConfig = toml::from_str("store = \"etcd\"").unwrap();
    let args = ServeArgs {
        store: Some(StoreKind::Sled),
        ..ServeArgs::default()
    };
    assert_eq!(args.merge(file).unwrap().store, StoreKind::Sled);
    for (text, key) in [
        (
            "store = \"etcd\"\netcd_endpoints = \" , \"",
            "etcd_endpoints",
        ),
        (
            "store = \"etcd\"\netcd_endpoints = \"a:2379\"",
            "etcd_endpoints",
        ),
        ("store = \"etcd\"\netcd_cert = \"c.pem\"", "etcd_cert"),
        (
            "store = \"etcd\"\netcd_cert = \"c.pem\"\netcd_key = \"k.pem\"",
            "etcd_ca",
        ),
    ] {
        let err = parse_file(text).unwrap_err();
        assert!(err.to_string().contains(key), "{text}: {err}");
    }
    assert!(parse_file("store = \"redis\"").is_err());
}

#[test]
fn file_values_apply_and_flags_win() {
    let file: FileConfig = toml::from_str(
        "listen = \"0.0.0.0:9000\"\ndurability = \"relaxed\"\nhpa_tolerance = 0.2\n",
    )
    .unwrap();
    let args = ServeArgs {
        listen: Some("127.0.0.1:7000".parse().unwrap()),
        ..ServeArgs::default()
    };
    let c = args.merge(file).unwrap();
    assert_eq!(c.listen, "127.0.0.1:7000".parse().unwrap());
    assert_eq!(c.durability, Durability::Relaxed);
    assert_eq!(c.hpa.tolerance, 0.2);
}

#[test]
fn feature_gates_default_to_kubernetes_1_37_and_are_checked_as_kubernetes_does() {
    // 1.37: HPAScaleToZero beta and on.
    assert!(parse_file("").unwrap().hpa.scale_to_zero);
    let c = parse_file("feature_gates = \"HPAScaleToZero=false\"").unwrap();
    assert!(!c.hpa.scale_to_zero);
    // The flag wins over the file, as for every knob.
    let file: FileConfig = toml::from_str("feature_gates = \"HPAScaleToZero=false\"").unwrap();
    let args = ServeArgs {
        feature_gates: Some("HPAScaleToZero=true".into()),
        ..ServeArgs::default()
    };
    assert!(args.merge(file).unwrap().hpa.scale_to_zero);
    assert_eq!(
        FeatureGates::parse(" HPAConfigurableTolerance=true , HPAScaleToZero=F ").unwrap(),
        FeatureGates {
            hpa_scale_to_zero: false
        }
    );
    for (spec, says) in [
        ("HPAScaleToZero", "missing bool value"),
        ("HPAScaleToZero=maybe", "not a bool"),
        (
            "HPAScaleTozero=true",
            "unrecognized feature gate: HPAScaleTozero",
        ),
        (
            "HPAConfigurableTolerance=false",
            "cannot set feature gate HPAConfigurableTolerance to false, feature is locked to true",
        ),
    ] {
        let e = FeatureGates::parse(spec).unwrap_err();
        assert!(e.contains(says), "{spec}: {e}");
        let e = parse_file(&format!("feature_gates = {spec:?}")).unwrap_err();
        assert!(e.to_string().contains("feature_gates"), "{e}");
    }
}

#[test]
fn security_is_off_by_default_and_validated() {
    let c = parse_file("").unwrap();
    assert_eq!(c.security, SecurityConfig::default());
    assert!(!c.security.tls());
    let c = parse_file("authz = \"authz.toml\"").unwrap();
    assert_eq!(c.security.reflection, Exposure::Auth);
    assert_eq!(c.security.health, Exposure::Auth);
    let c = parse_file("authz = \"a.toml\"\nreflection = \"open\"\nhealth = \"off\"").unwrap();
    assert_eq!(c.security.reflection, Exposure::Open);
    assert_eq!(c.security.health, Exposure::Off);
    for (text, key) in [
        ("tls_cert = \"c.pem\"", "tls_key"),
        ("tls_key = \"k.pem\"", "tls_cert"),
        ("tls_client_ca = \"ca.pem\"", "tls_client_ca"),
        (
            "tls_cert = \"c\"\ntls_key = \"k\"\ntls_client_auth = \"optional\"",
            "tls_client_auth",
        ),
        (
            "listen = \"127.0.0.1:7000\"\nhealth_listen = \"127.0.0.1:7000\"",
            "health_listen",
        ),
        ("reflection = \"auth\"", "reflection"),
        (
            "max_buffered_request_bytes = 2048",
            "max_buffered_request_bytes",
        ),
        ("health = \"auth\"", "health"),
    ] {
        let err = parse_file(text).unwrap_err();
        assert!(
            err.to_string().contains(key),
            "{text}: {err} does not name {key}"
        );
    }
}

#[test]
fn a_knob_s_variable_is_autoscaled_and_its_name_in_capitals() {
    assert_eq!(env_var!(max_queue_wait_ms), "AUTOSCALED_MAX_QUEUE_WAIT_MS");
    let command = ServeArgs::augment_args(clap::Command::new("serve"));
    for arg in command.get_arguments() {
        let long = arg.get_long().expect("every option has a long flag");
        let env = arg.get_env().expect("every option has a variable");
        let expected = format!("AUTOSCALED_{}", long.replace('-', "_").to_uppercase());
        assert_eq!(env.to_str(), Some(expected.as_str()), "--{long}");
    }
}

#[test]
fn help_text_joins_the_doc_lines_and_adds_the_default() {
    assert_eq!(
        help_text(&[" Bound on the drain,", " in seconds."], Some("10".into())),
        "Bound on the drain, in seconds. [default: 10]"
    );
    // Without a default, the final period goes, as clap drops it from a doc comment.
    assert_eq!(help_text(&[" Private key."], None), "Private key");
    assert_eq!(2.0_f64.shown(), "2.0");
    assert_eq!(StoreKind::Etcd.shown(), "etcd");
}

#[test]
fn unknown_keys_are_rejected_with_their_name() {
    let err = parse_file("listne = \"127.0.0.1:1\"").unwrap_err();
    assert!(err.to_string().contains("unknown field `listne`"), "{err}");
}

#[test]
fn out_of_range_values_name_the_key() {
    for (text, key) in [
        ("decision_log_len = 0", "decision_log_len"),
        ("history_retention_secs = 60", "history_retention_secs"),
        ("hpa_tolerance = -1.0", "hpa_tolerance"),
        ("max_pods = 0", "max_pods"),
        ("max_samples = 0", "max_samples"),
        ("max_containers = 0", "max_containers"),
        ("max_batch_requests = 0", "max_batch_requests"),
        ("max_concurrent_requests = 0", "max_concurrent_requests"),
        ("log = \"[[[\"", "log"),
        (
            "durability = \"relaxed\"\nflush_interval_ms = 0",
            "flush_interval_ms",
        ),
        ("commit_delay_us = 100001", "commit_delay_us"),
    ] {
        let err = parse_file(text).unwrap_err();
        assert!(
            err.to_string().contains(key),
            "{text}: {err} does not name {key}"
        );
    }
}
