//! What-if replay (`Simulate`, `autoscalectl simulate|record|report`): replay identity (a
//! property over generated traces through the service, and the real binary through the
//! recording proxy), the HPA documentation's behavior demo, and the SVG picture.

mod common;

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::Arc,
    time::Duration,
};

use autoscaled::{
    api::{
        HorizontalService, HpaOptions,
        simulate::{SimulateOptions, Window, replay_trace},
    },
    config::Limits,
    pb::v1::{self as pb, horizontal_autoscaler_server::HorizontalAutoscaler},
    store::{HpaStore, SledStore, durability::Durability, durability::Mode, sled::SledOptions},
};
use autoscaled_ctl::whatif::{plot, trace};
use autoscaled_engine::{hpa, hpa::settings::Settings};
use autoscaled_fixtures as fixtures;
use proptest::prelude::*;
use tonic::Request;

fn examples() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("examples/whatif")
}

/// The documented curve of the behavior demo, one count per 10 s step from t = 0: 1 → 10 at
/// once (900 % of 1), 13 when the 300 s period has passed, then after the load drops at
/// t = 400 s and the 60 s window has passed, one pod fewer per 10 s down to 4.
fn documented_curve() -> Vec<i32> {
    (0..=70)
        .map(|i| {
            let t = i * 10;
            match t {
                _ if t < 300 => 10,
                _ if t < 450 => 13,
                _ => (13 - ((t - 450) / 10 + 1)).max(4),
            }
        })
        .collect()
}

fn demo_trace() -> Vec<pb::RecommendRequest> {
    trace::read_trace(&examples().join("behavior-demo.jsonl")).unwrap()
}

#[test]
fn behavior_demo_replays_to_the_documented_curve() {
    let trace = demo_trace();
    let r = replay_trace(
        &trace,
        None,
        Window::default(),
        None,
        &SimulateOptions::default(),
    )
    .unwrap();
    let stored: Vec<i32> = r.steps.iter().map(|s| s.stored_desired_replicas).collect();
    assert_eq!(stored, documented_curve());
    let simulated: Vec<i32> = r
        .steps
        .iter()
        .map(|s| s.simulated_desired_replicas)
        .collect();
    assert_eq!(simulated, stored);
    // The rules that shaped it: the 900 % limit, then the window, then 1 pod per 10 s.
    assert_eq!(r.steps[0].stored_limited_by, "ScaleUpLimit");
    assert_eq!(r.steps[29].stored_limited_by, "ScaleUpLimit");
    assert_eq!(r.steps[30].stored_limited_by, "");
    assert_eq!(r.steps[41].stored_limited_by, "ScaleDownStabilized");
    assert_eq!(r.steps[45].stored_limited_by, "ScaleDownLimit");
    let s = r.summary.unwrap().stored.unwrap();
    assert_eq!((s.scale_ups, s.scale_downs, s.largest_step), (2, 9, 9));
    assert_eq!(s.seconds_above_target, 300.0);
    assert_eq!(r.fidelity, "exact");

    // Under the default behavior (4 pods or 100 % per 15 s up, 300 s window down) the same
    // load climbs 1 → 5 → 10 → 13 and is still held at 13 when the trace ends.
    let spec: pb::HorizontalSpec =
        autoscaled_ctl::whatif::read_spec(&examples().join("default-behavior-spec.json")).unwrap();
    let r = replay_trace(
        &trace,
        Some(&spec),
        Window::default(),
        None,
        &SimulateOptions::default(),
    )
    .unwrap();
    let simulated: Vec<i32> = r
        .steps
        .iter()
        .map(|s| s.simulated_desired_replicas)
        .collect();
    assert_eq!(&simulated[..5], &[5, 5, 10, 10, 13]);
    assert!(simulated[5..70].iter().all(|&c| c == 13), "{simulated:?}");
    // Stored counts are untouched by the override.
    let stored: Vec<i32> = r.steps.iter().map(|s| s.stored_desired_replicas).collect();
    assert_eq!(stored, documented_curve());

    // A window returns only its steps, decided with the history before it.
    let from = prost_types::Timestamp {
        seconds: trace[30].evaluation_time.unwrap().seconds,
        nanos: 0,
    };
    let window = Window {
        from: Some(autoscaled_engine::time::Time::from_unix_secs(from.seconds)),
        to: None,
    };
    let r = replay_trace(&trace, None, window, None, &SimulateOptions::default()).unwrap();
    assert_eq!(r.steps.len(), 41);
    assert_eq!(r.steps[0].stored_desired_replicas, 13);
}

