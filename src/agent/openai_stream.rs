//! A streamed chat-completions answer: its server-sent events are read, bounded, into content
//! deltas, tool calls gathered by index, and a final reply. An answer is used only once it is
//! finished (a chunk with a `finish_reason`, or `data: [DONE]`); one whose stream ends before
//! that, or in which the server reports an error, fails the model call rather than passing a
//! cut-short answer on as the model's.

use std::collections::{BTreeMap, VecDeque};

use serde_json::Value;
use tokio::sync::mpsc::Sender;

use super::model::{ModelError, ModelReply, StreamEvent, ToolCallRequest};
use super::openai::{MAX_ANSWER_BYTES, too_large};
use super::openai_answer::{Answer, arguments_value, error_text, parse_answer, reported_error};
use super::runner::{MAX_TOOL_CALLS_PER_TURN, too_many_tool_calls};
use super::types::TokenUsage;

/// What an event stream brings toolplane.
#[derive(Debug, PartialEq)]
enum Item {
    /// An event's data (its `data:` lines joined).
    Data(String),
    /// An `error:` line, as llama.cpp's server ends a stream that failed.
    Error(String),
}

/// The event-stream format of the HTML standard ("interpreting an event stream"), read line by
/// line as bytes arrive. Written here because the crates for it do not serve: sse-stream
/// refuses a line of a field it does not know (llama.cpp's `error:`) as an invalid stream and
/// drops the line, losing the server's error; eventsource-stream parses its whole buffer again
/// for every chunk (minutes for one event of a few MiB). Each byte is looked at once.
#[derive(Debug, Default)]
struct EventLines {
    /// The start of a line whose end has not come yet.
    unfinished: Vec<u8>,
    /// The last chunk ended in CR: an LF starting the next one ends no further line.
    after_cr: bool,
    /// A line has been read (the byte order mark is stripped from the first only).
    started: bool,
    /// The data of the event being read, when it has any.
    data: Option<String>,
    /// What is read and not yet taken.
    ready: VecDeque<Item>,
}

impl EventLines {
    /// Reads `bytes`, the next part of the stream.
    fn feed(&mut self, mut bytes: &[u8]) {
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            if self.unfinished.is_empty() {
                self.line(&bytes[..end]);
            } else {
                let mut line = std::mem::take(&mut self.unfinished);
                line.extend_from_slice(&bytes[..end]);
                self.line(&line);
            }
            let mut next = end + 1;
            if bytes[end] == b'\r' {
                match bytes.get(next) {
                    Some(b'\n') => next += 1,
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            bytes = &bytes[next..];
        }
        self.unfinished.extend_from_slice(bytes);
    }

    /// The next item read, if any.
    fn next_item(&mut self) -> Option<Item> {
        self.ready.pop_front()
    }

    fn line(&mut self, mut line: &[u8]) {
        if !std::mem::replace(&mut self.started, true) {
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                self.ready.push_back(Item::Data(data));
            }
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => return, // a comment
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(&value);
                }
                None => self.data = Some(value.into_owned()),
            },
            b"error" => self.ready.push_back(Item::Error(value.into_owned())),
            _ => {} // event, id, retry and unknown fields say nothing toolplane uses
        }
    }
}

/// A tool call's pieces, gathered by index.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// What has come of a streamed answer so far.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    model: Option<String>,
    content: String,
    calls: BTreeMap<u64, PartialCall>,
    usage: Option<TokenUsage>,
    /// A chunk said why the model stopped.
    finished: bool,
}

impl Gathered {
    /// Takes one chunk; returns its words (empty when it has none).
    fn take(&mut self, chunk: Answer) -> Result<String, ModelError> {
        if let Some(error) = reported_error(&chunk) {
            return Err(reported_mid_answer(&error));
        }
        if chunk.model.is_some() {
            self.model = chunk.model;
        }
        if let Some(usage) = chunk.usage.as_ref().and_then(|u| u.counted()) {
            self.usage = Some(usage);
        }
        let Some(choice) = chunk.choices.and_then(|c| c.into_iter().next()) else {
            return Ok(String::new());
        };
        self.finished |= choice.finish_reason.is_some_and(|r| !r.is_empty());
        let Some(delta) = choice.delta else {
            return Ok(String::new());
        };
        self.content.push_str(&delta.content);
        for piece in delta.tool_calls.into_iter().flatten() {
            let partial = self.calls.entry(piece.index.unwrap_or(0)).or_default();
            partial.id.push_str(piece.id.as_deref().unwrap_or_default());
            if let Some(function) = piece.function {
                partial
                    .name
                    .push_str(function.name.as_deref().unwrap_or_default());
                partial.arguments.push_str(&function.arguments);
            }
        }
        if self.calls.len() > MAX_TOOL_CALLS_PER_TURN {
            // The turn refuses such an answer: its reading stops here rather than gathering
            // every call first.
            let asked = format!("more than {MAX_TOOL_CALLS_PER_TURN}");
            return Err(ModelError::new(too_many_tool_calls(&asked)));
        }
        Ok(delta.content)
    }

