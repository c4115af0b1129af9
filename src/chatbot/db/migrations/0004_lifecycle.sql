-- The lifecycle's service tables: memory resets, and the lease of the retention sweep.

-- When a user's memory was last reset (DELETE /v1/users/{id}/memory). A memory write runs
-- in one transaction that reads this row: work submitted before the reset never lands
-- (memory/resets.py). Erasure deletes the row with the rest of the user.
create table if not exists memory_resets (
    tenant_id  text        not null,
    user_id    text        not null,
    reset_at   timestamptz not null,
    primary key (tenant_id, user_id)
);

-- Periodic maintenance that one replica at a time may run (ops/sweeper.py): who holds it,
-- until when (a killed holder's lease runs out), and when it last finished, so the
-- replicas together run it once per interval.
create table if not exists maintenance_leases (
    name              text        primary key,
    holder            text,
    lease_until       timestamptz not null default '-infinity',
    last_finished_at  timestamptz
);

-- The locale of the token that rated a run (the user's, as the backend sent it), so the
-- feedback export can segment by cohort. Rows rated before this column existed have none.
alter table run_feedback add column if not exists locale text;