/// The demo trace replayed under `default-behavior-spec.json`: both curves to draw.
fn demo_under_default_behavior() -> pb::SimulateResponse {
    let spec =
        autoscaled_ctl::whatif::read_spec(&examples().join("default-behavior-spec.json")).unwrap();
    replay_trace(
        &demo_trace(),
        Some(&spec),
        Window::default(),
        None,
        &SimulateOptions::default(),
    )
    .unwrap()
}

#[test]
fn the_svg_is_well_formed_and_has_every_series() {
    let r = demo_under_default_behavior();
    let svg = plot::svg(&plot::Timeline::from_simulation("demo", &r), 1000, 560).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let hex = |c: plotters::style::RGBColor| format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
    let lines_of = |color: &str| {
        doc.descendants()
            .filter(|n| n.has_tag_name("polyline"))
            .filter(|n| {
                n.attribute("stroke")
                    .is_some_and(|s| s.eq_ignore_ascii_case(color))
            })
            .count()
    };
    // One data line per series plus its legend sample.
    for c in [plot::CURRENT, plot::STORED, plot::SIMULATED, plot::TARGET] {
        assert!(lines_of(&hex(c)) >= 1, "no line in {}", hex(c));
    }
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    for label in [
        "current replicas",
        "stored desired",
        "simulated desired",
        "cpu (% of target)",
        "target (100 %)",
        "replicas",
        "metric, % of target",
    ] {
        assert!(
            texts.iter().any(|t| t.trim() == label),
            "no label {label:?} in {texts:?}"
        );
    }
    // Scale events are marked: 11 stored changes as circles, 3 simulated ones as triangles.
    let circles = doc
        .descendants()
        .filter(|n| n.has_tag_name("circle"))
        .filter(|n| {
            n.attribute("fill")
                .is_some_and(|s| s.eq_ignore_ascii_case(&hex(plot::STORED)))
        })
        .count();
    assert_eq!(circles, 11);
}

/// The PNG of the demo: decodes, has the requested size, the colour of every series, and
/// text drawn with the embedded font (the title changes pixels), on a machine with or
/// without system fonts.
#[test]
fn the_png_decodes_and_shows_every_series_and_its_text() {
    let r = demo_under_default_behavior();
    let decode = |bytes: &[u8]| {
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .expect("a PNG header");
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).expect("a PNG frame");
        assert_eq!((info.width, info.height), (1000, 560));
        assert_eq!(info.color_type, png::ColorType::Rgb);
        buf.truncate(info.buffer_size());
        buf
    };
    let titled = plot::png(&plot::Timeline::from_simulation("demo", &r), 1000, 560).unwrap();
    let pixels = decode(&titled);
    let colours: std::collections::HashSet<&[u8]> = pixels.chunks(3).collect();
    assert!(colours.len() >= 8, "{} distinct colours", colours.len());
    for c in [plot::CURRENT, plot::STORED, plot::SIMULATED, plot::TARGET] {
        assert!(
            colours.contains(&[c.0, c.1, c.2][..]),
            "no pixel of {c:?} in the PNG"
        );
    }
    let untitled = decode(&plot::png(&plot::Timeline::from_simulation("", &r), 1000, 560).unwrap());
    let top = 1000 * 3 * 30;
    assert_ne!(
        pixels[..top],
        untitled[..top],
        "the title draws no glyphs: the embedded font renders nothing"
    );
}

