//! The chat-completions answer as it comes on the wire: a whole answer (`choices[].message`) or
//! one chunk of a streamed one (`choices[].delta`), read straight into these types rather than
//! through a `serde_json::Value` tree, so that a parsed answer takes about the size of its text;
//! fields toolplane does not use are skipped unread. A field whose type is wrong fails the
//! answer saying where; an error the model server reports in place of an answer is found by
//! [`reported_error`].

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_json::Value;

use super::model::{ModelError, ModelReply, ToolCallRequest};
use super::types::TokenUsage;

/// A whole answer, or one chunk of a streamed one: `message` is set in the first, `delta` in
/// the second.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Answer {
    /// The model that answered.
    pub model: Option<String>,
    /// The choices; toolplane asks for one and reads the first.
    pub choices: Option<Vec<Choice>>,
    /// Token usage (a streamed answer sends it in its last chunk, with no choices).
    pub usage: Option<Usage>,
    /// An error reported in place of an answer (OpenAI, vLLM, Ollama): `{"message": ...}`.
    pub error: Option<Value>,
    /// `"error"` when the whole answer is an error (vLLM before 0.6).
    pub object: Option<String>,
    /// The error's message when `object` is `"error"`.
    pub message: Option<Value>,
}

/// One choice of an answer.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Choice {
    /// The whole message (an answer that is not streamed).
    pub message: Option<Message>,
    /// The next piece of the message (a streamed answer).
    pub delta: Option<Message>,
    /// Why the model stopped; set once, on the last piece of a streamed answer.
    pub finish_reason: Option<String>,
}

/// A message, or a piece of one.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Message {
    /// The words: a string, or (Mistral) a list of parts whose `text` parts are joined.
    #[serde(deserialize_with = "text")]
    pub content: String,
    /// The tool calls, or pieces of them in a streamed answer.
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// A tool call, or a piece of one.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ToolCall {
    /// Which call of the answer a piece belongs to (streamed answers only).
    pub index: Option<u64>,
    /// The call's id.
    pub id: Option<String>,
    /// The function called.
    pub function: Option<Function>,
}

/// The function of a tool call.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Function {
    /// Its name.
    pub name: Option<String>,
    /// Its arguments, as the JSON text OpenAI sends (an object sent instead is written out).
    #[serde(deserialize_with = "json_text")]
    pub arguments: String,
}

/// Token usage as reported.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Usage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl Usage {
    /// The usage, when both counts are there and fit.
    pub(super) fn counted(&self) -> Option<TokenUsage> {
        let count = |n: Option<u64>| n.and_then(|n| u32::try_from(n).ok());
        TokenUsage::new(count(self.prompt_tokens)?, count(self.completion_tokens)?).ok()
    }
}

/// `json` read as an answer or a chunk; what does not read is named by where it is
/// (`choices[0].message.content: invalid type ...`), or, when it is not JSON at all, by its
/// line and column.
pub(super) fn parse_answer(json: &[u8]) -> Result<Answer, String> {
    let mut reader = serde_json::Deserializer::from_slice(json);
    let answer: Answer = serde_path_to_error::deserialize(&mut reader).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if path == "." || inner.is_syntax() || inner.is_eof() {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        }
    })?;
    reader.end().map_err(|e| e.to_string())?;
    Ok(answer)
}

/// The reply in `body`, a whole (not streamed) answer which came at attempt `attempts`, named
/// `model` unless it names its own; or why it cannot be used.
pub(crate) fn reply_of(body: &[u8], model: &str, attempts: u32) -> Result<ModelReply, ModelError> {
    let answer = parse_answer(body).map_err(|e| {
        ModelError::new(format!("the answer is not a chat-completions answer: {e}"))
    })?;
    if let Some(error) = reported_error(&answer) {
        return Err(ModelError::new(format!(
            "the model server answered with an error: {error}"
        )));
    }
    let usage = answer.usage.as_ref().and_then(|u| u.counted());
    let Some(message) = answer
        .choices
        .and_then(|c| c.into_iter().next())
        .and_then(|c| c.message)
    else {
        // Only now is the answer read as a tree, to show what it holds instead.
        let shown = serde_json::from_slice(body).unwrap_or_default();
        return Err(ModelError::new(format!(
            "the answer has no choices[0].message: {}",
            crate::shown::shown_json(&shown)
        )));
    };
    Ok(ModelReply {
        content: message.content,
        tool_calls: tool_call_requests(message.tool_calls),
        model: answering_model(answer.model, model),
        usage,
        attempts,
    })
}

/// The most bytes of the model name an answer gives that are kept (model names are short: a
/// long one is cut, so that it cannot swell every answer and span naming it).
const MAX_MODEL_NAME_BYTES: usize = 256;

/// The model an answer names (cut at [`MAX_MODEL_NAME_BYTES`]), or `asked` when it names none.
pub(crate) fn answering_model(named: Option<String>, asked: &str) -> String {
    match named {
        Some(name) => crate::shown::clipped(&name, MAX_MODEL_NAME_BYTES).into_owned(),
        None => asked.to_owned(),
    }
}

/// Arguments arrive as JSON text; text that does not parse is kept as a string, and none is an
/// empty object.
pub(super) fn arguments_value(text: &str) -> Value {
    if text.trim().is_empty() {
        Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
    }
}

/// The tool calls of a whole message.
fn tool_call_requests(calls: Option<Vec<ToolCall>>) -> Vec<ToolCallRequest> {
    calls
        .into_iter()
        .flatten()
        .map(|call| {
            let function = call.function.unwrap_or_default();
            ToolCallRequest {
                id: call.id.unwrap_or_default(),
                name: function.name.unwrap_or_default(),
                arguments: arguments_value(&function.arguments),
            }
        })
        .collect()
}

