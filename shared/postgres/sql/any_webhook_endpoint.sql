-- Whether any organization has an enabled webhook endpoint: the worker keeps time for its
-- dispatch only then.
SELECT EXISTS (SELECT FROM webhook_endpoints WHERE disabled_at IS NULL) AS any
