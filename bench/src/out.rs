//! Where the report goes. The worker prints one metric line per run and the functions' JSON
//! logs go to stdout too (as in Lambda, so their cost is measured); the benchmark keeps the
//! real stdout for its own report and points file descriptor 1 at /dev/null.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::{Mutex, OnceLock};

static REPORT: OnceLock<Mutex<File>> = OnceLock::new();

/// Keeps the real stdout for the report; from now on fd 1 (println!, tracing) is /dev/null.
pub fn capture_stdout() -> std::io::Result<()> {
    std::io::stdout().flush()?;
    // SAFETY: dup/dup2 on descriptors this process owns; the duplicate is owned by the File.
    let report = unsafe {
        let fd = libc::dup(1);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        File::from_raw_fd(fd)
    };
    let null = File::options().write(true).open("/dev/null")?;
    // SAFETY: replaces fd 1 with /dev/null; both descriptors are valid.
    if unsafe { libc::dup2(null.as_raw_fd(), 1) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let _ = REPORT.set(Mutex::new(report));
    Ok(())
}

/// Writes one line of the report (to the real stdout).
pub fn line(text: &str) {
    match REPORT.get() {
        Some(report) => {
            let mut file = report.lock().unwrap_or_else(|e| e.into_inner());
            let _ = writeln!(file, "{text}");
            let _ = file.flush();
        }
        None => println!("{text}"),
    }
}

/// Progress, on stderr, with the time of day (UTC), to set beside the server's log.
pub fn progress(text: &str) {
    eprintln!("bench: {} {text}", chrono::Utc::now().format("%H:%M:%S"));
}

#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => { $crate::out::line(&format!($($arg)*)) };
}

#[macro_export]
macro_rules! step {
    ($($arg:tt)*) => { $crate::out::progress(&format!($($arg)*)) };
}
