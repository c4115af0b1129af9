-- Run records (threads/record.py): what a run saw must stay showable after the knowledge
-- base changes, without copying text into every checkpoint.

-- System prompts by content hash: a run record keeps the hash, the text is stored once.
create table if not exists system_prompts (
    sha256         text        primary key,
    text           text        not null,
    first_used_at  timestamptz not null default now()
);

-- Versioned knowledge. A chunk row is never rewritten: a changed or removed document
-- supersedes its rows (superseded_at), and search sees only current ones. Old versions
-- stay readable for run records until retention or erasure prunes those no retained
-- run refers to (retrieval/versions.py).
alter table kb_documents add column if not exists removed_at timestamptz;  -- removed by an ingest

alter table kb_chunks add column if not exists version integer not null default 1;
alter table kb_chunks add column if not exists superseded_at timestamptz;
alter table kb_chunks drop constraint if exists kb_chunks_pkey;
alter table kb_chunks add primary key (tenant_id, chunk_id, version);
-- At most one current version of a chunk id; also what search joins on.
create unique index if not exists kb_chunks_current on kb_chunks (tenant_id, chunk_id) where superseded_at is null;
-- The full-text index covers current chunks only: superseded versions never slow search.
drop index if exists kb_chunks_tsv;
create index if not exists kb_chunks_tsv_current on kb_chunks using gin (tenant_id, tsv) where superseded_at is null;
create index if not exists kb_chunks_superseded on kb_chunks (superseded_at) where superseded_at is not null;
