// The benchmark's peer: graphile-worker draining no-op jobs, with its batching options on.
// Driven by bench/src/peer.rs:
//   node drain.js setup   install graphile-worker's schema into PEER_DATABASE_URL
//   node drain.js work    drain every due job once (runOnce), then print {"start_ms","end_ms"}
//   node drain.js soak    run a worker for PEER_SOAK_SECS seconds, printing a line
//                         `claim <epoch ms> <ms> <rows>` for each of its claims (the
//                         SKIP LOCKED fetch, timed around the query's round trip)
// PEER_TASK=wait makes each job wait as a provider call would (a lognormal time, 30-80 ms for
// 9 jobs in 10, median 49 ms: the parameters of bench/src/worked.rs's WaitingDeliverer);
// unset, a job does nothing.
// The settings are the ones graphile-worker's own performance test uses for its published
// figure (perfTest/graphile.config.js): 24 concurrent jobs, a pool of 25, a local queue of 500
// (refetch delay 10 ms), completions and failures batched with a 0 ms delay.
"use strict";
const { Logger, run, runMigrations, runOnce } = require("graphile-worker");

// Times every claim graphile-worker makes (its getJobs statement, the one with SKIP LOCKED),
// from the query's call to its answer, as the bench times ours around `JobStore::claim`.
function timeClaims() {
  const { Client } = require("pg");
  const query = Client.prototype.query;
  Client.prototype.query = function (config, ...rest) {
    const text = typeof config === "string" ? config : config && config.text;
    const result = query.call(this, config, ...rest);
    if (!text || !/skip\s+locked/i.test(text) || !result || typeof result.then !== "function") {
      return result;
    }
    const started = process.hrtime.bigint();
    return result.then((res) => {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      process.stdout.write(`claim ${Date.now()} ${ms.toFixed(3)} ${res ? res.rowCount : 0}\n`);
      return res;
    });
  };
}

const connectionString = process.env.PEER_DATABASE_URL;
const concurrentJobs = Number(process.env.PEER_CONCURRENCY || 24);
const localQueueSize = Number(process.env.PEER_LOCAL_QUEUE || 500);

const preset = {
  worker: {
    connectionString,
    concurrentJobs,
    maxPoolSize: concurrentJobs + 1,
    localQueue: { size: localQueueSize, refetchDelay: { durationMs: 10 } },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  },
};
// quiet: only warnings and errors reach stderr
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") process.stderr.write(`graphile-worker: ${message}\n`);
});

async function main() {
  if (!connectionString) throw new Error("PEER_DATABASE_URL is not set");
  const mode = process.argv[2];
  if (mode === "setup") {
    await runMigrations({ connectionString, logger });
    return;
  }
  if (mode !== "work" && mode !== "soak") {
    throw new Error(`unknown mode ${mode}: expected setup, work or soak`);
  }
  // Box-Muller: exp(mu + sigma * a standard normal), in ms
  const wait = () => {
    const u1 = 1 - Math.random();
    const u2 = Math.random();
    const normal = Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
    return new Promise((resolve) => setTimeout(resolve, Math.exp(3.8918 + 0.298 * normal)));
  };
  const taskList = { noop: process.env.PEER_TASK === "wait" ? wait : async () => {} };
  if (mode === "soak") {
    timeClaims();
    const runner = await run({ preset, taskList, noHandleSignals: true, logger });
    await new Promise((resolve) => setTimeout(resolve, Number(process.env.PEER_SOAK_SECS) * 1000));
    await runner.stop();
    return;
  }
  const start = Date.now();
  await runOnce({ preset, taskList, noHandleSignals: true, logger });
  const end = Date.now();
  process.stdout.write(JSON.stringify({ start_ms: start, end_ms: end }) + "\n");
}

main().catch((err) => {
  process.stderr.write(`graphile-worker peer failed: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
