-- Durable memory work: one row per answered turn whose memory is still to be written.
--
-- The graph's last node inserts the row before the run's final checkpoint, so before `end`
-- is sent; the replica that ran the turn works it at once, and any replica picks up a row
-- whose claim ran out (its holder was killed). The row is deleted in the same transaction
-- as the memory write, so a job lands once (memory/jobs.py, memory/writer.py).
--
-- It holds the user's id and the text of their message: erasure and memory resets delete
-- the user's rows, and thread deletion and retention delete a thread's rows with the
-- thread (every table with a `thread_id` column, threads/deletion.py).
--
-- Placement (docs/scaling.md): distributed by thread_id, co-located with the checkpoint
-- tables. The insert, the claim, the "is this run answered" check (a read of the thread's
-- checkpoints) and the delete each name one thread_id: single-shard, next to the
-- checkpoints they belong with. The pickup scan reads across shards (a background read,
-- a few times a minute per replica, never on a run's path).
--
-- `claimed_until` is the lease: a row is free for any replica once it is in the past.
-- Every timestamp is a parameter from the replica's clock (no now() in a SET).
create table if not exists memory_jobs (
    thread_id     text        not null,
    run_id        text        not null,
    tenant_id     text        not null,
    user_id       text        not null,
    locale        text        not null,
    user_text     text        not null,
    created_at    timestamptz not null,
    claimed_until timestamptz not null,
    claimed_by    text,
    attempts      integer     not null default 0,
    primary key (thread_id, run_id)
);

-- The pickup scan: free rows, oldest lease first.
create index if not exists memory_jobs_claimed_until_idx on memory_jobs (claimed_until);
-- Erasure and resets find a user's rows.
create index if not exists memory_jobs_user_idx on memory_jobs (tenant_id, user_id);
