-- a cycle of plain advisory locks
\set k random(1, 1000000000)
SELECT pg_try_advisory_lock(:k);
SELECT pg_advisory_unlock(:k);
