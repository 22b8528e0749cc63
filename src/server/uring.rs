//! `io-uring yes`: each worker thread's io_uring ring, and a plain TCP
//! connection's socket I/O through it ([`UringIo`], the connection loop's
//! `ConnIo`, so `conn.rs` keeps one loop with every feature for both paths).
//!
//! Why: on epoll a request costs a receive, a send and a share of an
//! `epoll_wait`; with the ring a worker's receives and sends of a whole turn
//! cost one `io_uring_enter` (issue 29 item 2, docs/PERFORMANCE.md "Kernel
//! path", DECISIONS 347-348).
//!
//! How: the ring lives inside the worker's tokio runtime. Each connection
//! has one multishot `IORING_OP_RECV` into a provided-buffer ring shared by
//! the worker's connections; a completion's bytes are appended to the
//! connection's receive queue (the buffer goes back at once) and its task is
//! woken. Its replies go out as one `IORING_OP_SEND` of a copy of what is
//! held (at most one in flight; a partial send goes on with the rest). SQEs
//! queued during a turn are submitted together by the runtime's
//! `on_thread_park` hook ([`turn`]), which also reaps; an eventfd the ring
//! signals is registered with tokio, so completions that arrive while the
//! thread sleeps wake the driver task ([`drive`]), which reaps and wakes
//! connections.
//! A connection's Rc'd [`Slot`] stays in the ring's table until the kernel
//! has reported the end of its receive and send, so the send buffer lives
//! as long as the kernel may read it. Set-up: `SINGLE_ISSUER |
//! COOP_TASKRUN`: a completion's task work runs as this thread leaves any
//! syscall (a sleeping thread is woken for it), which posts the CQE and
//! signals the eventfd at once. `DEFER_TASKRUN` was tried first: its
//! eventfd wake-up came ~12 ms late (DECISIONS 347). So the ring may take
//! an idle connection's bytes while a script runs: `serve_while_busy`
//! answers a ring connection from its receive queue ([`Ring::answer_queued`]).
//! TLS and unix sockets, and hand-offs (PSYNC, LATTICE.PEER:
//! [`UringIo`]'s `into_epoll`) use epoll.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::poll_fn;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::task::{Poll, Waker};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use crate::core::sockio::{ConnIo, QueryBuf};

/// Submission queue entries (the completion queue is 4x).
const ENTRIES: u32 = 512;
/// Provided buffers shared by a worker's connections, and their size.
const BUFS: u16 = 256;
const BUF_SIZE: usize = 16 * 1024;
const BGID: u16 = 7;
/// A connection's receive queue past this stops its receive (re-armed once
/// the loop took the bytes): a client that sends without reading meets
/// TCP's back-pressure, as on epoll.
const RX_PAUSE: usize = 256 * 1024;
/// At most this much of the held output goes in one send.
const SEND_MAX: usize = 1 << 20;

const RECV: u64 = 0;
const SEND: u64 = 1;
const CANCEL: u64 = 2;

thread_local! {
    static RING: RefCell<Option<Rc<Ring>>> = const { RefCell::new(None) };
}

/// The ring of this thread, if the worker set one up.
pub(crate) fn current() -> Option<Rc<Ring>> {
    RING.with(|r| r.borrow().clone())
}

/// Sets up this worker thread's ring; the error says why there is none.
pub(crate) fn install() -> io::Result<()> {
    let ring = Rc::new(Ring::new()?);
    RING.with(|r| *r.borrow_mut() = Some(ring.clone()));
    tokio::task::spawn_local(drive(ring));
    Ok(())
}

/// The `on_thread_park` hook: submits what the turn queued, then reaps,
/// and lets the ring signal its eventfd while the thread sleeps.
pub(crate) fn turn() {
    if let Some(r) = current() {
        r.submit_and_reap(false);
        // Every CQE of this ring is posted by this thread (inline, or by
        // task work as it leaves a syscall), so none can land between
        // this reap and the flag: the next ones come after epoll_wait.
        r.ring.borrow_mut().completion().enable_eventfd();
    }
}

/// The `on_thread_unpark` hook: while the thread runs, CQEs are reaped at
/// the next park, so the ring need not signal (a send completing inside
/// the turn's own submit would wake epoll for nothing).
pub(crate) fn awake() {
    if let Some(r) = current() {
        r.ring.borrow_mut().completion().disable_eventfd();
    }
}

