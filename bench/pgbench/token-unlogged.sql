-- plain advisory locks with a token from an unlogged sequence when granted (a crash restarts it)
\set k random(1, 1000000000)
SELECT CASE WHEN pg_try_advisory_lock(:k) THEN nextval('dlm_bench_token_unlogged') END;
SELECT pg_advisory_unlock(:k);
