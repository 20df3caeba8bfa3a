SELECT status::text FROM notification_jobs WHERE id = $1 AND organization_id = $2