/// Reaps completions that arrive while the thread waits in epoll: the
/// ring signals its eventfd when it posts a CQE.
async fn drive(ring: Rc<Ring>) {
    // SAFETY: the eventfd stays open for the thread's life (the ring is in
    // RING, never taken out), longer than this registration.
    let polled = unsafe {
        AsyncFd::register_with_interest(RingFd(ring.evfd), tokio::io::Interest::READABLE)
    };
    let Ok(fd) = polled else {
        crate::log_warning!("io_uring: the ring's eventfd cannot be polled");
        return;
    };
    loop {
        let Ok(mut g) = fd.readable().await else {
            return;
        };
        // The eventfd's count is never read: epoll (edge-triggered under
        // tokio) reports each signal whatever the count, and a read is a
        // syscall per wake-up.
        g.clear_ready();
        // The task work that posted the CQEs ran as epoll_wait returned:
        // they are in the queue, no GETEVENTS needed.
        ring.submit_and_reap(false);
    }
}

struct RingFd(RawFd);

impl AsRawFd for RingFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

#[derive(Clone, Copy, PartialEq)]
enum SendState {
    Idle,
    InFlight,
    /// The kernel's result, not yet applied to the caller's `sent`.
    Done(i32),
}

/// One connection's state shared with the ring.
struct Slot {
    rx: RefCell<Vec<u8>>,
    rx_off: Cell<usize>,
    /// Some(0): end of stream; Some(-errno): error.
    rx_end: Cell<Option<i32>>,
    recv_armed: Cell<bool>,
    /// The receive was stopped at RX_PAUSE: re-armed once the queue is empty.
    paused: Cell<bool>,
    /// A hand-off stopped the receive for good.
    leaving: Cell<bool>,
    reader: Cell<Option<Waker>>,
    /// Owned by the kernel while the send is in flight: not touched then.
    send_buf: RefCell<Vec<u8>>,
    send: Cell<SendState>,
    writer: Cell<Option<Waker>>,
    /// The connection is gone: the slot waits for the kernel's last CQEs.
    closed: Cell<bool>,
    fd: RawFd,
}

impl Slot {
    fn wake_reader(&self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }
    fn wake_writer(&self) {
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }
    fn rx_len(&self) -> usize {
        self.rx.borrow().len() - self.rx_off.get()
    }
    fn idle(&self) -> bool {
        !self.recv_armed.get() && self.send.get() != SendState::InFlight
    }
}

/// The provided-buffer ring: `BUFS` entries of 16 bytes (one page, mapped
/// so it is page-aligned) and the buffers they point to.
struct BufRing {
    entries: *mut types::BufRingEntry,
    map_len: usize,
    mem: Box<[u8]>,
    tail: Cell<u16>,
}

impl BufRing {
    fn new() -> io::Result<BufRing> {
        let map_len = BUFS as usize * std::mem::size_of::<types::BufRingEntry>();
        // SAFETY: an anonymous private mapping with no address hint; the
        // result is checked before use and unmapped in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(BufRing {
            entries: p.cast(),
            map_len,
            mem: vec![0u8; BUFS as usize * BUF_SIZE].into_boxed_slice(),
            tail: Cell::new(0),
        })
    }
    /// Gives buffer `bid` (back) to the kernel.
    fn provide(&self, bid: u16) {
        let t = self.tail.get();
        let idx = (t & (BUFS - 1)) as usize;
        // SAFETY: `entries` maps BUFS entries and idx < BUFS; the kernel
        // reads only entries below the tail published next.
        let e = unsafe { &mut *self.entries.add(idx) };
        // SAFETY: bid < BUFS, so the buffer lies inside `mem`.
        let addr = unsafe { self.mem.as_ptr().add(bid as usize * BUF_SIZE) };
        e.set_addr(addr as u64);
        e.set_len(BUF_SIZE as u32);
        e.set_bid(bid);
        self.tail.set(t.wrapping_add(1));
        // SAFETY: the tail field of the first entry, inside the mapping and
        // 2-aligned; the kernel reads it, so it is stored atomically.
        let tail = unsafe { &*(types::BufRingEntry::tail(self.entries) as *const AtomicU16) };
        tail.store(t.wrapping_add(1), Ordering::Release);
    }
    fn buf(&self, bid: u16, len: usize) -> &[u8] {
        let at = bid as usize * BUF_SIZE;
        &self.mem[at..at + len.min(BUF_SIZE)]
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.entries.cast(), self.map_len) };
    }
}

