SELECT attempt, provider, provider_message_id, error_code, error_message, outcome, fenced,
       started_at, finished_at
FROM notification_deliveries
WHERE job_id = $1
ORDER BY attempt
