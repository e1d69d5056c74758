-- name: AdvertiseReplica :exec
INSERT INTO replicas (id, relay_url) VALUES (@id, @relay_url)
ON CONFLICT (id) DO UPDATE SET relay_url = EXCLUDED.relay_url, seen_at = now();

-- name: PeerReplicas :many
SELECT relay_url FROM replicas
WHERE id <> @self AND seen_at > now() - make_interval(secs => @fresh_seconds::float8)
ORDER BY seen_at DESC;

-- name: ForgetReplica :exec
DELETE FROM replicas WHERE id = @id;

-- name: PruneReplicas :execrows
DELETE FROM replicas WHERE seen_at < now() - make_interval(secs => @keep_seconds::float8);
