//! Heap accounting: the bytes the server has allocated, for INFO's
//! `used_memory` (Redis counts the same in zmalloc) and, later, maxmemory.
//!
//! [`Counting`] wraps the real allocator (mimalloc, installed in main.rs)
//! and adds every allocation's size to a per-thread counter. A thread owns
//! its counter slot, so the update is a plain load and store on a cache
//! line no other thread writes: no atomic read-modify-write, no cache-line
//! bouncing between workers. Readers sum the slots; a thread may free what
//! another allocated, so single slots go negative, the sum stays right.
//! Threads past the 64th share one overflow slot, updated atomically.
//! Slots are never reused (threads that exit keep their counts).

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering::Relaxed};

const OWNED_SLOTS: usize = 64;

#[repr(align(64))]
struct Slot(AtomicI64);

static SLOTS: [Slot; OWNED_SLOTS + 1] = [const { Slot(AtomicI64::new(0)) }; OWNED_SLOTS + 1];
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);
/// Set by [`mark_installed`] when the binary installs [`Counting`].
static ACTIVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

thread_local! {
    // Const-initialised and without Drop: reading it never allocates and
    // works during thread teardown.
    static MY_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn my_slot() -> usize {
    MY_SLOT
        .try_with(|s| {
            let mut i = s.get();
            if i == usize::MAX {
                i = NEXT_SLOT.fetch_add(1, Relaxed).min(OWNED_SLOTS);
                s.set(i);
            }
            i
        })
        .unwrap_or(OWNED_SLOTS)
}

#[inline]
fn account(delta: i64) {
    let i = my_slot();
    let c = &SLOTS[i].0;
    if i < OWNED_SLOTS {
        // Only this thread writes this slot.
        c.store(c.load(Relaxed) + delta, Relaxed);
    } else {
        c.fetch_add(delta, Relaxed);
    }
}

/// Bytes currently allocated through [`Counting`]; `None` when the binary
/// does not install it (unit tests), so callers can fall back to the RSS.
pub fn allocated_bytes() -> Option<u64> {
    if !ACTIVE.load(Relaxed) {
        return None;
    }
    let sum: i64 = SLOTS.iter().map(|s| s.0.load(Relaxed)).sum();
    Some(sum.max(0) as u64)
}

/// Called by a binary whose `#[global_allocator]` is [`Counting`].
pub fn mark_installed() {
    ACTIVE.store(true, Relaxed);
}

/// A global allocator that counts what `A` hands out.
pub struct Counting<A>(pub A);

// SAFETY: every method forwards to the wrapped allocator with the caller's
// arguments unchanged and returns its result; the accounting only touches
// atomics and a const thread-local, and never allocates.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            account(layout.size() as i64);
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            account(layout.size() as i64);
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { self.0.dealloc(ptr, layout) };
        account(-(layout.size() as i64));
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            account(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

/// Resident set size in bytes, from /proc/self/statm.
pub(crate) fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page.max(4096) as u64
}

/// Heap bytes allocated (the RSS where allocations are not counted);
/// remembers the peak across calls.
pub(crate) fn used_memory() -> (u64, u64) {
    static PEAK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let used = allocated_bytes().unwrap_or_else(rss_bytes);
    let peak = PEAK
        .fetch_max(used, std::sync::atomic::Ordering::Relaxed)
        .max(used);
    (used, peak)
}