/// A worker's ring, its buffers and its connections.
pub(crate) struct Ring {
    ring: RefCell<IoUring>,
    bufs: BufRing,
    conns: RefCell<HashMap<u64, Rc<Slot>>>,
    next: Cell<u64>,
    evfd: RawFd,
}

impl Ring {
    fn new() -> io::Result<Ring> {
        let ring = IoUring::builder()
            .setup_cqsize(ENTRIES * 4)
            .setup_single_issuer()
            .setup_coop_taskrun()
            .build(ENTRIES)?;
        let bufs = BufRing::new()?;
        // SAFETY: the entries stay mapped until `bufs` drops, which is after
        // the ring (field order of `Ring`) closes and forgets them.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(bufs.entries as u64, BUFS, BGID, 0)?
        };
        for bid in 0..BUFS {
            bufs.provide(bid);
        }
        // SAFETY: plain eventfd creation; the result is checked.
        let evfd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if evfd < 0 {
            return Err(io::Error::last_os_error());
        }
        ring.submitter().register_eventfd(evfd)?;
        Ok(Ring {
            ring: RefCell::new(ring),
            bufs,
            conns: RefCell::new(HashMap::new()),
            next: Cell::new(1),
            evfd,
        })
    }

    /// Queues `sqe`, submitting first if the queue is full.
    fn push(&self, sqe: squeue::Entry) {
        let mut ring = self.ring.borrow_mut();
        loop {
            // SAFETY: every SQE queued points only at memory its slot keeps
            // alive until the CQE (a send's buffer) or at none.
            if unsafe { ring.submission().push(&sqe) }.is_ok() {
                return;
            }
            let _ = ring.submit();
        }
    }

    fn arm_recv(&self, key: u64, slot: &Slot) {
        let sqe = opcode::RecvMulti::new(types::Fd(slot.fd), BGID)
            .build()
            .user_data(key << 2 | RECV);
        slot.recv_armed.set(true);
        self.push(sqe);
    }

    fn cancel(&self, key: u64, kind: u64) {
        let sqe = opcode::AsyncCancel::new(key << 2 | kind)
            .build()
            .user_data(key << 2 | CANCEL);
        self.push(sqe);
    }

    /// Runs the completions the kernel has for this thread now (a busy
    /// script's hook, between two count-hook calls).
    pub(crate) fn reap_now(&self) {
        self.submit_and_reap(true);
    }

    /// Submits queued SQEs and (`events`, or when submitting) runs the
    /// completions' pending task work (which waits for this thread's next
    /// syscall while it runs in user space), then handles every CQE. A turn
    /// with nothing to submit makes no syscall.
    fn submit_and_reap(&self, events: bool) {
        let mut done: Vec<(u64, i32, u32)> = Vec::new();
        {
            let mut ring = self.ring.borrow_mut();
            let queued = ring.submission().len() as u32;
            if queued > 0 || events {
                // SAFETY: GETEVENTS with no wait and no argument.
                let _ = unsafe {
                    ring.submitter().enter::<libc::sigset_t>(
                        queued, 0, 1, // IORING_ENTER_GETEVENTS
                        None,
                    )
                };
            }
            let cq = ring.completion();
            done.extend(cq.map(|c| (c.user_data(), c.result(), c.flags())));
        }
        for (ud, res, flags) in done {
            self.complete(ud, res, flags);
        }
    }

    fn complete(&self, ud: u64, res: i32, flags: u32) {
        let (key, kind) = (ud >> 2, ud & 3);
        let bid = cqueue::buffer_select(flags);
        let slot = self.conns.borrow().get(&key).cloned();
        let Some(slot) = slot else {
            if let Some(bid) = bid {
                self.bufs.provide(bid);
            }
            return;
        };
        match kind {
            RECV => self.received(key, &slot, res, flags, bid),
            SEND => {
                slot.send.set(SendState::Done(res));
                slot.wake_writer();
            }
            _ => {}
        }
        if slot.closed.get() && slot.idle() {
            self.conns.borrow_mut().remove(&key);
        }
    }

    /// Re-arms a receive stopped at RX_PAUSE once its queue was taken.
    fn resume_if_drained(&self, key: u64, s: &Slot) {
        let stopped = s.closed.get() || s.leaving.get() || s.rx_end.get().is_some();
        if s.rx_len() == 0 && s.paused.get() && !s.recv_armed.get() && !stopped {
            s.paused.set(false);
            self.arm_recv(key, s);
        }
    }

    /// `serve_while_busy` for this ring's connection on `fd` (false if it
    /// is not one): the ring takes a socket's bytes as they arrive, so the
    /// commands a busy script keeps waiting are in the connection's receive
    /// queue, not in the socket. Hands the
    /// queue to `answer`, and drops the bytes it says it used.
    /// (Call [`Ring::reap_now`] first: the kernel's completions land there.)
    pub(crate) fn answer_queued(&self, fd: RawFd, answer: impl FnOnce(&[u8]) -> usize) -> bool {
        let found = self.conns.borrow().iter().find_map(|(&key, s)| {
            (s.fd == fd && !s.closed.get() && !s.leaving.get()).then(|| (key, s.clone()))
        });
        let Some((key, slot)) = found else {
            return false;
        };
        let from = slot.rx_off.get();
        let used = answer(&slot.rx.borrow()[from..]);
        slot.rx_off.set(from + used);
        self.resume_if_drained(key, &slot);
        true
    }

    fn received(&self, key: u64, slot: &Slot, res: i32, flags: u32, bid: Option<u16>) {
        if let Some(bid) = bid {
            if res > 0 && !slot.closed.get() {
                slot.rx
                    .borrow_mut()
                    .extend_from_slice(self.bufs.buf(bid, res as usize));
            }
            self.bufs.provide(bid);
        }
        let more = cqueue::more(flags);
        if !more {
            slot.recv_armed.set(false);
        }
        match res {
            0 => slot.rx_end.set(Some(0)),
            r if r == -libc::ECANCELED => {}
            r if r == -libc::ENOBUFS => {}
            r if r < 0 => slot.rx_end.set(Some(r)),
            _ => {
                if more && slot.rx_len() >= RX_PAUSE && !slot.paused.get() {
                    slot.paused.set(true);
                    self.cancel(key, RECV);
                }
            }
        }
        let stopped = slot.closed.get() || slot.leaving.get() || slot.rx_end.get().is_some();
        // A paused receive whose queue was taken meanwhile goes on now
        // (otherwise the loop's next take re-arms it).
        if !more && !stopped && (!slot.paused.get() || slot.rx_len() == 0) {
            slot.paused.set(false);
            self.arm_recv(key, slot);
        }
        slot.wake_reader();
    }
}

