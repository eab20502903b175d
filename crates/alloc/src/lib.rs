//! The two calls a leasehold replica makes of glibc's allocator, behind a safe interface (the
//! server crate forbids unsafe code). Elsewhere than glibc both do nothing.
//!
//! Why: glibc keeps freed memory in its arenas; 700 slow artifact transfers left a replica at
//! 285 MiB after they had all closed (27 MiB before them), and `malloc_trim` gave it back
//! (docs/security.md, issue 46 row 4).

/// Allocations of `bytes` and more are mapped on their own and unmapped when freed, always:
/// glibc would otherwise raise that threshold after the first such block is freed and serve
/// the next ones from its arenas, resident whole however little of them is used.
pub fn map_apart_from(bytes: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tunable of the allocator; it validates the value.
    unsafe {
        libc::mallopt(
            libc::M_MMAP_THRESHOLD,
            i32::try_from(bytes).unwrap_or(i32::MAX),
        );
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = bytes;
}

/// Give the free memory of every arena back to the system (`malloc_trim(0)`).
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes the allocator's own locks and releases only free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}
