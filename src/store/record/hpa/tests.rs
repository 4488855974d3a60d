use prost::Message;

use super::*;
use crate::{
    engine::{
        hpa::DecisionPath,
        hpa::condition::{ConditionReason, ConditionType},
        hpa::spec::{MetricTargetType, ScalingPolicyType, SelectPolicy},
    },
    store::record::{self, VERSION_BINARY},
};

/// A run with every kind of field set.
fn sample_run() -> DecisionEntry {
    let decision = Decision {
        current_replicas: 2,
        desired_replicas: 4,
        conditions: vec![Condition::new(
            ConditionType::AbleToScale,
            true,
            ConditionReason::SucceededRescale,
            "the HPA controller was able to update the target scale to 4",
        )],
        metrics: vec![
            MetricOutcome {
                index: 0,
                result: Ok(MetricProposal {
                    replicas: 4,
                    current_average_utilization: Some(90),
                    current_average_value: Some(900),
                    current_value: None,
                    usage_ratio: Some(1.8),
                }),
                pod_groups: Some(PodGroups {
                    ready_count: 2,
                    unready: vec!["web-2".into()],
                    missing: vec![],
                    ignored: vec![],
                }),
            },
            MetricOutcome {
                index: 1,
                result: Err(MetricFailure {
                    reason: ConditionReason::FailedGetExternalMetric,
                    message: "no samples".into(),
                }),
                pod_groups: None,
            },
        ],
        path: DecisionPath::Behavior,
        prenormalized_replicas: Some(4),
        stabilized_replicas: Some(4),
        scale_up_limit: Some(8),
        scale_down_limit: Some(1),
        error: Some("no samples".into()),
        rescale_reason: Some(
            "cpu resource utilization (percentage of request) above target".into(),
        ),
        extensions: None,
        budget: None,
        schedule: None,
        predictive: None,
    };
    DecisionEntry {
        time: Time::from_unix_millis(1_767_225_660_000),
        decision,
        metrics: vec![
            MetricSpec::Resource {
                name: "cpu".into(),
                target: MetricTarget {
                    target_type: MetricTargetType::Utilization,
                    average_utilization: Some(50),
                    average_value: None,
                    value: None,
                },
            },
            MetricSpec::External {
                name: "queue".into(),
                target: MetricTarget {
                    target_type: MetricTargetType::Value,
                    average_utilization: None,
                    average_value: None,
                    value: Some(30_000),
                },
            },
        ],
        inputs: Some(DecisionInputs {
            policy: None,
            shadow: false,
            schedules: Vec::new(),
            min_replicas: Some(1),
            max_replicas: 10,
            behavior: Some(Behavior {
                scale_up: Some(ScalingRules {
                    stabilization_window_seconds: Some(0),
                    select_policy: Some(SelectPolicy::Max),
                    policies: Some(vec![ScalingPolicy {
                        policy_type: ScalingPolicyType::Percent,
                        value: 100,
                        period_seconds: 15,
                    }]),
                    tolerance: Some(0.05),
                }),
                scale_down: None,
            }),
            // The gate off: the golden bytes predate it (and decode to false).
            settings: Settings {
                scale_to_zero: false,
                ..Settings::default()
            },
        }),
        pod_totals: vec![
            PodTotals {
                ready: 2,
                unready: 1,
                missing: 0,
                ignored: 0,
            },
            PodTotals::default(),
        ],
        readings: Vec::new(),
        run: Run {
            count: 3,
            first_time: Time::from_unix_millis(1_767_225_630_000),
        },
        seq: 7,
    }
}

