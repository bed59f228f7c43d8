//! The process's allocator: mimalloc, called the way its fast paths expect.
//!
//! The `mimalloc` crate sends every Rust allocation through `mi_malloc_aligned`, alignment and
//! all. In mimalloc 3, that call takes its fast path only for blocks of at most 1 KiB, or when
//! the block size is a power of two. Anything else goes to the generic aligned path. That path
//! over-allocates by `align - 1` bytes, so the block lands one size class up, and it is slower.
//! Such layouts sit under every request: the `HeaderMap` of a response, hyper's header-read
//! timer, the boxed work of a miss.
//!
//! A Rust type's size is a multiple of its alignment. For such a layout with an alignment of at
//! most 16, plain `mi_malloc` already returns a well-aligned block (see [`natural`]), so those
//! layouts take it. Every other layout keeps the aligned calls.

use libmimalloc_sys::{
    mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc,
    mi_zalloc_aligned,
};
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// mimalloc as the global allocator (`#[global_allocator]` in `main.rs`; the unit tests below
/// call it directly, layout by layout).
#[derive(Clone, Copy, Debug, Default)]
pub struct MiMalloc;

/// The largest alignment plain `mi_malloc` gives a block whose size is a multiple of it
/// (mimalloc's `MI_MAX_ALIGN_SIZE`). An 8-byte block is only 8-aligned.
const PLAIN_ALIGN: usize = 16;

/// Whether plain `mi_malloc(size)` returns a block aligned to `align`.
///
/// Why that holds, from mimalloc 3's layout (`src/page-queue.c` `mi_bin`, the class table in
/// `src/init.c`, `mi_page_block_start` in `src/arena.c`):
/// - A page's first block starts 16-aligned or better (`MI_PAGE_MIN_START_BLOCK_ALIGN`).
/// - A page holds blocks of one size class. On 64-bit, the classes are 8, 16, 32, 48 and 64
///   bytes, then multiples of 16.
/// - A block larger than the largest class gets a page of its own and starts at that page's
///   start.
///
/// So an 8-byte block is 8-aligned and every other block is 16-aligned. A size rounds up to its
/// class, so a size that is a multiple of `align` (at most 16) gets a block aligned to `align`.
/// Size 0 would get an 8-byte block, but `GlobalAlloc` is never asked for size 0.
/// `every_natural_layout_is_aligned` checks this on the linked mimalloc, class by class, and
/// the version is pinned in `Cargo.toml`.
#[inline]
fn natural(size: usize, align: usize) -> bool {
    align <= PLAIN_ALIGN && size % align == 0
}

/// `plain()` when [`natural`] holds for `size` and `align`, else `aligned()`: one place for the
/// choice all three allocating calls make.
#[inline(always)]
fn choose(
    size: usize,
    align: usize,
    plain: impl FnOnce() -> *mut c_void,
    aligned: impl FnOnce() -> *mut c_void,
) -> *mut u8 {
    if natural(size, align) {
        let p = plain() as *mut u8;
        debug_assert_eq!(p as usize % align, 0, "mi_malloc({size}) for align {align}");
        p
    } else {
        aligned() as *mut u8
    }
}

