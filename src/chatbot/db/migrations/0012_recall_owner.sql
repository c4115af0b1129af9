-- Recall's index names whom each turn was indexed for: the thread's owner (tenant, user).
--
-- Deletion, retention and erasure find a thread through its checkpoints; recall rows whose
-- thread has no checkpoint left (written by a run after it lost its lock, before recall's
-- writes passed the thread's fence) were found by nothing, and the next owner of the thread
-- id was given them. With the owner on each row, erasure finds the user's recall rows
-- whatever their thread holds, deletion and retention find rows of a thread whose
-- checkpoints are gone, and a run's recall tells another caller's rows from its own index
-- (recall/service.py).
--
-- Rows already stored take the owner of their thread's first checkpoint (its creator,
-- threads/_ownership.py). Rows of a thread without any checkpoint belong to a thread that
-- was deleted or erased: they go, with their term counts.
--
-- Placement (docs/scaling.md): both tables stay distributed by thread_id; the statements
-- below join them to `checkpoints` on thread_id only (co-located), and the owner index
-- serves erasure's scan, which is multi-shard like its scan of checkpoint metadata.
--
-- One `do` block: on a Citus cluster placed before this migration, a multi-command string
-- that alters a distributed table is refused ("cannot insert multiple commands into a
-- prepared statement", as Citus forwards the string); inside the block each statement
-- reaches the cluster on its own.
do $$
begin
    alter table thread_turns add column if not exists tenant_id text;
    alter table thread_turns add column if not exists user_id text;

    update thread_turns t
    set tenant_id = o.tenant_id, user_id = o.user_id
    from (
        select distinct on (thread_id) thread_id, metadata ->> 'tenant_id' as tenant_id, metadata ->> 'user_id' as user_id
        from checkpoints
        where checkpoint_ns = ''
        order by thread_id, checkpoint_id
    ) as o
    where o.thread_id = t.thread_id and t.tenant_id is null;

    delete from thread_turns where tenant_id is null or user_id is null;
    delete from thread_terms s where not exists (select 1 from thread_turns t where t.thread_id = s.thread_id);

    alter table thread_turns alter column tenant_id set not null;
    alter table thread_turns alter column user_id set not null;

    create index if not exists thread_turns_owner on thread_turns (tenant_id, user_id);
end
$$;
