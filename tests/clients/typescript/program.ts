// A caller of the ingest API through openapi-fetch, typed by openapi-typescript from
// functions/ingest/openapi.yaml (tests/scripts/clients.sh generates the types, compiles this
// with tsc in strict mode, then runs it with node against the real function under
// `cargo lambda watch`).
//
// It does what a caller does, through the generated types only: sends an SMS, an email and a
// batch, reads each one back, lists them, cancels one, and handles two refusals through the
// one error type, `ApiError`. Any answer that differs from what the API promises fails it.
//
// Usage: node dist/program.js BASE_URL (the organization is a fresh one, sent in the
// local-only X-Organization-Id header that `make watch` accepts instead of a token).
import { randomUUID } from "node:crypto";
import { strict as assert } from "node:assert";
import createClient from "openapi-fetch";
import type { components, paths } from "./generated/api.js";

type ApiError = components["schemas"]["ApiError"];
type SendRequest = components["schemas"]["SendRequest"];
type BatchItem = components["schemas"]["BatchItem"];

// The error type of every refusal: the function's own `ApiError` (API Gateway's
// `{"message"}` answers have no `error`).
function apiError(error: unknown): ApiError {
  assert.ok(typeof error === "object" && error !== null && "error" in error, `not an ApiError: ${JSON.stringify(error)}`);
  return error as ApiError;
}

async function main(baseUrl: string): Promise<void> {
  const organization = randomUUID();
  const client = createClient<paths>({ baseUrl, headers: { "X-Organization-Id": organization } });

  const smsBody: SendRequest = { channel: "sms", to: "+14155550100", message: "Your code is 123456" };
  const key = `sms-${organization}`;
  const sms = await client.POST("/notifications", { body: smsBody, params: { header: { "Idempotency-Key": key } } });
  assert.equal(sms.response.status, 202, JSON.stringify(sms.error));
  assert.ok(sms.data);
  assert.equal(sms.data.status, "pending");

  const emailBody: SendRequest = {
    channel: "email",
    to: "someone@example.com",
    subject: "Your receipt",
    text: "Thank you.",
    html: "<p>Thank you.</p>",
  };
  const email = await client.POST("/notifications", { body: emailBody });
  assert.equal(email.response.status, 202, JSON.stringify(email.error));
  assert.ok(email.data);

  // the same Idempotency-Key and body again: the original job, nothing written
  const again = await client.POST("/notifications", { body: smsBody, params: { header: { "Idempotency-Key": key } } });
  assert.equal(again.response.status, 200, JSON.stringify(again.error));
  assert.equal(again.data?.id, sms.data.id);

  const items: BatchItem[] = [
    { channel: "sms", to: "+14155550101", message: "Batch one" },
    { channel: "email", to: "other@example.com", subject: "Batch two", text: "Hi" },
  ];
  const batch = await client.POST("/notifications/batch", { body: { notifications: items } });
  assert.equal(batch.response.status, 200, JSON.stringify(batch.error));
  assert.ok(batch.data);
  assert.deepEqual([batch.data.accepted, batch.data.invalid], [2, 0]);
  const stored = batch.data.results.flatMap((r) => ("id" in r ? [r.id] : []));
  assert.equal(stored.length, 2, JSON.stringify(batch.data.results));

  const ids = [sms.data.id, email.data.id, ...stored];
  const channels = ["sms", "email", "sms", "email"] as const;
  for (const [i, id] of ids.entries()) {
    const job = await client.GET("/notifications/{id}", { params: { path: { id } } });
    assert.equal(job.response.status, 200, JSON.stringify(job.error));
    assert.ok(job.data);
    assert.deepEqual([job.data.id, job.data.channel, job.data.status], [id, channels[i], "pending"]);
    assert.deepEqual(job.data.deliveries, []);
  }

  const page = await client.GET("/notifications", { params: { query: { status: "pending", limit: 10 } } });
  assert.equal(page.response.status, 200, JSON.stringify(page.error));
  assert.ok(page.data);
  assert.deepEqual(page.data.items.map((j) => j.id).sort(), [...ids].sort());
  assert.equal(page.data.next_cursor, null);

  const cancel = await client.POST("/notifications/{id}/cancel", { params: { path: { id: email.data.id } } });
  assert.equal(cancel.response.status, 200, JSON.stringify(cancel.error));
  assert.equal(cancel.data?.status, "cancelled");

  // refusals, each through the one error type
  const twice = await client.POST("/notifications/{id}/cancel", { params: { path: { id: email.data.id } } });
  assert.equal(twice.response.status, 409);
  assert.equal(apiError(twice.error).error.code, "invalid_transition");
  const invalid = await client.POST("/notifications", { body: { channel: "sms", to: "not a number", message: "x" } });
  assert.equal(invalid.response.status, 400);
  const refusal = apiError(invalid.error);
  assert.equal(refusal.error.code, "validation_failed");
  assert.deepEqual(refusal.error.fields.map((f) => f.field), ["to"]);

  // another organization sees none of it
  const stranger = createClient<paths>({ baseUrl, headers: { "X-Organization-Id": randomUUID() } });
  const missing = await stranger.GET("/notifications/{id}", { params: { path: { id: sms.data.id } } });
  assert.equal(missing.response.status, 404);
  assert.equal(apiError(missing.error).error.code, "not_found");

  console.log(`typescript client: ${ids.length} notifications sent, read, listed; 1 cancelled; 3 refusals typed`);
}

const baseUrl = process.argv[2];
if (!baseUrl) {
  console.error("usage: node dist/program.js BASE_URL");
  process.exit(2);
}
await main(baseUrl);
