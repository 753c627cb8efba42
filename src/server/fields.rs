//! Typed reads of a command's JSON fields, with the contract's `invalid`
//! answers. A WebSocket frame and an HTTP body name their fields alike, so
//! both transports read them here and refuse a wrong type in the same words.

use super::error::{ApiError, ErrorCode};
use serde_json::Value;

/// An optional string field; `Err` names it when present but not a string.
pub fn opt_str<'a>(v: &'a Value, field: &str) -> Result<Option<&'a str>, ApiError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::new(
            ErrorCode::Invalid,
            format!("'{field}' must be a string"),
        )),
    }
}

/// An optional boolean field; `Err` names it when present but not a boolean.
pub fn opt_bool(v: &Value, field: &str) -> Result<Option<bool>, ApiError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::new(
            ErrorCode::Invalid,
            format!("'{field}' must be a boolean"),
        )),
    }
}

/// A string field that must be there.
pub fn req_str<'a>(v: &'a Value, field: &str) -> Result<&'a str, ApiError> {
    opt_str(v, field)?
        .ok_or_else(|| ApiError::new(ErrorCode::Invalid, format!("missing field '{field}'")))
}

/// An optional array field (empty when absent); `Err` when not an array.
pub fn opt_array(v: &Value, field: &str) -> Result<Vec<Value>, ApiError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => Ok(a.clone()),
        Some(_) => Err(ApiError::new(
            ErrorCode::Invalid,
            format!("'{field}' must be an array"),
        )),
    }
}
