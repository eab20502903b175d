//! What a job inherits (contract v1.3): file descriptors 0, 1 and 2 only, whatever the runner
//! itself was started with (a runner started as `runner run 8<runner.json` would otherwise hand
//! its token to every job), in every confinement mode.
//!
//! [`close_on_exec_above_stderr`] marks every descriptor above 2 this process holds
//! close-on-exec (`close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`, or each one `/proc/self/fd` lists
//! on an older kernel). The runner calls it once at start, so no child (a job, git, bubblewrap,
//! the cgroup shell) inherits what the runner was given, and again right before each job is
//! spawned, so a descriptor some library opened without the flag since does not reach the job
//! either; what the runner opens itself is close-on-exec already (Rust's standard library and
//! tokio open everything with `O_CLOEXEC`). Marking, not closing: nothing the runner holds is
//! taken from it, and the standard library's own pipe that reports a failed exec stays open
//! until the exec. The job's 0, 1 and 2 are set by the spawn itself (standard input
//! `/dev/null`, or the runner's pipe when the payload has `stdin`). Nothing is passed to
//! bubblewrap by descriptor; a future `--args FD` or `--info-fd` would have to clear the flag
//! on that one descriptor after this runs.

/// Mark every descriptor above 2 of this process close-on-exec.
pub fn close_on_exec_above_stderr() {
    close_fds::set_fds_cloexec_threadsafe(3, &[]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The descriptor numbers `/proc/self/fd` lists whose close-on-exec flag is off.
    fn inheritable() -> Vec<i32> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|fd: &i32| {
                std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
                    .ok()
                    .and_then(|info| {
                        let flags = info.lines().find_map(|l| l.strip_prefix("flags:"))?;
                        i64::from_str_radix(flags.trim(), 8).ok()
                    })
                    .is_some_and(|flags| flags & 0o2000000 == 0)
            })
            .collect()
    }

    #[test]
    fn an_inheritable_descriptor_is_marked_close_on_exec() {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        // dup(2) clears the flag on the copy: a descriptor as a shell's `8<file` leaves it.
        let copy = nix::unistd::dup(&file).unwrap();
        assert!(inheritable().contains(&copy.as_raw_fd()));
        close_on_exec_above_stderr();
        assert!(!inheritable().contains(&copy.as_raw_fd()));
    }
}