fn sample_history() -> History {
    History {
        recommendations: Some(vec![
            Recommendation {
                replicas: 2,
                time: Time::from_unix_millis(1_767_225_630_000),
            },
            Recommendation {
                replicas: 4,
                time: Time::from_unix_millis(1_767_225_645_000),
            },
        ]),
        scale_up_events: vec![ScaleEvent {
            replica_change: 2,
            time: Time::from_unix_millis(1_767_225_645_000),
            outdated: false,
        }],
        scale_down_events: vec![],
        extensions: None,
        predictive: None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The sample run as this build records it: a reading per decision (the external metric
/// failed in each).
fn sample_run_with_readings() -> DecisionEntry {
    let mut run = sample_run();
    run.readings = [
        (1_767_225_630_000, 85),
        (1_767_225_645_000, 88),
        (1_767_225_660_000, 90),
    ]
    .into_iter()
    .map(|(t, cpu)| Reading {
        time: Time::from_unix_millis(t),
        values: vec![Some(cpu), None],
    })
    .collect();
    run
}

/// Version 2 as builds before version 4 wrote it, byte for byte: still read, as the
/// same run (without readings) and history.
const GOLDEN_V2_RUN: &str = "020807100318e0f4d8edee6620e0d4032ad101080210041a4110011804223b7468652048504120636f6e74726f6c6c6572207761732061626c6520746f207570646174652074686520746172676574207363616c6520746f2034221f12100804105a18840729cdccccccccccfc3f220b080212057765622d322801221208011a0e080a120a6e6f2073616d706c657328053004380440084801520a6e6f2073616d706c65735a3d637075207265736f75726365207574696c697a6174696f6e202870657263656e74616765206f662072657175657374292061626f766520746172676574320912036370752202103232110804120571756575652206080220b0ea013a480801100a1a190a17080010001801220608011064180f299a9999999999a93f2227099a9999999999b93f10e0a71218b0ea0120e0a712290000000000000040310000000000001040";
const GOLDEN_V2_HISTORY: &str = "020801120204081a09e0f4d8edee66b0ea01220908021090dfdaedee66";

fn unhex(s: &str) -> Vec<u8> {
    let s = s.replace(' ', "");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn version_2_records_still_read() {
    let run = unhex(GOLDEN_V2_RUN);
    assert_eq!(run[0], VERSION_BINARY);
    let decoded: pb::DecisionRun = record::decode_binary("decision", "k", &run[1..]).unwrap();
    assert_eq!(run_from_record(&decoded).unwrap(), sample_run());
    let history = unhex(GOLDEN_V2_HISTORY);
    let decoded: pb::History = record::decode_binary("state", "k", &history[1..]).unwrap();
    assert_eq!(history_from_record(&decoded).unwrap(), sample_history());
}

/// Version 4 on disk, byte for byte: a change here is a format change (a new version
/// byte and a migration), never an accident of renaming an engine type. The conditions
/// are packed codes (field 14: the message prefix code 14 with the rest "4"), the last
/// time is left out (the last reading's), the rescale
/// reason is prefix code 21 with no rest, the readings follow the run (field 8: three
/// readings, their zero time differences left out, cpu 85 +3 +2, the external metric
/// absent at 0, 1, 2); the inputs' settings are only what differs from the fixed defaults
/// (the gate, off).
const GOLDEN_V4_RUN: &str = "040807100318e0f4d8edee662a5d08021004221f12100804105a18840729cdccccccccccfc3f220b080212057765622d322801221208011a0e080a120a6e6f2073616d706c657328053004380440084801520a6e6f2073616d706c65735a00681572080a03908138120134320912036370752202103232110804120571756575652206080220b0ea013a230801100a1a190a17080010001801220608011064180f299a9999999999a93f2a02380042111a060a04aa0106041a0512030001022003";
/// The history of version 4: recommendation times as delta-of-delta.
const GOLDEN_V4_HISTORY: &str = "0408012206080220b0ea013209e0f4d8edee660000003a0404000800";

#[test]
fn version_4_records_are_byte_for_byte_golden_and_read_back() {
    let run = encode_run(&run_to_record(&sample_run_with_readings(), 50));
    assert_eq!(run[0], record::VERSION_HPA);
    assert_eq!(hex(&run), GOLDEN_V4_RUN, "run record bytes changed");
    let history =
        record::encode_versioned(record::VERSION_HPA, &history_to_record(&sample_history()));
    assert_eq!(
        hex(&history),
        GOLDEN_V4_HISTORY,
        "history record bytes changed"
    );
    // The same run as version 2 wrote it, plus its readings, in three quarters of the bytes.
    assert!(
        run.len() < unhex(GOLDEN_V2_RUN).len() * 3 / 4,
        "{} B",
        run.len()
    );

    let decoded: pb::DecisionRun = record::decode_binary("decision", "k", &run[1..]).unwrap();
    assert_eq!(
        run_from_record(&decoded).unwrap(),
        sample_run_with_readings()
    );
    let decoded: pb::History = record::decode_binary("state", "k", &history[1..]).unwrap();
    assert_eq!(history_from_record(&decoded).unwrap(), sample_history());
}

/// Every message the engine has as a constant is stored as a code alone, and any text
/// (a prefix, part of one, none, or a prefix followed by more) reads back as itself.
#[test]
fn messages_are_prefix_codes_and_read_back_exactly() {
    use crate::engine::hpa::{messages as controller, normalize::messages as normalize};
    for m in [
        normalize::READY_FOR_NEW_SCALE,
        normalize::SCALE_DOWN_STABILIZED,
        normalize::SCALE_UP_STABILIZED,
        normalize::DESIRED_WITHIN_RANGE,
        normalize::TOO_MANY_REPLICAS,
        normalize::TOO_FEW_REPLICAS,
        normalize::SCALE_UP_LIMIT,
        normalize::SCALE_DOWN_LIMIT,
        controller::SUCCEEDED_GET_SCALE,
        controller::SCALING_DISABLED,
        controller::ABOVE_MAX,
        controller::BELOW_MIN,
        controller::ALL_BELOW_TARGET,
    ] {
        let (code, rest) = codes::message_prefix(m);
        assert!(code > 0 && rest.is_empty(), "{m:?} is not a code");
    }
    for m in [
        "",
        "the HPA",
        "the HPA controller was able to update the target scale to 12",
        "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)",
        "the HPA was able to successfully calculate a replica count from cpu resource",
        "a message of someone else's",
    ] {
        let (code, rest) = codes::message_prefix(m);
        assert_eq!(codes::message_from(code, rest).unwrap(), m);
    }
    assert!(codes::message_from(codes::MESSAGE_PREFIXES.len() as u32 + 1, "").is_err());
}

/// Settings are stored as their changes to the fixed defaults: none for Kubernetes 1.37's
/// defaults, and any value (also -0.0 against 0.0) reads back exactly.
#[test]
fn settings_are_stored_as_changes_and_read_back_exactly() {
    let mut inputs = sample_run().inputs.unwrap();
    inputs.settings = Settings::default();
    assert!(
        inputs.settings.scale_to_zero,
        "the engine's defaults are 1.37's"
    );
    let r = inputs_to_record(&inputs);
    assert_eq!(r.settings_changes, Some(pb::SettingsChanges::default()));
    assert_eq!(inputs_from_record(&r).unwrap(), inputs);
    let changed = [
        Settings {
            tolerance: -0.0,
            ..Settings::default()
        },
        Settings {
            tolerance: 0.25,
            ..Settings::default()
        },
        Settings {
            cpu_initialization_period: Duration::from_millis(1),
            ..Settings::default()
        },
        Settings {
            initial_readiness_delay: Duration::ZERO,
            ..Settings::default()
        },
        Settings {
            downscale_stabilization: Duration::from_secs(3600),
            ..Settings::default()
        },
        Settings {
            scale_up_limit_factor: 3.5,
            ..Settings::default()
        },
        Settings {
            scale_up_limit_minimum: 0.0,
            ..Settings::default()
        },
        Settings {
            scale_to_zero: false,
            ..Settings::default()
        },
    ];
    for settings in changed {
        inputs.settings = settings;
        let back = inputs_from_record(&inputs_to_record(&inputs)).unwrap();
        assert_eq!(
            back.settings.tolerance.to_bits(),
            inputs.settings.tolerance.to_bits()
        );
        assert_eq!(back, inputs);
    }
}

/// Readings at any times (gaps irregular, negative, huge) and with any values missing
/// read back exactly.
#[test]
fn readings_read_back_exactly() {
    let cases: Vec<Vec<Reading>> = vec![
        vec![],
        vec![Reading {
            time: Time::from_unix_millis(5),
            values: vec![],
        }],
        (0..40)
            .map(|i| Reading {
                time: Time::from_unix_millis(1_000 + i * i * 977 - (i % 3) * 15_000),
                values: vec![
                    (i % 4 != 0).then_some(i * 1_000_003 - 7),
                    None,
                    Some(i64::MIN + i),
                ],
            })
            .collect(),
    ];
    for readings in cases {
        let r = readings_to_record(-3, &readings);
        let back = r
            .as_ref()
            .map(|r| readings_from_record(-3, r).unwrap())
            .unwrap_or_default();
        assert_eq!(back, readings);
    }
}

#[test]
fn a_steady_state_target_is_small() {
    // 20 recommendations (5 min at 15 s) and a one-metric run.
    let history = History {
        recommendations: Some(
            (0..20)
                .map(|i| Recommendation {
                    replicas: 3,
                    time: Time::from_unix_millis(1_767_225_600_000 + i * 15_000),
                })
                .collect(),
        ),
        ..History::default()
    };
    let full = record::encode_versioned(
        record::VERSION_HPA,
        &pb::HpaState {
            history: Some(history_to_record(&history)),
            next_seq: 12,
            log_len: 11,
            pending: Some(run_to_record(&sample_run(), 50)),
            pending_tail: None,
        },
    );
    assert!(full.len() < 1024, "{} bytes", full.len());
    // The next decision of the run, the same in all but its time: a tail only.
    let logged = run_to_record(&sample_run(), 50);
    let mut next = sample_run();
    next.run.count += 1;
    next.time = next.time.plus(Duration::from_secs(15));
    let run_tail = tail_of(run_to_record(&next, 50), &logged);
    let tail = crate::store::hpa::StoredState::encode_tail(&history, 12, 11, run_tail.clone());
    println!(
        "steady-state state record: {} B with the run whole (version 2), {} B as a tail \
         (version 3, of which the tail {} B)",
        full.len(),
        tail.len(),
        run_tail.encoded_len()
    );
    assert!(run_tail.encoded_len() < 24, "{run_tail:?}");
    assert!(tail.len() < full.len() / 3, "{} bytes", tail.len());
}

/// A run's next decisions, each differing from the logged body in one part that a run
/// may vary in (same outcome: `DecisionEntry::same_outcome`).
fn variations() -> Vec<(&'static str, DecisionEntry)> {
    let later = |mut e: DecisionEntry| {
        e.run.count += 4;
        e.time = e.time.plus(Duration::from_secs(60));
        e
    };
    let mut usage = later(sample_run());
    if let Ok(p) = &mut usage.decision.metrics[0].result {
        p.current_average_utilization = Some(91);
        p.usage_ratio = Some(1.82);
    }
    let mut message = later(sample_run());
    message.decision.conditions[0].message = "another message".into();
    let mut pods = later(sample_run());
    pods.decision.metrics[0]
        .pod_groups
        .as_mut()
        .unwrap()
        .unready = vec!["web-3".into()];
    let mut scalars = later(sample_run());
    scalars.decision.scale_up_limit = Some(9);
    scalars.decision.error = None;
    let mut inputs = later(sample_run());
    inputs.inputs.as_mut().unwrap().min_replicas = Some(2);
    let mut no_inputs = later(sample_run());
    no_inputs.inputs = None;
    let mut specs = later(sample_run());
    specs.metrics.pop();
    let mut budget = later(sample_run());
    budget.decision.budget = Some(Box::new(BudgetReport {
        group: "gpus".into(),
        uncapped_replicas: 6,
        fair_share: 4,
        capacity: 10,
        units_per_replica: 2,
        used: 9,
    }));
    let mut policy = later(sample_run());
    policy.inputs.as_mut().unwrap().policy = Some(PolicyRef {
        name: "tier/web".into(),
        version: 3,
    });
    let mut shadow = later(sample_run());
    shadow.inputs.as_mut().unwrap().shadow = true;
    vec![
        ("same", later(sample_run())),
        ("usage", usage),
        ("message", message),
        ("pods", pods),
        ("scalars", scalars),
        ("inputs", inputs),
        ("no inputs", no_inputs),
        ("metric specs", specs),
        ("budget", budget),
        ("policy", policy),
        ("shadow", shadow),
    ]
}

#[test]
fn a_tail_over_the_logged_body_gives_the_run_back_exactly() {
    let logged = run_to_record(&sample_run(), 50);
    for (what, next) in variations() {
        let record = run_to_record(&next, 50);
        let tail = tail_of(record.clone(), &logged);
        let back = apply_tail(logged.clone(), &tail);
        assert_eq!(back, record, "{what}");
        assert_eq!(run_from_record(&back).unwrap(), next, "{what}");
        // Only what differs is in the tail.
        assert_eq!(
            tail.decision.is_some(),
            record.decision != logged.decision,
            "{what}"
        );
        let parts = tail.decision.as_ref().map(|d| {
            (
                !d.conditions.is_empty() || d.packed_conditions.is_some(),
                !d.metrics.is_empty(),
                d.current_replicas != 0 || d.scale_up_limit.is_some(),
            )
        });
        let expected = match what {
            "usage" | "pods" => Some((false, true, false)),
            "message" => Some((true, false, false)),
            "scalars" | "budget" => Some((false, false, true)),
            _ => None,
        };
        assert_eq!(parts, expected, "{what}");
        assert_eq!(
            tail.metrics.is_some(),
            record.metrics != logged.metrics,
            "{what}"
        );
    }
    let same = tail_of(run_to_record(&variations()[0].1, 50), &logged);
    assert_eq!(
        same,
        pb::RunTail {
            seq: 7,
            count: 7,
            first_time_ms: 1_767_225_630_000,
            last_time_delta_ms: Some(90_000),
            ..pb::RunTail::default()
        }
    );
}

/// Version 3 (a state record whose newest run is a tail), byte for byte: the history
/// (as in version 2), `next_seq`, `log_len`, then the tail: seq, count, first time, last
/// time delta, the decision with only the metric outcomes (they changed), and the flags
/// `logged_conditions`, `logged_extensions`, `logged_scalars`.
const GOLDEN_V3_STATE: &str = "03 0a1c0801120204081a09e0f4d8edee66b0ea01220908021090dfdaedee66 1008 1803 2a4c 0807 1007 18e0f4d8edee66 20a0fe0a 2a35 221f12100804105b188407291f85eb51b81efd3f220b080212057765622d322801 221208011a0e080a120a6e6f2073616d706c6573 3001 5801 6001";

/// Version 3 as builds before version 4 wrote it: its tail over the version-2 run
/// golden reads as the same run as then.
#[test]
fn version_3_state_records_still_read() {
    let logged = unhex(GOLDEN_V2_RUN);
    let logged: pb::DecisionRun = record::decode_binary("decision", "k", &logged[1..]).unwrap();
    let (_, usage) = variations().swap_remove(1);
    let bytes = unhex(GOLDEN_V3_STATE);
    assert_eq!(bytes[0], record::VERSION_STATE_TAIL);
    let back: pb::HpaState = record::decode_binary("state", "k", &bytes[1..]).unwrap();
    assert_eq!(
        history_from_record(back.history.as_ref().unwrap()).unwrap(),
        sample_history()
    );
    let run = apply_tail(logged, &back.pending_tail.unwrap());
    assert_eq!(run_from_record(&run).unwrap(), usage);
}

/// Version 4 state record whose newest run is a tail, byte for byte: the history (replicas
/// and times as runs, the scale event's time from the first recommendation's), `next_seq`,
/// `log_len`, then the tail: seq, count, first time (the last time is the last reading's),
/// the decision with only the metric outcomes (they changed), the flags
/// `logged_conditions`, `logged_extensions`, `logged_scalars`, and the run's readings.
const GOLDEN_V4_STATE: &str = "04 0a1b08012206080220b0ea013209e0f4d8edee660000003a0404000800 1008 1803 2a64 0807 1007 18e0f4d8edee66 2a35 221f12100804105b188407291f85eb51b81efd3f220b080212057765622d322801 221208011a0e080a120a6e6f2073616d706c6573 3001 5801 6001 6a1a 1205000090bf05 1a070a05aa01060402 1a06120400010203 2004";

#[test]
fn version_4_state_records_are_byte_for_byte_golden() {
    let logged = run_to_record(&sample_run_with_readings(), 50);
    let (_, mut usage) = variations().swap_remove(1);
    usage.readings = sample_run_with_readings().readings;
    usage.readings.push(Reading {
        time: usage.time,
        values: vec![Some(91), None],
    });
    let bytes = crate::store::hpa::StoredState::encode_tail(
        &sample_history(),
        8,
        3,
        tail_of(run_to_record(&usage, 50), &logged),
    );
    assert_eq!(
        hex(&bytes),
        GOLDEN_V4_STATE.replace(' ', ""),
        "version-4 state record bytes changed"
    );
    let back: pb::HpaState = record::decode_binary("state", "k", &bytes[1..]).unwrap();
    let run = apply_tail(logged, &back.pending_tail.unwrap());
    assert_eq!(run_from_record(&run).unwrap(), usage);
}

#[test]
fn unknown_codes_are_refused_not_defaulted() {
    let mut r = run_to_record(&sample_run(), 50);
    r.decision.as_mut().unwrap().path = 99;
    let err = run_from_record(&r).unwrap_err();
    assert!(err.contains("99"), "{err}");
}

/// A decision raised by a forecaster added after the first four reads back with it, and is
/// written so that a build that knows only the first four (`model` 1 to 4, refusing others)
/// still reads the decision, without its forecaster: a rolling upgrade or a rollback on a
/// shared etcd store keeps every target readable.
#[test]
fn a_later_forecaster_does_not_make_the_decision_unreadable_to_older_builds() {
    use crate::engine::hpa::predictive::{PredictiveMode, PredictiveReport, model::ModelKind};
    for (model, old_code, code) in [
        (None, 0, 0),
        (Some(ModelKind::Level5m), 1, 1),
        (Some(ModelKind::Week), 4, 4),
        (Some(ModelKind::Blend), 0, 5),
    ] {
        let mut run = sample_run();
        run.decision.predictive = Some(Box::new(PredictiveReport {
            mode: PredictiveMode::ScaleUp,
            metric: Some("Resource/cpu".into()),
            model,
            load: Some(3.5),
            forecast_load: Some(4.5),
            forecast_replicas: Some(5),
            reactive_replicas: Some(4),
            raised: true,
            wape: Some(0.12),
            reason: ConditionReason::ForecastRaised,
        }));
        let record = run_to_record(&run, 50);
        let report = record
            .decision
            .as_ref()
            .unwrap()
            .predictive
            .as_ref()
            .unwrap();
        assert_eq!(
            (report.model, report.forecaster),
            (old_code, code),
            "{model:?}"
        );
        assert_eq!(run_from_record(&record).unwrap(), run, "{model:?}");
        // What a build before `forecaster` reads: the same record without it.
        let mut older = record.clone();
        let p = older
            .decision
            .as_mut()
            .unwrap()
            .predictive
            .as_mut()
            .unwrap();
        p.forecaster = 0;
        let read = run_from_record(&older).unwrap();
        let expect = model.filter(|m| *m != ModelKind::Blend);
        assert_eq!(read.decision.predictive.unwrap().model, expect, "{model:?}");
    }
}
