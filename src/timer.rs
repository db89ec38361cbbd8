//! A connection's timers, kept from request to request rather than made anew for each.
//!
//! A tokio `Sleep` that is polled before it fires is put in the runtime's timer wheel and taken
//! out again when it is dropped: two operations on the wheel, under its lock, for every timer
//! a request waits on. Two timers did that for every webhook delivery: hyper's header-read timer
//! (`server.header_read_timeout`, which hyper starts each time it waits for a request head, an
//! idle keep-alive connection's next head too) and the deadline of the forwarder's call.
//!
//! Each connection now keeps one `Sleep` for each: [`HeadTimer`], the `Timer` hyper is given,
//! and [`RequestTimer`], which reaches the handler as a request extension (webhooks: the
//! forward's deadline; a proxy: the upstream exchange's). A dropped timer goes
//! back to its connection's slot, and the next request's deadline, always later on one HTTP/1
//! connection, only moves its expiry forward, which tokio does with one atomic update and no
//! wheel operation: the wheel sees the entry again only when its old expiry comes round. Every
//! deadline behaves as before: it fires at the time it names.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A connection's one tokio timer of a kind, while nothing waits on it.
#[derive(Clone, Default)]
struct Slot(Arc<Mutex<Option<Pin<Box<tokio::time::Sleep>>>>>);

impl Slot {
    /// The slot's timer set to `deadline` (a new one when the slot is empty: the connection's
    /// first, or another is held).
    fn until(&self, deadline: Instant) -> Kept {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        let sleep = match kept {
            Some(mut sleep) => {
                sleep.as_mut().reset(deadline.into());
                sleep
            }
            None => Box::pin(tokio::time::sleep_until(deadline.into())),
        };
        Kept {
            sleep: Some(sleep),
            slot: self.clone(),
        }
    }
}

/// A slot's timer while it is waited on; dropped, it goes back to the slot.
struct Kept {
    /// `Some` until dropped.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    slot: Slot,
}

impl Kept {
    fn reset(&mut self, deadline: Instant) {
        if let Some(sleep) = &mut self.sleep {
            sleep.as_mut().reset(deadline.into());
        }
    }
}

impl Future for Kept {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.get_mut().sleep {
            Some(sleep) => sleep.as_mut().poll(cx),
            None => Poll::Ready(()),
        }
    }
}

impl hyper::rt::Sleep for Kept {}

impl Drop for Kept {
    fn drop(&mut self) {
        if let Some(sleep) = self.sleep.take() {
            *self.slot.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(sleep);
        }
    }
}

/// The `hyper::rt::Timer` of one connection; give every connection its own.
#[derive(Default)]
pub struct HeadTimer {
    slot: Slot,
}

impl hyper::rt::Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(self.now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(self.slot.until(deadline))
    }

    fn now(&self) -> Instant {
        tokio::time::Instant::now().into()
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<Kept>() {
            Some(kept) => kept.get_mut().reset(new_deadline),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }
}

/// The deadline timer of one connection's requests, one request at a time; cloned into each
/// request's extensions. A request without one (not served by a connection of its own) can
/// use a new one: it works the same, only without reuse.
#[derive(Clone, Default)]
pub struct RequestTimer {
    slot: Slot,
}

impl RequestTimer {
    /// The connection's timer, taken out of a request's `extensions` (it is nobody else's to
    /// see, an upstream's least of all); a new one for a request that came without it.
    pub fn take(extensions: &mut http::Extensions) -> Self {
        extensions.remove::<Self>().unwrap_or_default()
    }

    /// `future`, answered `None` if `deadline` comes first. The future is polled first, so one
    /// that is ready at once is never timed out.
    pub fn within<F: Future + Unpin>(&self, deadline: Instant, future: F) -> Within<F> {
        Within {
            future,
            timer: self.slot.until(deadline),
        }
    }

    /// The connection's timer set to `deadline`, for several steps in turn (see
    /// [`Deadline::race`]).
    pub fn until(&self, deadline: Instant) -> Deadline {
        Deadline(self.slot.until(deadline))
    }
}

