-- the postgres store's grant and unlock statements (postgres/sql.go), pooler check off
\set k random(1, 1000000000)
SELECT pg_backend_pid(), CASE WHEN pg_backend_pid() <> 0 AND false THEN NULL WHEN pg_try_advisory_lock(:k) THEN nextval('dlm_bench_token') END, clock_timestamp(), CASE WHEN pg_current_xact_id_if_assigned() IS NULL THEN 'on' ELSE set_config('synchronous_commit', 'on', true) END;
SELECT pg_backend_pid(), CASE WHEN pg_backend_pid() = pg_backend_pid() THEN pg_advisory_unlock(:k) END;
