//! Kubernetes quantities in the command-line client's proto3 JSON input.
//!
//! The wire carries integer milli-units (`requests_milli`, `value_milli`, ...). In a file given
//! to `autoscaled recommend`, people write quantities the Kubernetes way, so before the proto3
//! JSON decoding this pass rewrites, guided by the message descriptors:
//!
//! * a field named as in Kubernetes, without the `Milli` suffix (`requests`, `usage`,
//!   `value`, `averageValue`, `values`), takes quantities: `"500m"`, `"2"` (two units), `"1Gi"`,
//!   or plain numbers (units); it becomes the `...Milli` field;
//! * a `...Milli` field keeps its meaning (a bare number is milli-units, as on the wire) and
//!   also accepts a quantity with a suffix (`"500m"`, `"1Gi"`).
//!
//! Errors name the field by its path (`pods[0].requests.cpu: invalid quantity "5OOm"`).

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::Value;

use super::quantity::parse_milli;

/// Rewrites quantities in `value`, a JSON encoding of `message`; errors name the field.
pub(crate) fn normalize_quantities(
    message: &MessageDescriptor,
    value: &mut Value,
) -> Result<(), String> {
    walk_message(message, value, "")
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn find_field(message: &MessageDescriptor, key: &str) -> Option<FieldDescriptor> {
    message
        .get_field_by_json_name(key)
        .or_else(|| message.get_field_by_name(key))
}

/// Whether `field` carries milli-units: an int64 (scalar, list or map value) named `*_milli`.
fn is_milli(field: &FieldDescriptor) -> bool {
    let int64 = |kind: &Kind| matches!(kind, Kind::Int64 | Kind::Sint64 | Kind::Sfixed64);
    let kind_ok = if field.is_map() {
        match field.kind() {
            Kind::Message(entry) => int64(&entry.map_entry_value_field().kind()),
            _ => false,
        }
    } else {
        int64(&field.kind())
    };
    kind_ok && (field.name().ends_with("_milli") || field.name() == "values_milli")
}

fn walk_message(message: &MessageDescriptor, value: &mut Value, path: &str) -> Result<(), String> {
    let Value::Object(object) = value else {
        return Ok(());
    };
    // Kubernetes-named aliases first: `requests` -> `requestsMilli` with unit semantics.
    let aliases: Vec<(String, FieldDescriptor)> = object
        .keys()
        .filter(|key| find_field(message, key).is_none())
        .filter_map(|key| {
            let milli = find_field(message, &format!("{key}Milli"))
                .or_else(|| find_field(message, &format!("{key}_milli")))?;
            is_milli(&milli).then(|| (key.clone(), milli))
        })
        .collect();
    for (key, field) in aliases {
        let json_name = field.json_name().to_owned();
        if object.contains_key(&json_name) || object.contains_key(field.name()) {
            return Err(format!(
                "{}: given twice, as {key} and as {json_name}",
                join(path, &json_name)
            ));
        }
        let mut v = object.remove(&key).unwrap_or(Value::Null);
        convert_field(&field, &mut v, &join(path, &key), true)?;
        object.insert(json_name, v);
    }
    for (key, v) in object.iter_mut() {
        let Some(field) = find_field(message, key) else {
            continue; // the proto3 JSON decoder names unknown fields
        };
        let field_path = join(path, key);
        if is_milli(&field) {
            convert_field(&field, v, &field_path, false)?;
        } else if let Kind::Message(inner) = field.kind() {
            if field.is_map() {
                let value_field = inner.map_entry_value_field();
                if let (Kind::Message(value_message), Value::Object(map)) =
                    (value_field.kind(), &mut *v)
                {
                    for (k, item) in map.iter_mut() {
                        walk_message(&value_message, item, &format!("{field_path}.{k}"))?;
                    }
                }
            } else if let Value::Array(items) = v {
                for (i, item) in items.iter_mut().enumerate() {
                    walk_message(&inner, item, &format!("{field_path}[{i}]"))?;
                }
            } else {
                walk_message(&inner, v, &field_path)?;
            }
        }
    }
    Ok(())
}

/// Converts a milli-unit field's value (scalar, list or map of them) in place.
fn convert_field(
    field: &FieldDescriptor,
    value: &mut Value,
    path: &str,
    units: bool,
) -> Result<(), String> {
    match value {
        Value::Object(map) if field.is_map() => {
            for (k, v) in map.iter_mut() {
                convert_scalar(v, &format!("{path}.{k}"), units)?;
            }
            Ok(())
        }
        Value::Array(items) if field.is_list() => {
            for (i, v) in items.iter_mut().enumerate() {
                convert_scalar(v, &format!("{path}[{i}]"), units)?;
            }
            Ok(())
        }
        _ if field.is_map() || field.is_list() => Err(format!(
            "{path}: expected {}",
            if field.is_map() {
                "an object"
            } else {
                "a list"
            }
        )),
        v => convert_scalar(v, path, units),
    }
}

/// One quantity. `units`: a bare number counts whole units (Kubernetes-named field);
/// otherwise milli-units (the wire's `...Milli` field), and only suffixed strings are
/// quantities.
fn convert_scalar(value: &mut Value, path: &str, units: bool) -> Result<(), String> {
    let milli = match &*value {
        Value::Null => return Ok(()),
        Value::Number(n) if units => {
            let text = n.to_string();
            parse_milli(&text).map_err(|e| format!("{path}: {e}"))?
        }
        Value::Number(_) => return Ok(()),
        Value::String(s) => {
            let plain_integer = {
                let digits = s.strip_prefix('-').unwrap_or(s);
                !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
            };
            if plain_integer && !units {
                return Ok(());
            }
            parse_milli(s).map_err(|e| format!("{path}: {e}"))?
        }
        _ => {
            return Err(format!(
                "{path}: expected a quantity such as \"500m\" or \"1Gi\""
            ));
        }
    };
    *value = Value::String(milli.to_string());
    Ok(())
}
