-- Lift the suppression of a normalised recipient ($2) for the organization ($1).
DELETE FROM suppressions
WHERE organization_id = $1 AND recipient = $2
RETURNING recipient