// SAFETY: each method hands the request to mimalloc's own entry point for it. Those keep
// GlobalAlloc's contract for any layout when given the alignment. The unaligned ones are used
// only when `natural` holds, and then the block mimalloc returns has the layout's alignment
// (see `natural`). `dealloc` gets only pointers that this allocator returned, and `mi_free`
// takes a block from any of mimalloc's allocation calls. Null is returned on failure, as
// GlobalAlloc requires.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let (size, align) = (layout.size(), layout.align());
        // SAFETY: see the impl.
        unsafe {
            choose(
                size,
                align,
                || mi_malloc(size),
                || mi_malloc_aligned(size, align),
            )
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let (size, align) = (layout.size(), layout.align());
        // SAFETY: see the impl.
        unsafe {
            choose(
                size,
                align,
                || mi_zalloc(size),
                || mi_zalloc_aligned(size, align),
            )
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: see the impl.
        unsafe { mi_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (p, align) = (ptr as *mut c_void, layout.align());
        // SAFETY: see the impl; the block keeps the layout's alignment at its new size.
        unsafe {
            choose(
                new_size,
                align,
                || mi_realloc(p, new_size),
                || mi_realloc_aligned(p, new_size, align),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills `len` bytes at `p` with a pattern of `seed`.
    ///
    /// # Safety
    /// `p` must be valid for `len` bytes of writes.
    unsafe fn fill(p: *mut u8, len: usize, seed: u8) {
        for i in 0..len {
            // SAFETY: i < len, and the caller vouches for len bytes.
            unsafe { *p.add(i) = seed.wrapping_add(i as u8) };
        }
    }

    /// Whether the `len` bytes at `p` are those `fill` wrote.
    ///
    /// # Safety
    /// `p` must be valid for `len` bytes of reads.
    unsafe fn filled(p: *const u8, len: usize, seed: u8) -> bool {
        // SAFETY: i < len, and the caller vouches for len bytes.
        (0..len).all(|i| unsafe { *p.add(i) } == seed.wrapping_add(i as u8))
    }

    /// Every size up to 1 KiB, and sizes of every residue mod 16 on up to 64 KiB (so each size
    /// class is met at 8 mod 16 and at 0 mod 16), and past the largest class, at every
    /// alignment up to 16: the block comes back aligned when plain `mi_malloc` served it. Many
    /// blocks of each, so that every place in a page is seen, not only the first.
    #[test]
    fn every_natural_layout_is_aligned() {
        let mut sizes: Vec<usize> = (1..=1024).collect();
        for start in [1025, 1032, 1040] {
            sizes.extend((start..=65_536).step_by(24));
        }
        sizes.extend([100_000, 600_000, 4 << 20, (32 << 20) + 16]);
        let mut checked = [0usize; 5];
        for &size in &sizes {
            for align in [1, 2, 4, 8, 16] {
                if !natural(size, align) {
                    continue;
                }
                let layout = Layout::from_size_align(size, align).unwrap();
                let count = if size <= 4096 { 64 } else { 4 };
                let mut blocks = Vec::with_capacity(count);
                for n in 0..count {
                    // SAFETY: non-zero size; freed below with the same layout.
                    let p = unsafe { MiMalloc.alloc(layout) };
                    assert!(!p.is_null(), "{size} bytes, align {align}: null");
                    assert_eq!(p as usize % align, 0, "{size} bytes, align {align}: {p:p}");
                    // SAFETY: p holds `size` bytes. (The first 512 only: what is checked here
                    // is where blocks start, and a full fill of every size takes seconds.)
                    unsafe { fill(p, size.min(512), n as u8) };
                    blocks.push(p);
                }
                for (n, p) in blocks.into_iter().enumerate() {
                    // SAFETY: p was filled above with `size` bytes and is freed once.
                    unsafe {
                        assert!(
                            filled(p, size.min(512), n as u8),
                            "{size} bytes, align {align}"
                        );
                        MiMalloc.dealloc(p, layout);
                    }
                }
                checked[align.trailing_zeros() as usize] += 1;
            }
        }
        // Layouts checked at alignments 1, 2, 4, 8 and 16: over 1 KiB, 8 and 16 come from the
        // 1032 and 1040 runs (multiples of 8, and of 16 every other step).
        assert!(checked[3] > 2_500 && checked[4] > 1_300, "{checked:?}");
    }

    /// Why `natural` asks for a size that is a multiple of the alignment, and proof that the
    /// check above can fail: plain `mi_malloc(8)` blocks are 8 bytes apart, so some are not
    /// 16-aligned.
    #[test]
    fn plain_blocks_of_8_bytes_are_not_all_16_aligned() {
        assert!(!natural(8, 16));
        // SAFETY: non-zero size; each block is freed once below.
        let blocks: Vec<*mut c_void> = (0..64).map(|_| unsafe { mi_malloc(8) }).collect();
        assert!(blocks.iter().all(|p| !p.is_null() && *p as usize % 8 == 0));
        assert!(blocks.iter().any(|p| *p as usize % 16 == 8));
        for p in blocks {
            // SAFETY: from mi_malloc above, freed once.
            unsafe { mi_free(p) };
        }
    }

    /// The aligned calls serve what `natural` turns away: large alignments, and sizes that are
    /// not a multiple of their alignment.
    #[test]
    fn other_layouts_are_aligned_too() {
        for (size, align) in [
            (24, 16),
            (8, 16),
            (1, 32),
            (100, 64),
            (4096, 4096),
            (5000, 128),
        ] {
            assert!(!natural(size, align));
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: non-zero size; freed with the same layout.
            unsafe {
                let p = MiMalloc.alloc(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "{size} bytes, align {align}");
                fill(p, size, 7);
                assert!(filled(p, size, 7));
                MiMalloc.dealloc(p, layout);
                let z = MiMalloc.alloc_zeroed(layout);
                assert_eq!(z as usize % align, 0);
                assert!((0..size).all(|i| *z.add(i) == 0));
                MiMalloc.dealloc(z, layout);
            }
        }
    }

    /// Growing and shrinking keeps the bytes and the alignment, across the switch between the
    /// plain and the aligned calls (a size that stops or starts being a multiple of 16).
    #[test]
    fn realloc_keeps_bytes_and_alignment() {
        for align in [1, 8, 16, 64] {
            let mut size = align.max(16);
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: non-zero size.
            let mut p = unsafe { MiMalloc.alloc_zeroed(layout) };
            assert!(!p.is_null());
            // SAFETY: p holds `size` zeroed bytes.
            assert!((0..size).all(|i| unsafe { *p.add(i) } == 0));
            // SAFETY: p holds `size` bytes.
            unsafe { fill(p, size, 3) };
            for new in [24, 4000, 100_000, 40, 1_000_001, 48, 17] {
                let new = new.max(align);
                let old = Layout::from_size_align(size, align).unwrap();
                // SAFETY: p was allocated with `old`; new is non-zero.
                p = unsafe { MiMalloc.realloc(p, old, new) };
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "realloc to {new}, align {align}");
                let kept = size.min(new);
                // SAFETY: p holds at least `kept` bytes from before, and `new` in all.
                unsafe {
                    assert!(filled(p, kept, 3), "realloc to {new}, align {align}");
                    fill(p, new, 3);
                }
                size = new;
            }
            // SAFETY: p holds `size` bytes of this alignment.
            unsafe { MiMalloc.dealloc(p, Layout::from_size_align(size, align).unwrap()) };
        }
    }
}
