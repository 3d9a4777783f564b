//! The readers of what a chat-completions server (the model an agent turn calls) answers: a
//! whole answer, and a streamed one, whose server-sent events toolplane reads with a reader of
//! its own ([`AnswerStream`]) as the bytes arrive.

use crate::agent::model::{ModelError, ModelReply};
use crate::agent::openai_answer::reply_of;
use crate::agent::openai_stream::{AnswerStream, Step};

/// The model asked for, which an answer naming no model is taken to be from.
const ASKED: &str = "asked";

/// A model server's answer: the bytes are `N CUTS ANSWER`, where the low four bits of the
/// first byte, `N`, count the cuts that follow (two bytes each, big-endian offsets into the
/// answer, taken modulo its length plus one), and the rest is the answer. Read whole, it gives
/// a reply or says why it cannot be used, without panicking. Read as an event stream, it comes
/// to the same words told along the way and the same reply or error in one piece as when cut
/// at the cuts into pieces that arrive one by one (empty ones too); the words told are the
/// reply's content.
pub fn model_answers(data: &[u8]) {
    let Some((cuts, answer)) = cuts_and_answer(data) else {
        return;
    };
    let _ = reply_of(answer, ASKED, 1);

    let mut cuts: Vec<usize> = cuts
        .chunks(2)
        .map(|pair| usize::from(u16::from_be_bytes([pair[0], pair[1]])) % (answer.len() + 1))
        .collect();
    cuts.sort_unstable();
    let mut pieces = Vec::with_capacity(cuts.len() + 1);
    let mut from = 0;
    for &cut in &cuts {
        pieces.push(&answer[from..cut]);
        from = cut;
    }
    pieces.push(&answer[from..]);

    let whole = streamed(&[answer]);
    assert_eq!(streamed(&pieces), whole, "{answer:?} cut at {cuts:?}");
    if let (words, Ok(reply)) = &whole {
        assert_eq!(words.concat(), reply.content, "{answer:?}");
    }
}

/// The cuts' bytes and the answer of an input (see [`model_answers`]); `None` when it is too
/// short for the cuts its first byte counts.
fn cuts_and_answer(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&count, rest) = data.split_first()?;
    rest.split_at_checked(2 * usize::from(count & 0x0f))
}

/// The words told, and what the answer came to, when the event stream arrives as `pieces`.
fn streamed(pieces: &[&[u8]]) -> (Vec<String>, Result<ModelReply, ModelError>) {
    let mut reading = AnswerStream::default();
    let mut words = Vec::new();
    for piece in pieces {
        if let Err(error) = reading.feed(piece) {
            return (words, Err(error));
        }
        loop {
            match reading.next_step() {
                Ok(Some(Step::Words(told))) => words.push(told),
                Ok(Some(Step::Finished(gathered))) => {
                    return (words, Ok(gathered.reply(ASKED.into(), 1)));
                }
                Ok(None) => break,
                Err(error) => return (words, Err(error)),
            }
        }
    }
    let answer = reading
        .ended()
        .map(|gathered| gathered.reply(ASKED.into(), 1));
    (words, answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer of the kept input `name`, without its cuts.
    fn seed(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/fuzz/seeds/model_answers/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let data = std::fs::read(path).expect("a kept input");
        let (_, answer) = cuts_and_answer(&data).expect("the cuts it counts");
        answer.to_vec()
    }

    /// The kept inputs are the answers their names say, so the fuzzer starts from answers
    /// that read (and from ones that fail as model servers fail).
    #[test]
    fn the_kept_answers_read_as_their_names_say() {
        let (words, reply) = streamed(&[&seed("openai_tool_call_stream")]);
        let reply = reply.expect("a finished answer");
        assert_eq!((words.len(), reply.content.as_str()), (2, "Looking up été"));
        assert_eq!(
            reply.tool_calls[0].arguments,
            serde_json::json!({"city": "Oslo"})
        );
        assert_eq!(reply.usage.map(|usage| usage.total_tokens), Some(15));

        let (words, reply) = streamed(&[&seed("bom_crlf_and_comments")]);
        assert_eq!(
            (words.concat(), reply.map(|r| r.content)),
            ("ab".into(), Ok("ab".into()))
        );

        for (name, error) in [
            ("llama_cpp_error_line", "mid-answer: context size exceeded"),
            ("cut_short_stream", "ended before the answer was finished"),
        ] {
            let (_, reply) = streamed(&[&seed(name)]);
            let message = reply.expect_err(name).message;
            assert!(message.contains(error), "{name}: {message}");
        }

        let whole = reply_of(&seed("whole_answer"), ASKED, 1).expect("an answer");
        assert_eq!(
            (whole.content.as_str(), whole.model.as_str()),
            ("parts", "m-2")
        );
        let refused = reply_of(&seed("vllm_error_object"), ASKED, 1).expect_err("an error");
        assert!(
            refused.message.ends_with("does not exist."),
            "{}",
            refused.message
        );
    }
}