/// The error a model server reports in place of an answer (`{"error": {"message": ...}}`,
/// `{"error": "..."}`, or vLLM's `{"object": "error", "message": ...}`), as its message or,
/// when it has none, its JSON.
pub(super) fn reported_error(answer: &Answer) -> Option<String> {
    let error = match (&answer.error, answer.object.as_deref()) {
        (Some(error), _) if !error.is_null() => error,
        (_, Some("error")) => answer.message.as_ref().unwrap_or(&Value::Null),
        _ => return None,
    };
    Some(error_text(error))
}

/// The message of an error object (llama.cpp's `error:` event line holds one too).
pub(super) fn error_text(error: &Value) -> String {
    match error.get("message").unwrap_or(error) {
        Value::String(message) => message.clone(),
        other => crate::shown::shown_json(other),
    }
}

/// A message's `content`: a string, null, or a list of parts (`{"type": "text", "text": ...}`)
/// whose text parts are joined; other parts (Mistral's `thinking`) are not the answer.
fn text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    struct Text;
    impl<'de> Visitor<'de> for Text {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string, null, or a list of content parts")
        }
        fn visit_str<E: de::Error>(self, text: &str) -> Result<String, E> {
            Ok(text.to_owned())
        }
        fn visit_string<E: de::Error>(self, text: String) -> Result<String, E> {
            Ok(text)
        }
        fn visit_unit<E: de::Error>(self) -> Result<String, E> {
            Ok(String::new())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut parts: A) -> Result<String, A::Error> {
            #[derive(Deserialize)]
            struct Part {
                #[serde(rename = "type")]
                kind: Option<String>,
                text: Option<String>,
            }
            let mut joined = String::new();
            while let Some(part) = parts.next_element::<Part>()? {
                if matches!(part.kind.as_deref(), None | Some("text")) {
                    joined.push_str(part.text.as_deref().unwrap_or_default());
                }
            }
            Ok(joined)
        }
    }
    deserializer.deserialize_any(Text)
}

/// A function's `arguments`: the JSON text OpenAI sends, or (as some servers send) the JSON
/// itself, written out as text; null is no text.
fn json_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Arguments {
        Text(String),
        Json(Option<Value>),
    }
    // Arguments are small next to the answer: the copy serde makes of an untagged value costs
    // little here, unlike for `content`.
    Ok(match Arguments::deserialize(deserializer)? {
        Arguments::Text(text) => text,
        Arguments::Json(None) => String::new(),
        Arguments::Json(Some(json)) => json.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(json: Value) -> Answer {
        serde_json::from_value(json).expect("an answer")
    }

    #[test]
    fn content_is_text_null_or_text_parts() {
        let contents = [
            (json!("words"), "words"),
            (json!(null), ""),
            (
                json!([{"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]},
                       {"type": "text", "text": "the "}, {"type": "text", "text": "answer"}]),
                "the answer",
            ),
        ];
        for (content, expected) in contents {
            let message: Message =
                serde_json::from_value(json!({"content": content})).expect("a message");
            assert_eq!(message.content, expected);
        }
        let wrong = serde_json::from_value::<Message>(json!({"content": 5}))
            .expect_err("a number is no content");
        assert!(
            wrong.to_string().contains("a list of content parts"),
            "{wrong}"
        );
    }

    #[test]
    fn arguments_are_json_text_or_json() {
        for (arguments, expected) in [
            (json!(r#"{"a": 1}"#), r#"{"a": 1}"#),
            (json!({"a": 1}), r#"{"a":1}"#),
            (json!(null), ""),
        ] {
            let function: Function =
                serde_json::from_value(json!({"name": "f", "arguments": arguments}))
                    .expect("a function");
            assert_eq!(function.arguments, expected);
        }
    }

    #[test]
    fn errors_reported_in_place_of_an_answer_are_found() {
        let reported = [
            (
                json!({"error": {"message": "context too long", "code": 400}}),
                Some("context too long"),
            ),
            (json!({"error": "overloaded"}), Some("overloaded")),
            (
                json!({"object": "error", "message": "bad request", "code": 400}),
                Some("bad request"),
            ),
            (json!({"error": {"code": 500}}), Some(r#"{"code":500}"#)),
            (json!({"error": null, "choices": []}), None),
            (
                json!({"object": "chat.completion.chunk", "choices": []}),
                None,
            ),
        ];
        for (body, expected) in reported {
            assert_eq!(
                reported_error(&answer(body.clone())).as_deref(),
                expected,
                "{body}"
            );
        }
    }

    #[test]
    fn a_field_that_does_not_read_is_named() {
        let wrong = parse_answer(br#"{"choices": [{"message": {"content": 5}}]}"#)
            .expect_err("a number is no content");
        assert!(
            wrong.starts_with("choices[0].message.content: invalid type: integer `5`"),
            "{wrong}"
        );
        let cut = parse_answer(br#"{"choices": [{"mess"#).expect_err("cut short");
        assert!(cut.starts_with("EOF while parsing"), "{cut}");
        assert!(
            parse_answer(br#"{"choices": []} {}"#).is_err(),
            "trailing JSON"
        );
    }

    #[test]
    fn usage_needs_both_counts() {
        let usage = |json: Value| {
            serde_json::from_value::<Usage>(json)
                .expect("usage")
                .counted()
        };
        assert_eq!(
            usage(json!({"prompt_tokens": 2, "completion_tokens": 3, "prompt_tokens_details": {}}))
                .map(|u| u.total_tokens),
            Some(5)
        );
        assert_eq!(usage(json!({"prompt_tokens": 2})), None);
    }
}
