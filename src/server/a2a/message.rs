//! An A2A client's message as the AG-UI user message of a run, and its
//! parts as the payload of a resume (docs/a2a.md).

use serde_json::{Value, json};

/// The AG-UI user message for an A2A message: its text parts joined as
/// `content`, or — when it carries files or data — AG-UI content parts
/// (files by media type: `image`/`audio`/`video`, else `document`; data as
/// a text part holding its JSON).
pub fn user_message(message: &Value) -> Result<Value, String> {
    let id = message
        .get("messageId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("message.messageId is required")?;
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .filter(|p| !p.is_empty())
        .ok_or("message.parts must be a non-empty array")?;
    let all_text = parts.iter().all(|p| p.get("text").is_some());
    let content = if all_text {
        Value::String(texts(parts))
    } else {
        Value::Array(parts.iter().map(content_part).collect::<Result<_, _>>()?)
    };
    Ok(json!({"id": id, "role": "user", "content": content}))
}

/// The answer a message gives to an interrupt: its text, or the value of
/// its single data part.
pub fn answer(message: &Value) -> Value {
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match parts.as_slice() {
        [one] if one.get("data").is_some() => one["data"].clone(),
        _ => Value::String(texts(&parts)),
    }
}

fn texts(parts: &[Value]) -> String {
    parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

fn content_part(part: &Value) -> Result<Value, String> {
    if let Some(text) = part.get("text").and_then(Value::as_str) {
        return Ok(json!({"type": "text", "text": text}));
    }
    if let Some(data) = part.get("data") {
        return Ok(json!({"type": "text", "text": data.to_string()}));
    }
    let mime = part
        .get("mediaType")
        .and_then(Value::as_str)
        .unwrap_or("application/octet-stream");
    let source = if let Some(raw) = part.get("raw").and_then(Value::as_str) {
        json!({"type": "data", "value": raw, "mimeType": mime})
    } else if let Some(url) = part.get("url").and_then(Value::as_str) {
        json!({"type": "url", "value": url, "mimeType": mime})
    } else {
        return Err("a part must hold text, raw, url or data".into());
    };
    let major = mime.split('/').next().unwrap_or("");
    let kind = if matches!(major, "image" | "audio" | "video") {
        major
    } else {
        "document"
    };
    Ok(json!({"type": kind, "source": source}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_stays_text_and_files_become_content_parts() {
        let m = user_message(&json!({"messageId": "m", "parts": [{"text": "a"}, {"text": "b"}]}))
            .unwrap();
        assert_eq!(m["content"], "a\nb");
        let m = user_message(&json!({"messageId": "m", "parts": [
            {"text": "see"}, {"url": "https://x/p.png", "mediaType": "image/png"}]}))
        .unwrap();
        assert_eq!(
            m["content"][1],
            json!({"type": "image", "source": {"type": "url", "value": "https://x/p.png", "mimeType": "image/png"}})
        );
        assert!(user_message(&json!({"messageId": "m", "parts": []})).is_err());
        assert_eq!(
            answer(&json!({"parts": [{"data": {"approved": true}}]})),
            json!({"approved": true})
        );
        assert_eq!(answer(&json!({"parts": [{"text": "blue"}]})), json!("blue"));
    }
}
