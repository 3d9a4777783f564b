//! A StreamComplete caller that stops reading neither holds its agent nor makes the server
//! hold an event per word: the turn goes on without it, and the words waiting for it are
//! joined, so they take about the memory of their text. It reads them all when it reads again.

use crate::common;

use std::time::Duration;

use common::agent_fixture::{agents, complete_request, create, messages, user};
use common::*;
use toolplane::pb;
use toolplane::pb::agent_service_client::AgentServiceClient;
use toolplane::pb::stream_complete_response::Event;

#[tokio::test(flavor = "multi_thread")]
async fn words_waiting_for_a_caller_that_stopped_reading_are_joined() {
    let server = TestServer::start().await;
    let mut client = agents(&server).await;
    create(&mut client, "reader", &[]).await;

    // A connection with small flow-control windows: unread, it takes about 64 KB of the
    // turn's events, and the built-in model echoes 40,000 words, one event each (over 2 MB).
    let slow = server.slow_channel().await;
    let words = "word ".repeat(40_000);
    let mut stalled = AgentServiceClient::new(slow)
        .stream_complete(pb::StreamCompleteRequest {
            meta: meta(0),
            agent_id: "reader".into(),
            request: Some(pb::ChatCompletionRequest {
                messages: vec![user(&words)],
                ..Default::default()
            }),
        })
        .await
        .expect("the turn starts")
        .into_inner();
    // The turn has begun once its first event comes (the answer's headers come before it).
    let first = stalled.message().await.expect("healthy").expect("an event");
    assert!(
        matches!(first.event, Some(Event::Transition(_))),
        "{first:?}"
    );

    // The turn ends without the caller reading, and the agent takes another turn.
    let answered = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match client
                .complete(complete_request("reader", "hello", "next"))
                .await
            {
                Ok(answer) => break answer.into_inner(),
                Err(error) => {
                    assert_eq!(reason(&error), "AGENT_BUSY", "{error:?}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
    .await
    .expect("the agent is free");
    let answer = answered
        .response
        .expect("response")
        .message
        .expect("message");
    assert_eq!(answer.content, "hello");
    assert_eq!(
        messages(&mut client, "reader").await.len(),
        4,
        "both turns kept"
    );

    // The caller reads every word, most of them joined, then the answer.
    let (mut said, mut deltas) = (String::new(), 0);
    let completion = loop {
        let message = stalled
            .message()
            .await
            .expect("healthy")
            .expect("not ended yet");
        match message.event.expect("event") {
            Event::ContentDelta(piece) => {
                said.push_str(&piece);
                deltas += 1;
            }
            Event::Completion(done) => break done,
            Event::Transition(_) | Event::ToolCall(_) => {}
        }
    };
    let content = completion.message.expect("message").content;
    assert_eq!(said, content, "the deltas add up to the answer");
    assert_eq!(content.split_whitespace().count(), 40_000);
    assert!(
        deltas < 10_000,
        "{deltas} deltas: the waiting words were joined"
    );
    assert!(stalled.message().await.expect("healthy").is_none());
    server.stop().await;
}
