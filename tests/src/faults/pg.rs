//! The suite's own PostgreSQL cluster, stopped and started again (scenario 2). Never
//! `DATABASE_URL`'s server: `tests/scripts/faults.sh` starts one for the suite and names its
//! folder in `FAULTS_PG_DIR` and its binaries in `FAULTS_PG_BINDIR`.

use std::path::PathBuf;
use std::time::Duration;

pub struct PgControl {
    dir: PathBuf,
    bindir: PathBuf,
}

impl PgControl {
    pub fn from_env() -> Option<Self> {
        Some(Self {
            dir: PathBuf::from(std::env::var_os("FAULTS_PG_DIR")?),
            bindir: PathBuf::from(std::env::var_os("FAULTS_PG_BINDIR")?),
        })
    }

    /// `pg_ctl -D {dir}/data {args}`, as the postgres user when we are root.
    async fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let pg_ctl = self.bindir.join("pg_ctl");
        let root = std::process::Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false);
        let mut cmd = if root {
            let mut c = tokio::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&pg_ctl);
            c
        } else {
            tokio::process::Command::new(&pg_ctl)
        };
        cmd.arg("-D").arg(self.dir.join("data")).args(args);
        let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
            .await
            .map_err(|_| "pg_ctl timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_ctl {args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Stops the cluster (fast: sessions are cut), waits `outage`, starts it again with the
    /// options it ran with.
    pub async fn restart(&self, outage: Duration) -> Result<(), String> {
        let opts = std::fs::read_to_string(self.dir.join("data/postmaster.opts"))
            .map_err(|e| e.to_string())?;
        let opts = opts
            .trim()
            .split_once(' ')
            .map(|(_, o)| o)
            .unwrap_or("")
            .to_owned();
        self.pg_ctl(&["-m", "fast", "-w", "stop"]).await?;
        tokio::time::sleep(outage).await;
        let log = self.dir.join("server.log");
        let log = log.to_string_lossy();
        self.pg_ctl(&["-w", "-t", "60", "-l", &log, "-o", &opts, "start"])
            .await
    }
}