/// `--plot` picks the format by extension; an unknown one is refused before anything is
/// written, with the formats it knows.
#[test]
fn the_cli_plots_by_extension_and_refuses_an_unknown_one() {
    let dir = tempfile::tempdir().unwrap();
    let trace = examples().join("behavior-demo.jsonl");
    for name in ["demo.png", "demo.PNG", "demo.svg"] {
        let path = dir.path().join(name);
        run(&[
            "simulate",
            "--trace",
            trace.to_str().unwrap(),
            "--plot",
            path.to_str().unwrap(),
        ]);
        let bytes = std::fs::read(&path).unwrap();
        if name.ends_with(".svg") {
            roxmltree::Document::parse(std::str::from_utf8(&bytes).unwrap()).unwrap();
        } else {
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{name}");
        }
    }
    let gif = dir.path().join("demo.gif");
    let out = Command::new(env!("CARGO_BIN_EXE_autoscalectl"))
        .args(["simulate", "--trace", trace.to_str().unwrap(), "--plot"])
        .arg(&gif)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("unknown picture format .gif: name the file .svg or .png"),
        "{stderr}"
    );
    assert!(!gif.exists());
}

// === replay identity through the service ===

#[derive(Clone, Debug)]
struct Step {
    dt: i64,
    follow: bool,
    current: i32,
    usage: i64,
    dry_run: bool,
    unavailable: bool,
}

