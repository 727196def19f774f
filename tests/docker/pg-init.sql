-- Run once by the postgres image's entrypoint (as POSTGRES_USER=odbox,
-- a superuser) after creating odbox_test. Second database: two-shard tests.
CREATE DATABASE odbox_test2 OWNER odbox;
