-- D: the current schema (applied first, migrations/*.sql) with the claim kept HOT.
-- The claim no longer changes an indexed column: it sets claim_token, claimed_at, attempts
-- and tries only, and leaves status (pending/failed) and updated_at alone, so the new row
-- version can stay on its page with no index entry (a HOT update). "processing" becomes
-- claim_token IS NOT NULL: the claim skips such rows, and the sweeper finds stuck ones
-- through the claimable index (they are due) instead of notification_jobs_processing, whose
-- predicate (status = 'processing') is never true any more. The completion still changes
-- status and updated_at (final status, listing by status, retention), so it is not HOT.
-- fillfactor 50: a page keeps room for a second version of each of its rows.
DROP INDEX notification_jobs_processing;
ALTER TABLE notification_jobs SET (fillfactor = 50);