/// One deadline for several steps, each raced against it in turn.
pub struct Deadline(Kept);

impl Deadline {
    /// `future`, answered `None` if the deadline comes first (polled first, as in
    /// [`RequestTimer::within`]).
    pub fn race<F: Future + Unpin>(&mut self, future: F) -> Race<'_, F> {
        Race {
            future,
            timer: &mut self.0,
        }
    }
}

/// See [`Deadline::race`].
pub struct Race<'a, F> {
    future: F,
    timer: &'a mut Kept,
}

impl<F: Future + Unpin> Future for Race<'_, F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Poll::Ready(output) = Pin::new(&mut this.future).poll(cx) {
            return Poll::Ready(Some(output));
        }
        Pin::new(&mut *this.timer).poll(cx).map(|()| None)
    }
}

/// See [`RequestTimer::within`].
pub struct Within<F> {
    future: F,
    timer: Kept,
}

impl<F: Future + Unpin> Future for Within<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut race = Race {
            future: &mut this.future,
            timer: &mut this.timer,
        };
        Pin::new(&mut race).poll(cx)
    }
}

/// `future`, answered `None` if it is not done within `timeout` of its first wait. The timer is
/// made only then: a future that is ready when first polled (a body that came whole with its
/// headers) takes no clock reading and no timer at all.
pub fn within_once_waiting<F: Future>(timeout: Duration, future: F) -> OnceWaiting<F> {
    OnceWaiting {
        future,
        deadline: None,
        timeout,
    }
}

pin_project_lite::pin_project! {
    /// See [`within_once_waiting`]. A future of its own rather than an `async fn`, which would
    /// keep `future` twice (as its argument and pinned inside): `future` is here once, beside
    /// its timer.
    pub struct OnceWaiting<F> {
        #[pin]
        future: F,
        #[pin]
        deadline: Option<tokio::time::Sleep>,
        timeout: Duration,
    }
}

