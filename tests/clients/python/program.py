"""A caller of the ingest API through the Python client that openapi-python-client generates
from functions/ingest/openapi.yaml (tests/scripts/clients.sh generates it, then runs this
against the real function under `cargo lambda watch`).

It does what a caller does, through the client's typed models only: sends an SMS, an email and
a batch, reads each one back, lists them, cancels one, and handles two refusals through the
client's one error type, `ApiError`. Any answer that differs from what the API promises fails
it (an exception, or an AssertionError naming what differed).

Usage: program.py BASE_URL (the organization is a fresh one, sent in the local-only
X-Organization-Id header that `make watch` accepts instead of a token).
"""

import sys
import uuid
from http import HTTPStatus

from notification_client import Client
from notification_client.api.notifications import (
    cancel_notification,
    create_notification,
    create_notification_batch,
    get_notification,
    list_notifications,
)
from notification_client.models import (
    ApiError,
    BatchEmail,
    BatchItemStored,
    BatchRequest,
    BatchResult,
    BatchSms,
    Channel,
    EmailRequest,
    ErrorCode,
    JobDetail,
    JobPage,
    JobStatus,
    JobSummary,
    SmsRequest,
)


def expect(kind, response, status):
    """The parsed answer, when it has `status` and the type the spec gives it."""
    assert response.status_code == status, (
        f"expected {status}, got {response.status_code}: {response.content[:500]!r}"
    )
    assert isinstance(response.parsed, kind), (
        f"expected a {kind.__name__}, got {type(response.parsed).__name__}: {response.parsed!r}"
    )
    return response.parsed


def main(base_url):
    organization = str(uuid.uuid4())
    client = Client(
        base_url=base_url,
        headers={"X-Organization-Id": organization},
        raise_on_unexpected_status=True,
    )

    sms = expect(
        JobSummary,
        create_notification.sync_detailed(
            client=client,
            body=SmsRequest(channel="sms", to="+14155550100", message="Your code is 123456"),
            idempotency_key=f"sms-{organization}",
        ),
        HTTPStatus.ACCEPTED,
    )
    assert sms.status == JobStatus.PENDING, sms
    email = expect(
        JobSummary,
        create_notification.sync_detailed(
            client=client,
            body=EmailRequest(
                channel="email",
                to="someone@example.com",
                subject="Your receipt",
                text="Thank you.",
                html="<p>Thank you.</p>",
            ),
        ),
        HTTPStatus.ACCEPTED,
    )

    # the same Idempotency-Key and body again: the original job, nothing written
    again = expect(
        JobSummary,
        create_notification.sync_detailed(
            client=client,
            body=SmsRequest(channel="sms", to="+14155550100", message="Your code is 123456"),
            idempotency_key=f"sms-{organization}",
        ),
        HTTPStatus.OK,
    )
    assert again.id == sms.id, (again, sms)

    batch = expect(
        BatchResult,
        create_notification_batch.sync_detailed(
            client=client,
            body=BatchRequest(
                notifications=[
                    BatchSms(channel="sms", to="+14155550101", message="Batch one"),
                    BatchEmail(channel="email", to="other@example.com", subject="Batch two", text="Hi"),
                ]
            ),
        ),
        HTTPStatus.OK,
    )
    assert (batch.accepted, batch.invalid) == (2, 0), batch
    stored = [r for r in batch.results if isinstance(r, BatchItemStored)]
    assert [r.index for r in stored] == [0, 1], batch.results

    ids = [sms.id, email.id] + [r.id for r in stored]
    for job_id, channel in zip(ids, [Channel.SMS, Channel.EMAIL, Channel.SMS, Channel.EMAIL]):
        job = expect(JobDetail, get_notification.sync_detailed(job_id, client=client), HTTPStatus.OK)
        assert (job.id, job.channel, job.status) == (job_id, channel, JobStatus.PENDING), job
        assert job.deliveries == [], job

    page = expect(
        JobPage,
        list_notifications.sync_detailed(client=client, status=JobStatus.PENDING, limit=10),
        HTTPStatus.OK,
    )
    assert sorted(job.id for job in page.items) == sorted(ids), page.items
    assert page.next_cursor is None, page

    cancelled = expect(JobSummary, cancel_notification.sync_detailed(email.id, client=client), HTTPStatus.OK)
    assert cancelled.status == JobStatus.CANCELLED, cancelled

    # refusals, each through the one error type
    refused = expect(ApiError, cancel_notification.sync_detailed(email.id, client=client), HTTPStatus.CONFLICT)
    assert refused.error.code == ErrorCode.INVALID_TRANSITION, refused
    invalid = expect(
        ApiError,
        create_notification.sync_detailed(
            client=client, body=SmsRequest(channel="sms", to="not a number", message="x")
        ),
        HTTPStatus.BAD_REQUEST,
    )
    assert invalid.error.code == ErrorCode.VALIDATION_FAILED, invalid
    assert [f.field for f in invalid.error.fields] == ["to"], invalid.error.fields

    # another organization sees none of it
    stranger = Client(base_url=base_url, headers={"X-Organization-Id": str(uuid.uuid4())})
    missing = expect(ApiError, get_notification.sync_detailed(sms.id, client=stranger), HTTPStatus.NOT_FOUND)
    assert missing.error.code == ErrorCode.NOT_FOUND, missing

    print(f"python client: {len(ids)} notifications sent, read, listed; 1 cancelled; 3 refusals typed")


if __name__ == "__main__":
    main(sys.argv[1])
