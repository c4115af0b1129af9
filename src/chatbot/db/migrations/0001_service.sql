-- The service's own tables. Conversations live only in the checkpoint tables.

-- Run feedback for the evaluation dataset; one row per rated run, replaced on re-send.
create table if not exists run_feedback (
    thread_id   text not null,
    run_id      uuid not null,
    tenant_id   text not null,
    user_id     text not null,
    score       text not null check (score in ('up', 'down')),
    comment     text check (comment is null or char_length(comment) <= 2000),
    created_at  timestamptz not null default now(),
    updated_at  timestamptz not null default now(),
    primary key (thread_id, run_id)
);
create index if not exists run_feedback_user_idx on run_feedback (tenant_id, user_id);
create index if not exists run_feedback_updated_idx on run_feedback (updated_at);

-- Runs started per (tenant, user) and minute, shared by every replica. Rows are tiny and
-- old windows are deleted as new ones are counted.
create table if not exists run_rate_windows (
    tenant_id     text not null,
    user_id       text not null,
    window_start  timestamptz not null,
    runs          integer not null,
    primary key (tenant_id, user_id, window_start)
);

-- Erasure finds a user's threads by the (tenant, user) recorded in checkpoint metadata.
create index if not exists checkpoints_owner_idx
    on checkpoints ((metadata ->> 'tenant_id'), (metadata ->> 'user_id'))
    where checkpoint_ns = '';