fn spec_strategy() -> impl Strategy<Value = pb::HorizontalSpec> {
    let policy = (1..3i32, 1..200i32, 1..120i32).prop_map(|(t, v, p)| pb::ScalingPolicy {
        r#type: t,
        value: v,
        period_seconds: p,
    });
    let rules = (
        proptest::option::of(0..120i32),
        0..3i32,
        proptest::collection::vec(policy, 1..3),
    )
        .prop_map(|(w, sel, policies)| pb::ScalingRules {
            stabilization_window_seconds: w,
            select_policy: sel,
            policies,
            policies_set: true,
            tolerance: None,
        });
    let behavior = proptest::option::of(
        (
            proptest::option::of(rules.clone()),
            proptest::option::of(rules),
        )
            .prop_map(|(up, down)| pb::Behavior {
                scale_up: up,
                scale_down: down,
            }),
    );
    // min from 1: a cpu-only spec may not have min 0 (Kubernetes 1.37's validation).
    (1..3i32, 3..12i32, 20..90i32, behavior, 0..120u64).prop_map(
        |(min, max, target, behavior, window)| pb::HorizontalSpec {
            min_replicas: Some(min),
            max_replicas: max,
            metrics: vec![fixtures::cpu_utilization(target)],
            behavior,
            settings: Some(pb::ControllerSettings {
                downscale_stabilization: Some(prost_types::Duration {
                    seconds: window as i64,
                    nanos: 0,
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
}

fn steps_strategy() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        (
            1..40i64,
            proptest::bool::weighted(0.8),
            0..14i32,
            0..3000i64,
            proptest::bool::weighted(0.1),
            proptest::bool::weighted(0.05),
        )
            .prop_map(|(dt, follow, current, usage, dry_run, unavailable)| Step {
                dt,
                follow,
                current,
                usage,
                dry_run,
                unavailable,
            }),
        1..30,
    )
}

const T0: i64 = 1_767_225_600;

fn request(
    spec: &pb::HorizontalSpec,
    t: i64,
    current: i32,
    usage: i64,
    dry_run: bool,
    unavailable: bool,
) -> pb::RecommendRequest {
    let mut r = fixtures::recommend("prop")
        .pods(usize::try_from(current).unwrap())
        .cpu_usage_milli(usage)
        .pod_names(|i| format!("p{i}"))
        .ages(t - T0 + 3600, t - T0 + 3600)
        .sample_age(Some(0))
        .at(t)
        .build();
    r.spec = Some(spec.clone());
    r.dry_run = dry_run;
    if unavailable {
        r.unavailable_metrics = vec!["cpu".into()];
    }
    r
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Replaying a stored history (and the same requests as a trace) under its own spec
    /// reproduces every recorded decision, at its own time and with its own readings (each
    /// decision of a stored run keeps them, however irregular the calls), and Simulate
    /// writes nothing.
    #[test]
    fn replay_under_its_own_spec_reproduces_every_recorded_decision(spec in spec_strategy(), steps in steps_strategy()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let store: Arc<dyn HpaStore> = Arc::new(SledStore::open(dir.path(), SledOptions::default()).unwrap());
            let durability = Arc::new(Durability::start(Arc::clone(&store), Mode::Relaxed { interval: Duration::from_secs(3600) }));
            let service = HorizontalService::new(
                Arc::clone(&store),
                durability,
                HpaOptions { defaults: Settings::default(), limits: Limits::default(), trust_request_time: true, history_retention: Duration::from_secs(3600) },
                hpa::evaluate_within,
            );
            let mut t = T0;
            let mut current = 1;
            let mut trace = Vec::new();
            let mut recorded = Vec::new();
            // Logged decisions at irregular times; dry runs share the last time.
            for s in &steps {
                if !s.dry_run { t += s.dt; }
                if !s.follow { current = s.current; }
                let req = request(&spec, t, current, s.usage, s.dry_run, s.unavailable);
                let response = service.recommend(Request::new(req.clone())).await.unwrap().into_inner();
                trace.push(req);
                recorded.push((response.desired_replicas, s.dry_run));
                if !s.dry_run { current = response.desired_replicas; }
            }
            let logged = store.decisions("prop").await.unwrap().len();

            // The trace, under its own spec given as an override (the closed-loop path runs).
            let r = service.simulate(Request::new(pb::SimulateRequest { trace: trace.clone(), spec: Some(spec.clone()), ..Default::default() })).await.unwrap().into_inner();
            prop_assert_eq!(r.steps.len(), recorded.len());
            for (step, (desired, dry_run)) in r.steps.iter().zip(&recorded) {
                prop_assert_eq!(step.stored_desired_replicas, *desired);
                prop_assert_eq!(step.simulated_desired_replicas, *desired);
                prop_assert_eq!(step.dry_run, *dry_run);
            }
            // What each logged decision saw, from the trace: its time and its metrics' readings.
            let seen = |steps: &[pb::SimulationStep]| -> Vec<_> {
                steps
                    .iter()
                    .filter(|s| !s.dry_run)
                    .map(|s| (s.evaluation_time, s.metrics.iter().map(|m| m.current).collect::<Vec<_>>()))
                    .collect()
            };
            let observed = seen(&r.steps);

            // The stored log (dry runs are not in it).
            let stored_decisions: Vec<i32> = recorded.iter().filter(|(_, d)| !d).map(|(r, _)| *r).collect();
            if stored_decisions.is_empty() {
                let e = service.simulate(Request::new(pb::SimulateRequest { target_key: "prop".into(), spec: Some(spec.clone()), ..Default::default() })).await.unwrap_err();
                prop_assert_eq!(e.code(), tonic::Code::NotFound);
            } else {
                // Under the recorded specs, and under the same spec given as an override.
                for spec in [None, Some(spec.clone())] {
                    let r = service.simulate(Request::new(pb::SimulateRequest { target_key: "prop".into(), spec, ..Default::default() })).await.unwrap().into_inner();
                    let stored: Vec<i32> = r.steps.iter().map(|s| s.stored_desired_replicas).collect();
                    let simulated: Vec<i32> = r.steps.iter().map(|s| s.simulated_desired_replicas).collect();
                    prop_assert_eq!(&stored, &stored_decisions);
                    prop_assert_eq!(&simulated, &stored_decisions);
                    prop_assert_eq!(seen(&r.steps), observed.clone());
                    prop_assert!(!r.fidelity.contains("evenly spaced"), "{}", r.fidelity);
                }
            }
            // Nothing was written.
            prop_assert_eq!(store.decisions("prop").await.unwrap().len(), logged);
            Ok(())
        })?;
    }
}

#[tokio::test]
async fn bad_simulate_requests_are_invalid_argument_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn HpaStore> =
        Arc::new(SledStore::open(dir.path(), SledOptions::default()).unwrap());
    let durability = Arc::new(Durability::start(Arc::clone(&store), Mode::Strict));
    let service = HorizontalService::new(
        Arc::clone(&store),
        durability,
        HpaOptions {
            defaults: Settings::default(),
            limits: Limits::default(),
            trust_request_time: false,
            history_retention: Duration::from_secs(3600),
        },
        hpa::evaluate_within,
    );
    let field = |e: tonic::Status| {
        use tonic_types::StatusExt;
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        e.get_details_bad_request()
            .unwrap()
            .field_violations
            .into_iter()
            .map(|v| v.field)
            .collect::<Vec<_>>()
    };
    let mut trace = demo_trace();
    let call = |req: pb::SimulateRequest| service.simulate(Request::new(req));
    assert_eq!(
        field(call(pb::SimulateRequest::default()).await.unwrap_err()),
        ["target_key"]
    );
    trace[3].evaluation_time = None;
    assert_eq!(
        field(
            call(pb::SimulateRequest {
                trace: trace.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err()
        ),
        ["trace[3].evaluation_time"]
    );
    trace[3] = demo_trace()[3].clone();
    trace[5].current_replicas = -1;
    assert_eq!(
        field(
            call(pb::SimulateRequest {
                trace: trace.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err()
        ),
        ["trace[5].current_replicas"]
    );
    let bad_spec = pb::HorizontalSpec {
        max_replicas: 0,
        ..Default::default()
    };
    assert_eq!(
        field(
            call(pb::SimulateRequest {
                trace: demo_trace(),
                spec: Some(bad_spec),
                ..Default::default()
            })
            .await
            .unwrap_err()
        ),
        ["spec.max_replicas"]
    );
    let e = call(pb::SimulateRequest {
        target_key: "none".into(),
        spec: Some(pb::HorizontalSpec {
            max_replicas: 3,
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    let late = prost_types::Timestamp {
        seconds: 10,
        nanos: 0,
    };
    let early = prost_types::Timestamp {
        seconds: 5,
        nanos: 0,
    };
    assert_eq!(
        field(
            call(pb::SimulateRequest {
                trace: demo_trace(),
                from: Some(late),
                to: Some(early),
                ..Default::default()
            })
            .await
            .unwrap_err()
        ),
        ["to"]
    );
    // Nothing was stored by any of it (the demo trace's key included).
    assert!(store.decisions("demo/behavior").await.unwrap().is_empty());
}

// === the real binary: record through the proxy, simulate, report ===

struct Proxy(std::process::Child, String);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_proxy(upstream: &str, trace: &Path) -> Proxy {
    let mut child = Command::new(env!("CARGO_BIN_EXE_autoscalectl"))
        .args([
            "record",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            upstream,
            "--trace",
        ])
        .arg(trace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .strip_prefix("autoscalectl record listening on ")
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    Proxy(child, addr)
}

fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_autoscalectl"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn curve(json: &serde_json::Value, field: &str) -> Vec<i64> {
    json["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[field].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_through_the_proxy_then_replayed_by_the_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("data"));
    let upstream = server.addr.to_string();
    let recorded = dir.path().join("recorded.jsonl");
    let proxy = start_proxy(&upstream, &recorded);

    // The demo's requests carry their times (the server trusts them); the proxy forwards
    // each and appends it to the trace.
    let mut client = autoscaled_ctl::client::connect(&proxy.1).await.unwrap();
    let mut decided = Vec::new();
    for req in demo_trace() {
        decided.push(i64::from(
            client
                .recommend(req)
                .await
                .unwrap()
                .into_inner()
                .desired_replicas,
        ));
    }
    drop(client);
    drop(proxy);
    let expected: Vec<i64> = documented_curve().into_iter().map(i64::from).collect();
    assert_eq!(decided, expected);
    assert_eq!(trace::read_trace(&recorded).unwrap().len(), 71);

    let spec = examples().join("behavior-demo-spec.json");
    let spec = spec.to_str().unwrap();
    // Stored history under its own spec: every decision reproduced.
    let json: serde_json::Value = serde_json::from_str(&run(&[
        "simulate",
        "--addr",
        &upstream,
        "--target",
        "demo/behavior",
        "--spec",
        spec,
        "--output",
        "json",
    ]))
    .unwrap();
    assert_eq!(curve(&json, "storedDesiredReplicas"), expected);
    assert_eq!(curve(&json, "simulatedDesiredReplicas"), expected);
    assert!(json["summary"]["stored"]["replicaHours"].as_f64().unwrap() > 1.7);
    assert!(json["steps"][0]["evaluationTime"].is_string());
    assert!(json["steps"][0]["currentReplicas"].is_number());
    // The recorded trace, offline.
    let json: serde_json::Value = serde_json::from_str(&run(&[
        "simulate",
        "--trace",
        recorded.to_str().unwrap(),
        "--output",
        "json",
    ]))
    .unwrap();
    assert_eq!(curve(&json, "simulatedDesiredReplicas"), expected);
    // Another spec through the server: a different curve, history untouched.
    let other = examples().join("default-behavior-spec.json");
    let plot = dir.path().join("whatif.svg");
    let text = run(&[
        "simulate",
        "--addr",
        &upstream,
        "--target",
        "demo/behavior",
        "--spec",
        other.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(text.contains("replica-hours"), "{text}");
    roxmltree::Document::parse(&std::fs::read_to_string(&plot).unwrap()).unwrap();
    let history = run(&[
        "history",
        "--addr",
        &upstream,
        "demo/behavior",
        "--output",
        "json",
    ]);
    let history: serde_json::Value = serde_json::from_str(&history).unwrap();
    let runs = history["decisions"].as_array().unwrap();
    let decisions: u64 = runs
        .iter()
        .map(|r| r["runCount"].as_str().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(decisions, 71);

    // The report.
    let report = dir.path().join("report.html");
    run(&[
        "report",
        "--addr",
        &upstream,
        "--target",
        "demo/behavior",
        "--spec",
        other.to_str().unwrap(),
        "--out",
        report.to_str().unwrap(),
    ]);
    let html = std::fs::read_to_string(&report).unwrap();
    for part in [
        "<svg",
        "Conditions over time",
        "Why each change",
        "ScaleUpLimit",
        "1 &rarr; 10",
        "What if",
    ] {
        assert!(html.contains(part), "report lacks {part:?}");
    }
    for external in ["src=", "<link", "<script", "url("] {
        assert!(
            !html.contains(external),
            "the report must load nothing: found {external:?}"
        );
    }
    drop(server);
}

#[test]
fn a_start_up_delay_measures_both_runs_shortfall() {
    let trace = demo_trace();
    let plain = replay_trace(
        &trace,
        None,
        Window::default(),
        None,
        &SimulateOptions::default(),
    )
    .unwrap();
    let s = plain.summary.unwrap().stored.unwrap();
    assert!(s.under_provisioned_replica_minutes.is_none() && s.share_under_provisioned.is_none());
    let measured = |seconds| {
        let r = replay_trace(
            &trace,
            None,
            Window::default(),
            Some(std::time::Duration::from_secs(seconds)),
            &SimulateOptions::default(),
        )
        .unwrap();
        let summary = r.summary.unwrap();
        let (a, b) = (summary.stored.unwrap(), summary.simulated.unwrap());
        // The same run under its own spec: both measures agree.
        assert_eq!(
            a.under_provisioned_replica_minutes,
            b.under_provisioned_replica_minutes
        );
        (
            a.under_provisioned_replica_minutes.unwrap(),
            a.share_under_provisioned.unwrap(),
        )
    };
    // The demo's load rises to 13 replicas' worth in its first steps: the longer replicas
    // take to serve, the more of it finds none.
    let (none, _) = measured(0);
    let (minute, share) = measured(60);
    let (five, _) = measured(300);
    assert!(none < minute && minute < five, "{none} {minute} {five}");
    assert!(share > 0.0 && share < 1.0, "{share}");
    // The text output shows them.
    let text = autoscaled_ctl::whatif::describe(
        &replay_trace(
            &trace,
            None,
            Window::default(),
            Some(std::time::Duration::from_secs(60)),
            &SimulateOptions::default(),
        )
        .unwrap(),
    );
    assert!(text.contains("under-provisioned rep-min"), "{text}");
}
