-- The suppression lists' entries by reason, all organizations (`make queue`).
SELECT reason, count(*) AS entries
FROM suppressions
GROUP BY reason
ORDER BY reason
