-- Setting a thread's fence token and reading the thread's owner, in one function call
-- (db/locks.py). 0008 and 0009 are taken by other changes; the numbers only order the files.
--
-- Under a thread lock just granted, the lock session gives the thread a fresh fence token
-- (0005) and reads who wrote the thread's first checkpoint (its owner: a run re-checks it
-- there, threads/_ownership.py). One statement did both with a writing CTE, which Citus
-- cannot route (it runs an INSERT in a CTE as a step of its own, then the read: two
-- coordinator-to-worker steps). This function is registered co-located with
-- `thread_fences` by `p_thread` (db/placement.py): called outside a transaction block, the
-- coordinator hands the whole call to the worker holding the thread, one step, and both
-- statements below run there on the thread's shards. On one Postgres it is the same two
-- statements in one round trip, as before.
create or replace function chatbot_set_fence(p_thread text, p_token uuid)
returns table (tenant_id text, user_id text)
language plpgsql as $$
#variable_conflict use_column
begin
    insert into thread_fences (thread_id, token) values (p_thread, p_token)
    on conflict (thread_id) do update set token = excluded.token;
    return query
        select c.metadata ->> 'tenant_id', c.metadata ->> 'user_id' from checkpoints c
        where c.thread_id = p_thread and c.checkpoint_ns = ''
        order by c.checkpoint_id limit 1;
end
$$;
