//! A model that fails, or whose answer toolplane will not use (too large, too many tool calls,
//! an error reported in place of the answer or in the middle of it, an answer cut short),
//! fails the model call, and the agent is left as it was.

use crate::common;

use common::agent_fixture;
use common::model_server::{
    Misbehaviour, Mock, REPORTED_ERROR, agent_server, agent_server_with_metrics, asking, config,
    start_mock, turn,
};
use common::*;
use futures_util::StreamExt;
use toolplane::agent::model::{LlmProvider, ModelRequest, StreamEvent};
use toolplane::agent::openai::{MAX_ANSWER_BYTES, OpenAiClient};
use toolplane::agent::runner::MAX_TOOL_CALLS_PER_TURN;
use toolplane::pb;

/// A failing model is UNAVAILABLE (MODEL_UNAVAILABLE) and the agent is left Idle and unchanged;
/// so is a model asking for more tool calls than a turn makes (none of which is made), one
/// answering with an error, and one whose answer is cut short.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_model_leaves_the_agent_as_it_was() {
    let too_many = format!(
        "asked for {} tool calls in one answer; a turn makes at most {MAX_TOOL_CALLS_PER_TURN}",
        MAX_TOOL_CALLS_PER_TURN + 1
    );
    for (misbehaving, said) in [
        (Misbehaviour::Fails, "500"),
        (Misbehaviour::CallsTooManyTools, too_many.as_str()),
        (
            Misbehaviour::ReportsAnError,
            &format!("answered with an error: {REPORTED_ERROR}"),
        ),
        (
            Misbehaviour::EndsEarly,
            "not a chat-completions answer: EOF while parsing",
        ),
    ] {
        let (server, _provider, metrics) = agent_server_with_metrics(Mock {
            misbehaving,
            ..Mock::default()
        })
        .await;
        let mut client = agent_fixture::agents(&server).await;
        agent_fixture::create(&mut client, "down", &[]).await;
        let error = client
            .complete(pb::CompleteRequest {
                meta: meta(0),
                agent_id: "down".into(),
                request: turn(),
            })
            .await
            .expect_err("model down");
        assert_eq!(error.code(), tonic::Code::Unavailable);
        assert_eq!(reason(&error), "MODEL_UNAVAILABLE");
        assert!(error.message().contains(said), "{}", error.message());
        let agent = agent_fixture::get(&mut client, "down").await;
        assert_eq!(agent_fixture::state_of(&agent), pb::AgentState::Idle as i32);
        assert!(
            agent_fixture::messages(&mut client, "down")
                .await
                .is_empty()
        );
        let mut invoker = common::invoke_fixture::invoker(&server).await;
        let made = common::invoke_fixture::records(&mut invoker, "structs_calculate_power").await;
        assert!(made.is_empty(), "no tool was called: {made:?}");
        let failed = "toolplane_agent_model_calls_total{outcome=\"failed\"}";
        let url = format!("http://{metrics}/metrics");
        assert_eq!(scraped(&http_client(), &url, failed).await, 1.0);
        server.stop().await;
    }
}

/// The last event of the model's streamed answer to `request`.
async fn last_streamed(
    client: &OpenAiClient,
    request: ModelRequest,
) -> Result<StreamEvent, toolplane::agent::model::ModelError> {
    let mut events = client.stream(request).await.expect("the stream starts");
    let mut last = None;
    while let Some(event) = events.next().await {
        last = Some(event);
    }
    last.expect("an event")
}

/// A model's answer larger than toolplane reads, as JSON or as an event stream, fails the
/// model call saying so.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_larger_than_toolplane_reads_fails_the_model_call() {
    let base_url = start_mock(Mock {
        misbehaving: Misbehaviour::AnswersTooMuch,
        ..Mock::default()
    })
    .await;
    let client = OpenAiClient::new(config(base_url)).expect("client");
    let request = asking("say a lot");
    let too_large = format!("larger than {} MiB", MAX_ANSWER_BYTES >> 20);
    let refused = client
        .complete(request.clone())
        .await
        .expect_err("too large");
    assert!(refused.message.contains(&too_large), "{}", refused.message);
    let refused = last_streamed(&client, request)
        .await
        .expect_err("too large");
    assert!(refused.message.contains(&too_large), "{}", refused.message);
}

/// A streamed answer toolplane will not use fails the model call, read through the client or
/// through StreamComplete, and the agent keeps none of it: one asking for more tool calls than
/// a turn makes (read no further), one in which the server reports an error after some words
/// (llama.cpp's `error:` line), and one whose stream ends before the answer is finished.
#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_answer_toolplane_will_not_use_fails_the_model_call() {
    let too_many = format!("more than {MAX_TOOL_CALLS_PER_TURN} tool calls in one answer");
    let reported = format!("reported an error mid-answer: {REPORTED_ERROR}");
    for (misbehaving, said) in [
        (Misbehaviour::CallsTooManyTools, too_many.as_str()),
        (Misbehaviour::ReportsAnError, reported.as_str()),
        (
            Misbehaviour::EndsEarly,
            "ended before the answer was finished",
        ),
    ] {
        let mock = Mock {
            misbehaving,
            ..Mock::default()
        };
        let client = OpenAiClient::new(config(start_mock(mock.clone()).await)).expect("client");
        let request = asking("call everything");
        let refused = last_streamed(&client, request).await.expect_err("not used");
        assert!(refused.message.contains(said), "{}", refused.message);

        let (server, _provider) = agent_server(mock).await;
        let mut agents = agent_fixture::agents(&server).await;
        agent_fixture::create(&mut agents, "eager", &[]).await;
        let mut turn_events =
            agent_fixture::stream_turn(&mut agents, "eager", "how much power?").await;
        let failed = loop {
            match turn_events.message().await {
                Ok(Some(_)) => {}
                Ok(None) => panic!("the turn ended without failing"),
                Err(status) => break status,
            }
        };
        assert_eq!(failed.code(), tonic::Code::Unavailable, "{failed:?}");
        assert!(failed.message().contains(said), "{}", failed.message());
        let agent = agent_fixture::get(&mut agents, "eager").await;
        assert_eq!(agent_fixture::state_of(&agent), pb::AgentState::Idle as i32);
        assert!(
            agent_fixture::messages(&mut agents, "eager")
                .await
                .is_empty()
        );
        server.stop().await;
    }
}

