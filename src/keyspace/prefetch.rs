//! Prefetching a key's place in its shard before the command that needs it
//! runs, so the dependent cache misses of a lookup (the index's control
//! group, its `u32` slot, the slab entry) overlap with other work instead
//! of stalling one after the other.
//!
//! A connection that read a pipelined batch names the batch's keys ahead of
//! running them (`server/lookahead.rs`); the keyspace turns each into
//! prefetches in two steps ([`super::Db::prefetch`],
//! [`super::Db::prefetch_entry`]):
//!
//! 1. **The index group and its slots, without the lock.** hashbrown's
//!    `HashTable` does not say where its control bytes are, so the index
//!    allocates through [`IndexAlloc`], which records the address of the
//!    table's block; with the block's size (`allocation_size`) that gives
//!    the control bytes and the bucket count ([`index_hint`], hashbrown
//!    0.15's layout for `u32` buckets). The shard's lock holder publishes
//!    the pair in an atomic of the database's hint array when it unlocks (`held.rs`), so
//!    a prefetch reads one atomic and never takes the lock. A hint gone
//!    stale (the table grew since, or EXEC changed it under held locks)
//!    names freed or unrelated memory: harmless for a prefetch, which never
//!    faults and changes nothing but the cache, and the next unlock fixes it.
//! 2. **The slab entry, under an uncontended try-lock**: the entry's
//!    position is in the slot, which only the lock holder may read; the
//!    group is cached by then (step 1 ran a command earlier), so finding
//!    the slot costs little, and the entry's miss is left to overlap with
//!    the command before.
//!
//! Nothing here changes what a command sees: a prefetch only moves lines
//! into the cache. On targets other than x86_64 it does nothing.

use std::alloc::Layout;
use std::cell::Cell;
use std::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator, Global};

/// The allocator of a shard's index: the global one, remembering the
/// address of the block it handed out last (hashbrown allocates a table's
/// buckets and control bytes as one block; growing allocates the new one,
/// then frees the old). 0 when none is live.
#[derive(Default)]
pub(crate) struct IndexAlloc(Cell<usize>);

impl IndexAlloc {
    /// The live block's address, 0 when none.
    #[inline]
    pub(crate) fn block(&self) -> usize {
        self.0.get()
    }
}

// SAFETY: every call goes to `Global` unchanged (same layouts, same
// pointers), so the blocks are what `Global` promises; the `Cell` only
// remembers an address and is never dereferenced.
unsafe impl Allocator for IndexAlloc {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let block = Global.allocate(layout)?;
        self.0.set(block.as_ptr().cast::<u8>() as usize);
        Ok(block)
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if ptr.as_ptr() as usize == self.0.get() {
            self.0.set(0);
        }
        // SAFETY: the caller's contract (a block this allocator gave, with
        // its layout) is `Global`'s, which allocated it.
        unsafe { Global.deallocate(ptr, layout) }
    }
}

/// Bits of a hint that hold the control bytes' address; the bits above
/// hold log2 of the bucket count.
const ADDR_BITS: u32 = 56;

/// Where a `HashTable<u32>`'s control bytes are and how many buckets it
/// has, packed for [`group_addrs`]: 0 for a table without a block. `block`
/// is its allocator's record, `size` its `allocation_size()`. hashbrown
/// 0.15 lays out `buckets` u32 slots (16-byte aligned, so `4 * buckets`
/// bytes from 4 buckets up), then `buckets + 16` control bytes (SSE2
/// groups), with slot `i` just below the control bytes at `ctrl - 4 (i+1)`.
#[inline]
pub(crate) fn index_hint(block: usize, size: usize) -> u64 {
    if block == 0 || size < 16 + 5 * 4 || !cfg!(target_arch = "x86_64") {
        return 0;
    }
    let buckets = (size - 16) / 5;
    if !buckets.is_power_of_two() {
        return 0;
    }
    let ctrl = (block + 4 * buckets) as u64;
    ctrl | u64::from(buckets.trailing_zeros()) << ADDR_BITS
}

/// The addresses a lookup of `hash` reads first in the table `hint`
/// describes: its probe group's control bytes and the first and last slot
/// of that group. None for an empty hint.
#[inline]
pub(crate) fn group_addrs(hint: u64, hash: u64) -> Option<[usize; 3]> {
    if hint == 0 {
        return None;
    }
    let ctrl = (hint & ((1 << ADDR_BITS) - 1)) as usize;
    let mask = (1usize << (hint >> ADDR_BITS)) - 1;
    let pos = hash as usize & mask;
    let slot = |i: usize| ctrl.wrapping_sub(4 * (i + 1));
    Some([ctrl + pos, slot(pos), slot(pos + 15)])
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_names_the_control_bytes_and_the_bucket_count() {
        assert_eq!(index_hint(0, 1000), 0);
        // 64 buckets: 256 bytes of slots, then 64 + 16 control bytes.
        let h = index_hint(0x1000, 5 * 64 + 16);
        let [group, first, last] = group_addrs(h, 0xffff_0003).unwrap();
        assert_eq!(group, 0x1000 + 256 + 3);
        assert_eq!(first, 0x1000 + 256 - 4 * 4);
        assert_eq!(last, 0x1000 + 256 - 4 * 19);
    }
}
