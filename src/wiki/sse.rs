//! Event streams through proxies: a quiet stream gets a comment line every so often, so neither a reverse
//! proxy's read timeout nor a browser closes a run that is still computing. Comments (`: …`) are ignored by
//! every event-stream reader; they go out only between whole events, never inside one.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Response, header};

/// The comment a quiet stream sends.
const HEARTBEAT: &[u8] = b": heartbeat\n\n";

/// Whether `response` is an event stream.
pub(crate) fn is_event_stream(response: &Response<Body>) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

/// `response` with a heartbeat comment sent whenever its body has been quiet for `every`.
pub(crate) fn with_heartbeat(response: Response<Body>, every: Duration) -> Response<Body> {
    let (parts, body) = response.into_parts();
    let stream = Heartbeat {
        inner: body.into_data_stream(),
        every,
        timer: Box::pin(tokio::time::sleep(every)),
    };
    Response::from_parts(parts, Body::from_stream(stream))
}

/// The body's frames, with a heartbeat between two of them when none came for `every`. The body's frames are
/// whole events (the run routes write one event per frame), so a heartbeat never splits one.
struct Heartbeat {
    inner: axum::body::BodyDataStream,
    every: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl futures_core::Stream for Heartbeat {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = Pin::new(&mut self.inner).poll_next(cx);
        match next {
            Poll::Ready(item) => {
                let at = tokio::time::Instant::now() + self.every;
                self.timer.as_mut().reset(at);
                Poll::Ready(item)
            }
            Poll::Pending => match self.timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    let at = tokio::time::Instant::now() + self.every;
                    self.timer.as_mut().reset(at);
                    Poll::Ready(Some(Ok(Bytes::from_static(HEARTBEAT))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_quiet_stream_gets_heartbeats_between_events() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::convert::Infallible>>(4);
        let events = futures_core_stream(rx);
        let mut response = Response::new(Body::from_stream(events));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("text/event-stream"),
        );
        assert!(is_event_stream(&response));
        let body = with_heartbeat(response, Duration::from_millis(100)).into_body();
        let mut stream = body.into_data_stream();
        tx.send(Ok(Bytes::from_static(b"event: queued\ndata: {}\n\n")))
            .await
            .unwrap();
        let first = next(&mut stream).await;
        assert_eq!(first, "event: queued\ndata: {}\n\n");
        // Quiet for 250 ms: two heartbeats, then the next event.
        let producer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            tx.send(Ok(Bytes::from_static(b"event: result\ndata: 1\n\n")))
                .await
                .unwrap();
        });
        assert_eq!(next(&mut stream).await, ": heartbeat\n\n");
        assert_eq!(next(&mut stream).await, ": heartbeat\n\n");
        assert_eq!(next(&mut stream).await, "event: result\ndata: 1\n\n");
        producer.await.unwrap();
        use futures_core::Stream;
        assert!(
            std::future::poll_fn(|cx| Pin::new(&mut stream).poll_next(cx))
                .await
                .is_none()
        );
    }

    async fn next(stream: &mut axum::body::BodyDataStream) -> String {
        use futures_core::Stream;
        let item = std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await;
        String::from_utf8(item.unwrap().unwrap().to_vec()).unwrap()
    }

    /// A receiver as a stream of body frames.
    fn futures_core_stream<T>(
        rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures_core::Stream<Item = T> {
        struct S<T>(tokio::sync::mpsc::Receiver<T>);
        impl<T> futures_core::Stream for S<T> {
            type Item = T;
            fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
                self.0.poll_recv(cx)
            }
        }
        S(rx)
    }
}