/// A plain TCP connection's I/O through its worker's ring.
pub(crate) struct UringIo {
    ring: Rc<Ring>,
    key: u64,
    slot: Rc<Slot>,
    stream: Option<std::net::TcpStream>,
}

impl UringIo {
    pub(crate) fn new(ring: Rc<Ring>, stream: std::net::TcpStream) -> UringIo {
        let key = ring.next.get();
        ring.next.set(key + 1);
        let slot = Rc::new(Slot {
            rx: RefCell::new(Vec::new()),
            rx_off: Cell::new(0),
            rx_end: Cell::new(None),
            recv_armed: Cell::new(false),
            paused: Cell::new(false),
            leaving: Cell::new(false),
            reader: Cell::new(None),
            send_buf: RefCell::new(Vec::new()),
            send: Cell::new(SendState::Idle),
            writer: Cell::new(None),
            closed: Cell::new(false),
            fd: stream.as_raw_fd(),
        });
        ring.conns.borrow_mut().insert(key, slot.clone());
        ring.arm_recv(key, &slot);
        UringIo {
            ring,
            key,
            slot,
            stream: Some(stream),
        }
    }

    /// Moves received bytes into `qb`; re-arms a paused receive once drained.
    fn take_rx(&self, qb: &mut QueryBuf) -> usize {
        let s = &self.slot;
        let mut rx = s.rx.borrow_mut();
        let from = s.rx_off.get();
        let spare = qb.spare();
        let n = spare.len().min(rx.len() - from);
        spare[..n].copy_from_slice(&rx[from..from + n]);
        qb.end += n;
        if from + n == rx.len() {
            rx.clear();
            s.rx_off.set(0);
            if rx.capacity() > RX_PAUSE * 2 {
                *rx = Vec::new();
            }
        } else {
            s.rx_off.set(from + n);
        }
        drop(rx);
        self.ring.resume_if_drained(self.key, s);
        n
    }

