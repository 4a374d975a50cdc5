//! Runs a measured child process: its output, exit status, wall time and
//! peak resident set size (`ru_maxrss` from `wait4`), with a timeout.
//!
//! Every child is forked, never vforked. Linux records the memory the
//! process had before `exec` in the child's `ru_maxrss`; a vforked child
//! (what `posix_spawn`, and so `Command::spawn` by default, does) execs
//! while borrowing this harness's memory, so its figure would be at least
//! the harness's own peak so far (the floor's Parquet rewrites, the data
//! generation). A forked child starts from a copy of what the harness
//! holds at that moment, the same for every engine and peer.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// What a finished child left.
#[derive(Debug)]
pub struct Finished {
    pub stdout: String,
    pub stderr: String,
    pub success: bool,
    pub timed_out: bool,
    /// The signal that ended the child, if one did.
    pub signal: Option<i32>,
    /// Peak RSS of the child in bytes.
    pub max_rss: u64,
}

/// Spawns `cmd`, waits (killing it after `timeout`) and reaps it with
/// `wait4` to read its resource usage.
pub fn run(mut cmd: Command, timeout: Duration) -> Result<Finished> {
    // SAFETY: the hook does nothing; having one makes the standard library
    // fork instead of spawning through vfork (see the module comment).
    unsafe {
        cmd.pre_exec(|| Ok(()));
    }
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning {cmd:?}"))?;
    let pid = child.id() as libc::pid_t;
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut timed_out = false;
    let (status, usage) = loop {
        let mut status: libc::c_int = 0;
        // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: pid is our own unreaped child; the pointers are valid.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (status, usage);
        }
        if r < 0 {
            bail!("wait4: {}", std::io::Error::last_os_error());
        }
        if !timed_out && start.elapsed() > timeout {
            timed_out = true;
            // SAFETY: pid is our unreaped child, so it cannot have been reused.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    // Linux reports ru_maxrss in KiB.
    let max_rss = usage.ru_maxrss.max(0) as u64 * 1024;
    let success = !timed_out && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let signal = libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status));
    // The std handle must not wait again: the child is already reaped.
    std::mem::forget(child);
    Ok(Finished {
        stdout,
        stderr,
        success,
        timed_out,
        signal,
        max_rss,
    })
}

/// This process's peak RSS since the last `reset_peak_rss`, in bytes
/// (`VmHWM`), if readable.
pub fn own_peak_rss() -> Option<u64> {
    own_status_bytes("VmHWM")
}

/// A size line of this process's `/proc/self/status` (`field`, in KiB
/// there), in bytes.
fn own_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| {
        l.strip_prefix(field)
            .is_some_and(|rest| rest.starts_with(':'))
    })?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Resets this process's peak RSS to its current RSS (Linux `clear_refs`).
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_peak_leaves_out_the_harness_peak() {
        // Raise this process's peak by 512 MiB, then give the memory back
        // (an allocation this large is its own mapping, returned on drop).
        let big = vec![1u8; 512 << 20];
        assert_eq!(
            big.iter().step_by(4096).map(|&b| b as u64).sum::<u64>(),
            128 << 10
        );
        drop(big);
        let now = own_status_bytes("VmRSS").unwrap();
        let done = run(Command::new("true"), Duration::from_secs(60)).unwrap();
        assert!(done.success);
        assert!(
            done.max_rss < now + (256 << 20),
            "the child of a {} MiB harness peaked at {} MiB",
            now >> 20,
            done.max_rss >> 20
        );
    }
}
