-- Starting a run on a thread in one statement (db/locks.py, `Locks.try_run`): the owner check,
-- the user's erasure key (shared), the thread lock, the fresh fence token and the owner read
-- under the lock. 0011 is taken by other changes; the numbers only order the files.
--
-- They were three round trips (owner check on the pool, the locks, then `chatbot_set_fence`);
-- across a network each costs a round trip before the first token. The order and the
-- decisions are the ones the service made in three steps:
-- - a thread another caller created is refused before any lock is touched (`ok` false, its
--   owner returned): requests refused anyway never make the owner's own runs meet a 409;
-- - the user's erasure key is taken shared first; an erasure holding it refuses the run
--   (`user_ok` false);
-- - the thread lock; refused: the shared hold is given back;
-- - granted: the fence token is set and the owner read again, under the lock (another
--   caller's first run may have created the thread since the first read).
-- A failure after the locks were taken gives both back before it is raised: session locks
-- outlive a failed statement, and a lock without its token would let the previous holder
-- keep writing.
--
-- Not a distributed function: on Citus it runs on the coordinator, where every lock session
-- is and where the advisory locks must live; its reads and the fence upsert each name one
-- thread_id and are routed to the worker holding the thread.
create or replace function chatbot_take_thread(p_thread text, p_token uuid, p_tenant text, p_user text)
returns table (ok boolean, user_ok boolean, owned boolean, tenant_id text, user_id text)
language plpgsql as $$
#variable_conflict use_column
declare
    v_owned boolean;
    v_tenant text;
    v_user text;
    v_thread_key bigint := hashtextextended('chatbot/thread/' || p_thread, 0);
    v_erase_key bigint := hashtextextended('chatbot/erase/' || p_tenant || '/' || p_user, 0);
begin
    select c.metadata ->> 'tenant_id', c.metadata ->> 'user_id' into v_tenant, v_user
    from checkpoints c
    where c.thread_id = p_thread and c.checkpoint_ns = ''
    order by c.checkpoint_id limit 1;
    v_owned := found;
    if v_owned and (v_tenant is distinct from p_tenant or v_user is distinct from p_user) then
        return query select false, true, true, v_tenant, v_user;
        return;
    end if;
    if not pg_try_advisory_lock_shared(v_erase_key) then
        return query select false, false, v_owned, v_tenant, v_user;
        return;
    end if;
    if not pg_try_advisory_lock(v_thread_key) then
        perform pg_advisory_unlock_shared(v_erase_key);
        return query select false, true, v_owned, v_tenant, v_user;
        return;
    end if;
    begin
        insert into thread_fences (thread_id, token) values (p_thread, p_token)
        on conflict (thread_id) do update set token = excluded.token;
        select c.metadata ->> 'tenant_id', c.metadata ->> 'user_id' into v_tenant, v_user
        from checkpoints c
        where c.thread_id = p_thread and c.checkpoint_ns = ''
        order by c.checkpoint_id limit 1;
        v_owned := found;
    exception when others then
        perform pg_advisory_unlock(v_thread_key);
        perform pg_advisory_unlock_shared(v_erase_key);
        raise;
    end;
    return query select true, true, v_owned, v_tenant, v_user;
end
$$;
