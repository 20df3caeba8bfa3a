-- Which of these normalised recipients ($2) the organization ($1) has suppressed.
SELECT recipient
FROM suppressions
WHERE organization_id = $1 AND recipient = ANY($2::text[])
