//! JS callbacks fed from the engine: output chunks (`onStdout`/`onStderr`) and rich results
//! (`onResult`), each delivered in order by one task that waits for the callback.

use super::result::{native_bundle, NativeBundle};
use crate::engine::addon::launch::{ChunkSender, Stream};
use napi::bindgen_prelude::Buffer;
use napi::threadsafe_function::ThreadsafeFunction;

/// A chunk callback: `(chunk: Buffer) => void | Promise<void>`, errors handled by the JS
/// wrapper, which hands back the promise of an async callback so it can be waited for.
pub(super) type ChunkFn = ThreadsafeFunction<
    Buffer,
    Option<napi::bindgen_prelude::Promise<()>>,
    Buffer,
    napi::Status,
    false,
>;
/// How long the chunk forwarder waits for an async callback's promise; one that has not
/// settled by then is not waited for again in this call (the box waits for the callback, not
/// for ever).
const PROMISE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// `onResult`: each rich result of a python cell, as it is kept.
pub(super) type ResultFn = ThreadsafeFunction<NativeBundle, (), NativeBundle, napi::Status, false>;

/// One task delivers every chunk in arrival order and waits for each callback (and the promise
/// of an async one, up to `PROMISE_WAIT`), so all of them have run before the call's promise
/// resolves. The channel is bounded (`ChunkSender`): while a callback is slow, the box's
/// writes wait for it rather than this process buffering what it wrote.
pub(super) fn forwarder(
    on_stdout: Option<ChunkFn>,
    on_stderr: Option<ChunkFn>,
) -> (Option<ChunkSender>, Option<tokio::task::JoinHandle<()>>) {
    if on_stdout.is_none() && on_stderr.is_none() {
        return (None, None);
    }
    let (tx, mut rx) = crate::engine::addon::launch::chunk_channel();
    let task = tokio::spawn(async move {
        let mut await_promises = true;
        while let Some(chunk) = rx.recv().await {
            let f = match chunk.stream {
                Stream::Stdout => on_stdout.as_ref(),
                Stream::Stderr => on_stderr.as_ref(),
            };
            let Some(f) = f else { continue };
            if let Ok(Some(promise)) = f.call_async(Buffer::from(chunk.data)).await {
                if await_promises {
                    // A rejection is the JS wrapper's to report; it resolves its own promise.
                    await_promises = tokio::time::timeout(PROMISE_WAIT, promise).await.is_ok();
                }
            }
        }
    });
    (Some(tx), Some(task))
}

/// Hands each result to `onResult` as the cell keeps it, in order, from one task that waits for
/// each callback.
pub(super) struct LiveResults(
    Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    )>,
);

impl LiveResults {
    pub(super) fn new(
        on_result: Option<ResultFn>,
    ) -> (Option<crate::lang::driver::ResultSink>, LiveResults) {
        let Some(f) = on_result else {
            return (None, LiveResults(None));
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<crate::lang::driver::Item>();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    item = rx.recv() => match item {
                        Some(item) => {
                            let _ = f.call_async(native_bundle(item)).await;
                        }
                        None => return,
                    },
                    _ = &mut stopped => break,
                }
            }
            // The call is over: what was kept is delivered, and a sender that outlived the
            // call (a reader still draining a dead box's socket) adds nothing more.
            rx.close();
            while let Some(item) = rx.recv().await {
                let _ = f.call_async(native_bundle(item)).await;
            }
        });
        (Some(tx), LiveResults(Some((stop, task))))
    }

    /// Once the call is over: waits until every result kept has been handed over.
    pub(super) async fn done(self) {
        if let Some((stop, task)) = self.0 {
            let _ = stop.send(());
            let _ = task.await;
        }
    }
}
