//! 7: the worker's CPU per job, and what a job costs in Lambda duration, from the worked
//! grid's cell closest to one Lambda invocation.

use serde::Serialize;

use crate::stats::rounded;
use crate::worked::Worked;

/// arm64 Lambda duration price, us-east-1, first pricing tier (USD per GB-second).
pub const ARM64_USD_PER_GB_SECOND: f64 = 0.000_013_333_4;
/// The worker's memory (template.yaml's WorkerMemorySize default).
pub const WORKER_MEMORY_MB: f64 = 512.0;
/// Lambda gives a function one full vCPU at 1,769 MB, proportionally less below.
pub const FULL_VCPU_MB: f64 = 1769.0;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Cpu {
    /// The cell the figures come from.
    pub cell: CellAt,
    #[serde(serialize_with = "rounded::<5, _>")]
    pub cpu_ms_per_job: f64,
    #[serde(serialize_with = "rounded::<5, _>")]
    pub best_cell_cpu_ms_per_job: f64,
    pub lambda: Lambda,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CellAt {
    pub workers: usize,
    pub batch: u32,
}

/// Lambda duration per job: the longer of the wall time and the CPU time slowed down to the
/// memory's share of a vCPU.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Lambda {
    pub arch: &'static str,
    pub usd_per_gb_second: f64,
    pub memory_mb: f64,
    /// Wall time per job at the cell: 1,000 ÷ its jobs/s.
    #[serde(serialize_with = "rounded::<5, _>")]
    pub wall_ms_per_job: f64,
    /// How much slower the CPU runs at `memory_mb` than with a full vCPU.
    #[serde(serialize_with = "rounded::<3, _>")]
    pub cpu_throttling: f64,
    #[serde(serialize_with = "rounded::<5, _>")]
    pub billed_ms_per_job: f64,
    #[serde(serialize_with = "rounded::<4, _>")]
    pub usd_per_million_notifications: f64,
    pub model: &'static str,
}

impl Cpu {
    /// From the cell of 1 worker and the default batch (100) when measured, else any 1-worker
    /// cell, else the best.
    pub fn of(worked: &Worked) -> Self {
        let cell = worked
            .at(100, 1)
            .or_else(|| worked.grid.iter().find(|c| c.workers == 1))
            .unwrap_or(&worked.best);
        let cpu_ms = cell.cpu_ms_per_job;
        let wall_ms = 1000.0 / cell.jobs_per_sec;
        let throttling = (FULL_VCPU_MB / WORKER_MEMORY_MB).max(1.0);
        let billed_ms = wall_ms.max(cpu_ms * throttling);
        let usd_per_million =
            billed_ms / 1000.0 * (WORKER_MEMORY_MB / 1024.0) * ARM64_USD_PER_GB_SECOND * 1e6;
        Self {
            cell: CellAt {
                workers: cell.workers,
                batch: cell.batch,
            },
            cpu_ms_per_job: cpu_ms,
            best_cell_cpu_ms_per_job: worked.best.cpu_ms_per_job,
            lambda: Lambda {
                arch: "arm64",
                usd_per_gb_second: ARM64_USD_PER_GB_SECOND,
                memory_mb: WORKER_MEMORY_MB,
                wall_ms_per_job: wall_ms,
                cpu_throttling: throttling,
                billed_ms_per_job: billed_ms,
                usd_per_million_notifications: usd_per_million,
                model: "max(wall ms per job at 1 worker, CPU ms per job × 1769/memory MB) × memory GB × price; duration only",
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worked::Cell;

    fn cell(workers: usize, batch: u32, jobs_per_sec: f64, cpu_ms_per_job: f64) -> Cell {
        Cell {
            workers,
            batch,
            jobs_per_sec,
            cpu_ms_per_job,
            ..Cell::default()
        }
    }

    #[test]
    fn the_cost_comes_from_one_worker_at_batch_100_billed_at_the_longer_time() {
        let grid = vec![
            cell(1, 10, 5_000.0, 0.01),
            cell(1, 100, 10_000.0, 0.05),
            cell(2, 100, 20_000.0, 0.02),
        ];
        let worked = Worked {
            best: grid[2].clone(),
            grid,
            ..Worked::default()
        };
        let cpu = Cpu::of(&worked);
        assert_eq!((cpu.cell.workers, cpu.cell.batch), (1, 100));
        assert_eq!(cpu.best_cell_cpu_ms_per_job, 0.02);
        assert_eq!(cpu.lambda.wall_ms_per_job, 0.1);
        // 0.05 CPU-ms at 512/1769 of a vCPU takes longer than the 0.1 ms of wall time
        let billed = 0.05 * 1769.0 / 512.0;
        assert!((cpu.lambda.billed_ms_per_job - billed).abs() < 1e-12);
    }
}