    /// The answer, named `model` unless a chunk named its own, which came at attempt
    /// `attempts`.
    pub(crate) fn reply(self, model: String, attempts: u32) -> ModelReply {
        let tool_calls = self
            .calls
            .into_values()
            .map(|p| ToolCallRequest {
                id: p.id,
                name: p.name,
                arguments: arguments_value(&p.arguments),
            })
            .collect();
        ModelReply {
            content: self.content,
            tool_calls,
            model: super::openai_answer::answering_model(self.model, &model),
            usage: self.usage,
            attempts,
        }
    }
}

fn reported_mid_answer(error: &str) -> ModelError {
    ModelError::new(format!(
        "the model server reported an error mid-answer: {error}"
    ))
}

/// Reads the event stream of `response` (which came at attempt `attempts`): forwards content
/// deltas and ends with the whole answer (named `model` unless a chunk names its own), or with
/// why it cannot be used. Stops early when the receiver goes away.
pub(super) async fn read_events(
    mut response: reqwest::Response,
    model: String,
    attempts: u32,
    sender: Sender<Result<StreamEvent, ModelError>>,
) {
    let last = match gather(&mut response, &sender).await {
        Ok(Some(gathered)) => Ok(StreamEvent::Done(gathered.reply(model, attempts))),
        Ok(None) => return,
        Err(error) => Err(error.after(attempts)),
    };
    let _ = sender.send(last).await;
}

/// The finished answer; `None` when the receiver went away.
async fn gather(
    response: &mut reqwest::Response,
    sender: &Sender<Result<StreamEvent, ModelError>>,
) -> Result<Option<Gathered>, ModelError> {
    let mut reading = AnswerStream::default();
    loop {
        let bytes = response
            .chunk()
            .await
            .map_err(|e| ModelError::new(format!("the answer could not be read: {e}")))?;
        let Some(bytes) = bytes else { break };
        reading.feed(&bytes)?;
        while let Some(step) = reading.next_step()? {
            match step {
                Step::Words(words) => {
                    if sender.send(Ok(StreamEvent::Delta(words))).await.is_err() {
                        return Ok(None);
                    }
                }
                Step::Finished(gathered) => return Ok(Some(gathered)),
            }
        }
    }
    reading.ended().map(Some)
}

/// What reading a streamed answer comes to next.
#[derive(Debug)]
pub(crate) enum Step {
    /// More of the assistant's words.
    Words(String),
    /// The answer is finished (`data: [DONE]`); whatever follows is not read.
    Finished(Gathered),
}

/// A streamed answer read as its bytes arrive, however they are cut: [`feed`](Self::feed) the
/// next bytes, take what they bring with [`next_step`](Self::next_step) until it has nothing
/// more, and when the stream ends, take the answer from [`ended`](Self::ended).
#[derive(Debug, Default)]
pub(crate) struct AnswerStream {
    lines: EventLines,
    gathered: Gathered,
    /// Bytes read.
    read: usize,
    /// Events with data read.
    events: usize,
}