/// A model call answered 429 or 5xx is tried again after the wait the server asks for, at
/// most `model_max_retries` (2) times, streamed or not; one refused (400) is not tried again;
/// one that cannot connect is; and a turn whose first model call succeeds at its second
/// attempt completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_model_call_is_tried_again_after_a_rate_limit_or_a_server_error() {
    use axum::http::StatusCode;
    let cases = [
        (StatusCode::TOO_MANY_REQUESTS, 2, None),
        (StatusCode::SERVICE_UNAVAILABLE, 2, None),
        (
            StatusCode::TOO_MANY_REQUESTS,
            3,
            Some("429 Too Many Requests"),
        ),
        (StatusCode::BAD_REQUEST, 1, Some("400 Bad Request")),
    ];
    for (status, times, failure) in cases {
        let mock = Mock {
            misbehaving: Misbehaviour::FailsFirst { status, times },
            ..Mock::default()
        };
        let client = OpenAiClient::new(config(start_mock(mock.clone()).await)).expect("client");
        let outcome = client.complete(asking("power please")).await;
        let requests = mock.bodies.lock().expect("lock").len();
        match failure {
            None => {
                let reply = outcome.expect("answered at the last attempt");
                assert_eq!(
                    (reply.tool_calls.len(), requests),
                    (1, times + 1),
                    "{status}"
                );
            }
            Some(said) if status == StatusCode::BAD_REQUEST => {
                let error = outcome.expect_err("refused");
                assert!(error.message.contains(said), "{}", error.message);
                assert!(!error.message.contains("attempt"), "{}", error.message);
                assert_eq!(
                    (requests, error.attempts),
                    (1, 1),
                    "a refusal is not tried again"
                );
            }
            Some(said) => {
                let error = outcome.expect_err("every attempt failed");
                assert!(error.message.contains(said), "{}", error.message);
                assert!(error.message.contains("at attempt 3"), "{}", error.message);
                assert_eq!(
                    (requests, error.attempts),
                    (3, 3),
                    "the first attempt and two more"
                );
            }
        }
    }

    let mock = Mock {
        misbehaving: Misbehaviour::FailsFirst {
            status: StatusCode::TOO_MANY_REQUESTS,
            times: 2,
        },
        ..Mock::default()
    };
    let client = OpenAiClient::new(config(start_mock(mock.clone()).await)).expect("client");
    let last = last_streamed(&client, asking("power please")).await;
    assert!(matches!(last, Ok(StreamEvent::Done(_))), "{last:?}");
    assert_eq!(mock.bodies.lock().expect("lock").len(), 3);

    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let unreachable = format!("http://{}/v1", closed.local_addr().expect("address"));
    drop(closed);
    let client = OpenAiClient::new(config(unreachable)).expect("client");
    let error = client
        .complete(asking("power please"))
        .await
        .expect_err("nobody listens");
    assert!(
        error.message.contains("cannot reach") && error.message.contains("at attempt 3"),
        "{}",
        error.message
    );
    assert_eq!(error.attempts, 3);

    let (server, _provider, metrics) = agent_server_with_metrics(Mock {
        misbehaving: Misbehaviour::FailsFirst {
            status: StatusCode::SERVICE_UNAVAILABLE,
            times: 1,
        },
        ..Mock::default()
    })
    .await;
    let mut agents = agent_fixture::agents(&server).await;
    agent_fixture::create(&mut agents, "patient", &[]).await;
    let answer = agents
        .complete(pb::CompleteRequest {
            meta: meta(0),
            agent_id: "patient".into(),
            request: turn(),
        })
        .await
        .expect("the turn completes")
        .into_inner();
    assert!(
        answer
            .response
            .expect("a response")
            .message
            .expect("a message")
            .content
            .contains("power_generated"),
        "the model was given the tool's result"
    );
    // Two model calls (Thinking, Reflecting) answered, the first at its second attempt, with
    // the tokens the model server reported (10 + 3, then 20 + 5).
    let http = http_client();
    let url = format!("http://{metrics}/metrics");
    for (sample, expected) in [
        (
            "toolplane_agent_model_calls_total{outcome=\"answered\"}",
            2.0,
        ),
        ("toolplane_agent_model_calls_total{outcome=\"failed\"}", 0.0),
        ("toolplane_agent_model_call_retries_total", 1.0),
        ("toolplane_agent_model_tokens_total{kind=\"prompt\"}", 30.0),
        (
            "toolplane_agent_model_tokens_total{kind=\"completion\"}",
            8.0,
        ),
    ] {
        assert_eq!(scraped(&http, &url, sample).await, expected, "{sample}");
    }
    server.stop().await;
}