impl<F: Future> Future for OnceWaiting<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Some(output));
        }
        if this.deadline.is_none() {
            this.deadline.set(Some(tokio::time::sleep(*this.timeout)));
        }
        match this.deadline.as_pin_mut().map(|deadline| deadline.poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(None),
            _ => Poll::Pending,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use hyper::rt::{Sleep, Timer};

    use super::*;

    /// One tokio timer serves every head of a connection, and each head's deadline is its own.
    #[tokio::test(start_paused = true)]
    async fn one_timer_serves_every_head_with_its_own_deadline() {
        let timer = HeadTimer::default();
        let start = timer.now();
        let mut first = timer.sleep_until(start + Duration::from_millis(100));
        let first_address = timer_address(&mut first);
        // Polled while the head is awaited: the timer is in the runtime's wheel.
        let polled = tokio::time::timeout(Duration::ZERO, &mut first).await;
        assert!(polled.is_err(), "not due yet");
        drop(first);
        // The next head's deadline is later: the kept timer moves to it and keeps its place.
        tokio::time::advance(Duration::from_millis(80)).await;
        let mut second = timer.sleep_until(timer.now() + Duration::from_millis(100));
        assert_eq!(timer_address(&mut second), first_address);
        tokio::time::advance(Duration::from_millis(80)).await;
        // Not at the first deadline (100 ms from the start), at the second (180 ms).
        assert_eq!(took(second).await, Duration::from_millis(20));
        // The timer went back to the slot when `second` was dropped, and still fires.
        let third = timer.sleep(Duration::from_millis(50));
        assert_eq!(took(third).await, Duration::from_millis(50));
    }

    /// hyper's `reset` moves the timer it holds.
    #[tokio::test(start_paused = true)]
    async fn reset_moves_the_held_timer() {
        let timer = HeadTimer::default();
        let mut sleep = timer.sleep(Duration::from_millis(100));
        timer.reset(&mut sleep, timer.now() + Duration::from_millis(300));
        assert_eq!(took(sleep).await, Duration::from_millis(300));
    }

    /// How long `future` took on tokio's (paused) clock.
    async fn took(future: impl Future) -> Duration {
        let started = tokio::time::Instant::now();
        future.await;
        started.elapsed()
    }

    /// A request's deadline cuts what is not ready by then, answers what is, and the next
    /// request's later deadline is its own although the timer is the same.
    #[tokio::test(start_paused = true)]
    async fn each_request_keeps_its_own_deadline() {
        let timer = RequestTimer::default();
        let clock = tokio::time::Instant::now();
        let start = Instant::from(clock);
        let never = std::future::pending::<()>();
        let cut = timer
            .within(start + Duration::from_millis(100), never)
            .await;
        assert_eq!(cut, None);
        assert_eq!(clock.elapsed(), Duration::from_millis(100));

        let ready = timer.within(start, std::future::ready(7)).await;
        assert_eq!(
            ready,
            Some(7),
            "a ready future is answered even past its deadline"
        );

        let later = Box::pin(tokio::time::sleep(Duration::from_millis(150)));
        let answered = timer
            .within(start + Duration::from_millis(300), later)
            .await;
        assert_eq!(answered, Some(()));
        assert_eq!(clock.elapsed(), Duration::from_millis(250));

        let never = std::future::pending::<()>();
        let cut = timer
            .within(start + Duration::from_millis(400), never)
            .await;
        assert_eq!(cut, None);
        assert_eq!(clock.elapsed(), Duration::from_millis(400));
    }

    /// One deadline over several steps: each step is raced against the same expiry, so the
    /// second of two 60 ms steps is cut at 100 ms.
    #[tokio::test(start_paused = true)]
    async fn one_deadline_bounds_several_steps() {
        let timer = RequestTimer::default();
        let clock = tokio::time::Instant::now();
        let mut steps = timer.until(Instant::from(clock) + Duration::from_millis(100));
        let first = Box::pin(tokio::time::sleep(Duration::from_millis(60)));
        assert_eq!(steps.race(first).await, Some(()));
        let second = Box::pin(tokio::time::sleep(Duration::from_millis(60)));
        assert_eq!(steps.race(second).await, None);
        assert_eq!(clock.elapsed(), Duration::from_millis(100));
    }

    /// The lazy timeout answers a ready future at once and cuts a waiting one `timeout` after
    /// its first wait.
    #[tokio::test(start_paused = true)]
    async fn a_lazy_timeout_starts_at_the_first_wait() {
        assert_eq!(
            within_once_waiting(Duration::ZERO, std::future::ready(3)).await,
            Some(3)
        );
        let clock = tokio::time::Instant::now();
        let slow = tokio::time::sleep(Duration::from_millis(200));
        assert_eq!(
            within_once_waiting(Duration::from_millis(100), slow).await,
            None
        );
        assert_eq!(clock.elapsed(), Duration::from_millis(100));
        let quick = tokio::time::sleep(Duration::from_millis(50));
        let answered = within_once_waiting(Duration::from_millis(100), quick).await;
        assert_eq!(answered, Some(()));
        assert_eq!(clock.elapsed(), Duration::from_millis(150));
    }

    /// A future of 4 KB that waits once, as a request's inner futures do.
    pub(crate) async fn large_future() -> u8 {
        let held = [7u8; 4096];
        tokio::task::yield_now().await;
        held[4095]
    }

    /// The lazy timeout holds its future once, beside its timer: as an `async fn` it kept it
    /// twice, and every request's future grew by the size of its body's read.
    #[test]
    fn a_lazy_timeout_holds_its_future_once() {
        let future = large_future();
        let alone = std::mem::size_of_val(&future);
        let wrapped = within_once_waiting(Duration::from_secs(1), future);
        let size = std::mem::size_of_val(&wrapped);
        assert!(
            size < alone + 512,
            "{size} bytes around a future of {alone}"
        );
    }

    /// Where the tokio timer that `sleep` holds lives.
    fn timer_address(sleep: &mut Pin<Box<dyn Sleep>>) -> usize {
        let kept = sleep
            .as_mut()
            .downcast_mut_pin::<Kept>()
            .expect("a kept timer");
        let inner: &tokio::time::Sleep = kept.get_mut().sleep.as_ref().expect("held");
        std::ptr::from_ref(inner) as usize
    }
}