impl AnswerStream {
    /// Reads `bytes`, the next part of the stream; refuses an answer grown past
    /// [`MAX_ANSWER_BYTES`].
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        self.read += bytes.len();
        if self.read > MAX_ANSWER_BYTES {
            return Err(too_large());
        }
        self.lines.feed(bytes);
        Ok(())
    }

    /// The next step the bytes fed so far bring, if any; an error when the answer cannot be
    /// used (after which nothing more is to be read).
    pub(crate) fn next_step(&mut self) -> Result<Option<Step>, ModelError> {
        while let Some(item) = self.lines.next_item() {
            let data = match item {
                Item::Data(data) => data,
                Item::Error(error) => {
                    let error = serde_json::from_str(&error).unwrap_or(Value::String(error));
                    return Err(reported_mid_answer(&error_text(&error)));
                }
            };
            match data.trim() {
                "[DONE]" => return Ok(Some(Step::Finished(std::mem::take(&mut self.gathered)))),
                // An event with empty data, as some proxies send to keep a stream open.
                "" => continue,
                _ => {}
            }
            self.events += 1;
            let chunk = parse_answer(data.as_bytes()).map_err(|e| {
                ModelError::new(format!(
                    "event {} of the answer is not a chat-completions chunk: {e}",
                    self.events
                ))
            })?;
            let words = self.gathered.take(chunk)?;
            if !words.is_empty() {
                return Ok(Some(Step::Words(words)));
            }
        }
        Ok(None)
    }

    /// The answer, once the stream has ended (every step taken): a finished one, or why it
    /// cannot be used.
    pub(crate) fn ended(self) -> Result<Gathered, ModelError> {
        if self.gathered.finished {
            Ok(self.gathered)
        } else {
            Err(ModelError::new(
                "the answer's event stream ended before the answer was finished (no chunk had a \
                 finish_reason and no [DONE] came)",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The items of `stream` read in chunks of `size` bytes.
    fn items(stream: &[u8], size: usize) -> Vec<Item> {
        let mut lines = EventLines::default();
        let mut items = Vec::new();
        for chunk in stream.chunks(size) {
            lines.feed(chunk);
            items.extend(std::iter::from_fn(|| lines.next_item()));
        }
        items
    }

    #[test]
    fn events_are_read_alike_however_the_bytes_are_cut() {
        let stream = "\u{feff}: a comment\r\nevent: chunk\rid: 7\r\ndata: {\"a\":\r\ndata:1}\n\n\
                      retry: 10\nunknown: field\ndata\n\ndata:  two spaces\r\r\
                      error: {\"message\": \"out of context\"}\n\n\
                      data: [DONE]\n\ndata: not dispatched"
            .as_bytes();
        let expected = vec![
            Item::Data("{\"a\":\n1}".into()),
            Item::Data(String::new()),
            Item::Data(" two spaces".into()),
            Item::Error("{\"message\": \"out of context\"}".into()),
            Item::Data("[DONE]".into()),
        ];
        for size in 1..=stream.len() {
            assert_eq!(items(stream, size), expected, "chunks of {size} bytes");
        }
    }

    #[test]
    fn a_long_event_is_read_in_linear_time() {
        // 8 MiB in 16-byte chunks: quadratic reading would take hours.
        let mut stream = b"data: ".to_vec();
        stream.resize(8 << 20, b'x');
        stream.extend_from_slice(b"\n\n");
        let items = items(&stream, 16);
        assert!(matches!(&items[..], [Item::Data(data)] if data.len() == (8 << 20) - 6));
    }

    fn chunk(json: serde_json::Value) -> Answer {
        serde_json::from_value(json).expect("a chunk")
    }

    #[test]
    fn chunks_gather_into_a_reply() {
        let mut gathered = Gathered::default();
        let chunks = [
            serde_json::json!({"model": "m", "choices": [{"delta": {"role": "assistant", "content": "to "}}]}),
            serde_json::json!({"choices": [{"delta": {"content": null, "tool_calls": [{"index": 1, "id": "c1", "function": {"name": "f", "arguments": "{\"a\""}}]}}]}),
            serde_json::json!({"choices": [{"delta": {"tool_calls": [{"index": 1, "function": {"arguments": ": 1}"}}]}, "finish_reason": "tool_calls"}]}),
            serde_json::json!({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}),
        ];
        let words: Vec<String> = chunks
            .into_iter()
            .map(|c| gathered.take(chunk(c)).expect("taken"))
            .collect();
        assert_eq!(words, ["to ", "", "", ""]);
        assert!(gathered.finished);
        let reply = gathered.reply("asked".into(), 1);
        assert_eq!((reply.model.as_str(), reply.content.as_str()), ("m", "to "));
        assert_eq!(reply.usage.map(|u| u.total_tokens), Some(3));
        assert_eq!(
            reply.tool_calls,
            [ToolCallRequest {
                id: "c1".into(),
                name: "f".into(),
                arguments: serde_json::json!({"a": 1})
            }]
        );
    }

    #[test]
    fn an_error_chunk_fails_the_answer() {
        let mut gathered = Gathered::default();
        let error = gathered
            .take(chunk(
                serde_json::json!({"error": {"message": "overloaded", "type": "server_error"}}),
            ))
            .expect_err("an error");
        assert!(
            error.message.ends_with("mid-answer: overloaded"),
            "{}",
            error.message
        );
    }
}
