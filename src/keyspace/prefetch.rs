//! Prefetching a key's place in its shard before the command that needs it
//! runs, so the dependent cache misses of a lookup (the index's group, then
//! the slab entry) overlap with other work instead of stalling one after
//! the other.
//!
//! A connection that read a pipelined batch names the batch's keys ahead of
//! running them (`server/lookahead.rs`); the keyspace turns each into
//! prefetches in two steps ([`super::Db::prefetch`],
//! [`super::Db::prefetch_entry`]):
//!
//! 1. **The index group, without the lock.** A group of the shard's index
//!    (`index.rs`) is one cache line holding tags and positions, at an
//!    address the group count and the hash give. The shard's lock holder
//!    publishes the table's address and group count ([`super::index::Index::hint`])
//!    in an atomic beside the shard when it unlocks (`held.rs`), so a
//!    prefetch reads one atomic and never takes the lock. A hint gone stale
//!    (the table grew since, or EXEC changed it under held locks) names
//!    freed or unrelated memory: harmless for a prefetch, which never
//!    faults and changes nothing but the cache, and the next unlock fixes it.
//! 2. **The slab entry, under an uncontended try-lock**: the entry's
//!    position is in the slot, which only the lock holder may read; the
//!    group is cached by then (step 1 ran a command earlier), so finding
//!    the slot costs little, and the entry's miss is left to overlap with
//!    the command before.
//!
//! Nothing here changes what a command sees: a prefetch only moves lines
//! into the cache. On targets other than x86_64 it does nothing.

/// Asks the CPU to bring the cache line of `addr` in for reading. A hint:
/// any address will do, freed or unmapped ones included.
#[inline(always)]
pub(crate) fn prefetch_line(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHh never faults and has no architectural effect (Intel
    // SDM, "PREFETCHh"; AMD APM likewise): it reads nothing the program
    // sees, whatever the address, so no memory-safety condition applies.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}
