use super::{charts::seconds, *};

#[test]
fn times_parse_as_the_api_prints_them() {
    assert_eq!(seconds(&json!("1970-01-01T00:00:00Z")), Some(0.0));
    assert_eq!(
        seconds(&json!("2026-11-18T11:06:40.250Z")),
        Some(1_795_000_000.25)
    );
}

#[test]
fn keys_round_trip_through_urls_and_html_is_escaped() {
    let key = "team a/web<1>&ü";
    assert_eq!(percent_decode(&percent_encode(key)).as_deref(), Some(key));
    assert_eq!(esc("<a href=\"x\">"), "&lt;a href=&quot;x&quot;&gt;");
}

/// A row shows what is not as usual (and AbleToScale's reason), not the conditions every
/// target has: ScaledToZero False on each row was noise.
#[test]
fn conditions_in_their_usual_state_are_hidden() {
    let usual = json!({"conditions": [
        {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"},
        {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"},
        {"type": "ScalingLimited", "status": "False", "reason": "DesiredWithinRange"},
        {"type": "ScaledToZero", "status": "False", "reason": "NotScaledToZero"},
    ]});
    let cell = conditions_cell(&usual);
    assert!(cell.contains("AbleToScale ReadyForNewScale"), "{cell}");
    for hidden in ["ValidMetricFound", "DesiredWithinRange", "NotScaledToZero"] {
        assert!(!cell.contains(hidden), "{cell}");
    }
    let zero = json!({"conditions": [{"type": "ScaledToZero", "status": "True", "reason": "ScaledToZero"}]});
    assert!(conditions_cell(&zero).contains("ScaledToZero"));
}

#[test]
fn standing_orders_failing_limited_at_max() {
    let failing = json!({"conditions": [{"type": "AbleToScale", "status": "False", "reason": "FailedUpdateScale"}]});
    let disabled = json!({"conditions": [{"type": "ScalingActive", "status": "False", "reason": "ScalingDisabled"}]});
    let limited = json!({"conditions": [{"type": "ScalingLimited", "status": "True", "reason": "TooManyReplicas"}]});
    let at_max = json!({"currentReplicas": 4, "maxReplicas": 4});
    assert_eq!(Standing::of(&failing), Standing::Failing);
    assert_eq!(Standing::of(&disabled), Standing::Fine);
    assert_eq!(Standing::of(&limited), Standing::Limited);
    assert_eq!(Standing::of(&at_max), Standing::AtMax);
}
