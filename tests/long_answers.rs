//! A model's long answer stays readable: a streamed answer is read only as far as the turn
//! has room, an answer no answer could carry undoes its turn, a conversation is paged within
//! what a client reads, and a long model name is cut.

use crate::common;

use common::agent_fixture::{self, complete_request, stream_turn};
use common::model_server::{LONG_MODEL_NAME_BYTES, Misbehaviour, Mock, config, start_mock};
use common::*;
use toolplane::grpc::ServerOptions;
use toolplane::pb;
use toolplane::pb::stream_complete_response::Event;

/// A server whose agents' model answers as long as asked, keeping conversations of
/// `max_conversation_bytes` (0: no bound).
async fn server_of_long_answers(max_conversation_bytes: usize) -> TestServer {
    let base_url = start_mock(Mock {
        misbehaving: Misbehaviour::AnswersAsLongAsAsked,
        ..Mock::default()
    })
    .await;
    TestServer::start_with(ServerOptions {
        model: Some(config(base_url)),
        max_conversation_bytes,
        ..test_options()
    })
    .await
}

/// The bytes of the model's words a streamed turn sent before its refusal, and the refusal.
async fn words_until_refused(
    events: &mut tonic::Streaming<pb::StreamCompleteResponse>,
) -> (usize, tonic::Status) {
    let mut words = 0;
    loop {
        match events.message().await {
            Ok(Some(event)) => {
                if let Some(Event::ContentDelta(piece)) = event.event {
                    words += piece.len();
                }
            }
            Ok(None) => panic!("the turn ended without its refusal"),
            Err(status) => return (words, status),
        }
    }
}

/// A model streaming a 5 MB answer in one chunk: the turn's refusal (the answer is larger
/// than a conversation keeps) reaches the caller, and no word too large for its client.
#[tokio::test(flavor = "multi_thread")]
async fn words_streamed_in_one_large_chunk_are_refused_not_sent() {
    let server =
        server_of_long_answers(toolplane::agent::store::DEFAULT_MAX_CONVERSATION_BYTES).await;
    let mut client = agent_fixture::agents(&server).await;
    agent_fixture::create(&mut client, "talker", &[]).await;
    let mut events = stream_turn(&mut client, "talker", "5000000").await;
    let (words, ended) = words_until_refused(&mut events).await;
    assert_eq!(ended.code(), tonic::Code::ResourceExhausted, "{ended:?}");
    assert_eq!(reason(&ended), "AGENT_TURN_TOO_LARGE");
    assert_eq!(words, 0, "the chunk past the turn's room is not sent");
    assert!(
        agent_fixture::messages(&mut client, "talker")
            .await
            .is_empty()
    );
    server.stop().await;
}

/// With no bound on conversations, an answer larger than one answer may carry undoes its
/// turn; answers that fit are kept, named by a cut model name, and the conversation is read
/// back in pages a client can read.
#[tokio::test(flavor = "multi_thread")]
async fn with_no_bound_on_conversations_every_message_stays_readable() {
    let server = server_of_long_answers(0).await;
    let mut client = agent_fixture::agents(&server).await;
    agent_fixture::create(&mut client, "talker", &[]).await;
    let error = client
        .complete(complete_request("talker", "5000000", "too long"))
        .await
        .expect_err("an answer no answer could carry");
    assert_eq!(error.code(), tonic::Code::ResourceExhausted, "{error:?}");
    assert_eq!(reason(&error), "AGENT_TURN_TOO_LARGE");
    assert!(error.message().contains("the model's answer"), "{error:?}");
    assert!(
        agent_fixture::messages(&mut client, "talker")
            .await
            .is_empty()
    );

    for turn in ["first", "second"] {
        let answer = client
            .complete(complete_request("talker", "3000000", turn))
            .await
            .expect("an answer that fits")
            .into_inner()
            .response
            .expect("response");
        let message = answer.message.expect("message");
        assert_eq!(message.content.len(), 3_000_000);
        assert!(answer.model.len() < 300, "cut: {}", answer.model.len());
        assert!(
            answer
                .model
                .contains(&format!("({LONG_MODEL_NAME_BYTES} bytes in all)"))
        );
    }
    // Two answers of 3 MB do not fit in one page: each page is read, and all of them.
    let (mut pages, mut lengths, mut token) = (0, Vec::new(), String::new());
    loop {
        let page = client
            .list_messages(pb::ListMessagesRequest {
                meta: meta(0),
                agent_id: "talker".into(),
                page_token: token,
                ..Default::default()
            })
            .await
            .expect("a page a client reads")
            .into_inner();
        pages += 1;
        lengths.extend(page.messages.iter().map(|m| m.content.len()));
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(lengths, [7, 3_000_000, 7, 3_000_000]);
    assert_eq!(pages, 2);
    server.stop().await;
}

/// A tool the agent may not use, asked for by a long name: the turn's summary and the result
/// given to the model name it cut, not whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_name_of_a_tool_not_offered_is_cut() {
    let name: &'static str = "x".repeat(200_000).leak();
    let (server, _provider) = common::model_server::agent_server(Mock {
        asks_for: Some((name, 1)),
        ..Mock::default()
    })
    .await;
    let mut client = agent_fixture::agents(&server).await;
    agent_fixture::create(&mut client, "asker", &[]).await;
    let answer = client
        .complete(complete_request("asker", "use it", "long name"))
        .await
        .expect("a turn")
        .into_inner();
    let [called] = answer.tool_calls.as_slice() else {
        panic!("one call: {:?}", answer.tool_calls.len());
    };
    assert_eq!(called.error_reason, "TOOL_NOT_ALLOWED");
    assert!(called.tool_name.len() < 300, "{}", called.tool_name.len());
    assert!(called.tool_name.ends_with("(200000 bytes in all)"));
    let result = agent_fixture::messages(&mut client, "asker").await;
    let result = result
        .iter()
        .find(|m| {
            m.metadata
                .contains_key(toolplane::agent::model::TOOL_CALL_ID_KEY)
        })
        .expect("the tool's result");
    assert!(result.content.len() < 1000, "{}", result.content.len());
    server.stop().await;
}

/// A model streaming words for ever is read only until its answer passes what the turn may
/// add: the turn is refused as too large, not after 32 MiB or at the model's time limit.
#[tokio::test(flavor = "multi_thread")]
async fn a_model_streaming_for_ever_is_read_only_as_far_as_the_turn_has_room() {
    let base_url = start_mock(Mock {
        misbehaving: Misbehaviour::StreamsForever,
        ..Mock::default()
    })
    .await;
    let server = TestServer::start_with(ServerOptions {
        model: Some(config(base_url)),
        ..test_options()
    })
    .await;
    let mut client = agent_fixture::agents(&server).await;
    agent_fixture::create(&mut client, "looping", &[]).await;
    let mut events = stream_turn(&mut client, "looping", "say it again").await;
    let (words, ended) = words_until_refused(&mut events).await;
    assert_eq!(ended.code(), tonic::Code::ResourceExhausted, "{ended:?}");
    assert_eq!(reason(&ended), "AGENT_TURN_TOO_LARGE");
    assert!(ended.message().contains("the model's answer"), "{ended:?}");
    let room = toolplane::agent::store::DEFAULT_MAX_CONVERSATION_BYTES;
    assert!(words <= room, "{words} bytes streamed");
    assert!(
        agent_fixture::messages(&mut client, "looping")
            .await
            .is_empty()
    );
    server.stop().await;
}