    /// Applies a finished send to `sent`; an error ends the connection.
    fn settle(&self, sent: &mut usize) -> io::Result<()> {
        if let SendState::Done(res) = self.slot.send.get() {
            self.slot.send.set(SendState::Idle);
            if res < 0 {
                return Err(io::Error::from_raw_os_error(-res));
            }
            if res == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            *sent += res as usize;
        }
        Ok(())
    }

    fn start_send(&self, bytes: &[u8]) {
        let s = &self.slot;
        let n = bytes.len().min(SEND_MAX);
        let (ptr, len) = {
            let mut b = s.send_buf.borrow_mut();
            b.clear();
            b.extend_from_slice(&bytes[..n]);
            (b.as_ptr(), b.len() as u32)
        };
        let sqe = opcode::Send::new(types::Fd(s.fd), ptr, len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(self.key << 2 | SEND);
        s.send.set(SendState::InFlight);
        self.ring.push(sqe);
    }

    /// Waits until no send is in flight.
    async fn send_settled(&self) {
        poll_fn(|cx| {
            if self.slot.send.get() == SendState::InFlight {
                self.slot.writer.set(Some(cx.waker().clone()));
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await
    }
}

impl ConnIo for UringIo {
    type Stream = std::net::TcpStream;

    fn raw_fd(&self) -> RawFd {
        self.slot.fd
    }

    fn buffered(&self) -> bool {
        self.slot.rx_len() > 0
    }

    async fn read_some(&self, qb: &mut QueryBuf) -> io::Result<usize> {
        poll_fn(|cx| {
            if self.slot.rx_len() > 0 {
                return Poll::Ready(Ok(self.take_rx(qb)));
            }
            match self.slot.rx_end.get() {
                Some(0) => Poll::Ready(Ok(0)),
                Some(e) => Poll::Ready(Err(io::Error::from_raw_os_error(-e))),
                None => {
                    self.slot.reader.set(Some(cx.waker().clone()));
                    Poll::Pending
                }
            }
        })
        .await
    }

    fn write_held(&self, buf: &[u8], sent: &mut usize) -> io::Result<()> {
        self.settle(sent)?;
        if self.slot.send.get() == SendState::Idle && *sent < buf.len() {
            self.start_send(&buf[*sent..]);
        }
        Ok(())
    }

    async fn write_more(&self, buf: &[u8], sent: &mut usize) -> io::Result<()> {
        self.send_settled().await;
        self.write_held(buf, sent)
    }

    fn write_now(&self, buf: &[u8]) -> bool {
        if self.slot.send.get() != SendState::Idle {
            return false;
        }
        let Some(s) = self.stream.as_ref() else {
            return false;
        };
        crate::core::sockio::write_now_std(s, buf)
    }

    async fn write_all(&self, buf: &[u8], kill: &Notify) -> io::Result<()> {
        let mut done = 0;
        loop {
            tokio::select! {
                _ = self.send_settled() => {}
                _ = kill.notified() => return Err(io::ErrorKind::ConnectionAborted.into()),
            }
            self.settle(&mut done)?;
            if done >= buf.len() {
                return Ok(());
            }
            self.start_send(&buf[done..]);
        }
    }

    async fn into_epoll(mut self, qb: &mut QueryBuf) -> io::Result<AsyncFd<std::net::TcpStream>> {
        self.send_settled().await;
        let mut unused = 0;
        self.settle(&mut unused)?;
        self.slot.leaving.set(true);
        if self.slot.recv_armed.get() {
            self.ring.cancel(self.key, RECV);
        }
        poll_fn(|cx| {
            if self.slot.recv_armed.get() {
                self.slot.reader.set(Some(cx.waker().clone()));
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await;
        while self.slot.rx_len() > 0 {
            self.take_rx(qb);
        }
        let stream = self.stream.take().ok_or(io::ErrorKind::NotConnected)?;
        // SAFETY: `stream` is owned and moved into the AsyncFd, which closes
        // it; nothing else uses the fd (the ring let go of it above).
        unsafe { AsyncFd::register(stream) }.map_err(|e| e.into_parts().1)
    }
}

impl Drop for UringIo {
    fn drop(&mut self) {
        let s = &self.slot;
        s.closed.set(true);
        if s.recv_armed.get() {
            self.ring.cancel(self.key, RECV);
        }
        if s.send.get() == SendState::InFlight {
            self.ring.cancel(self.key, SEND);
        }
        if s.idle() {
            self.ring.conns.borrow_mut().remove(&self.key);
        }
        // The socket closes with `stream` (for the kernel, once the
        // cancelled operations let go of it).
    }
}
