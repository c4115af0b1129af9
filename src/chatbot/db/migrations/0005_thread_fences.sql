-- Fencing for the thread lock (db/locks.py, db/saver.py).
--
-- The thread lock is a session advisory lock on a connection shared by many runs. If that
-- connection drops mid-run, the lock is gone at once and another replica may take the
-- thread while the first run is still answering. Every acquisition of a thread lock sets a
-- fresh token here; every checkpoint write of a run checks, in its own transaction and
-- under a share lock on this row, that the token is still the run's. A run whose lock was
-- lost therefore cannot write after another holder took the thread, and a new holder's
-- token update waits for a write already under way: never two writers on one thread.
create table if not exists thread_fences (
    thread_id  text primary key,
    token      uuid not null
);

-- Raises SQLSTATE CB001 unless `p_token` is the thread's current fence token; holds a share
-- lock on the fence row until the calling transaction ends.
create or replace function chatbot_hold_fence(p_thread text, p_token uuid) returns void
language plpgsql as $$
begin
    perform 1 from thread_fences where thread_id = p_thread and token = p_token for share;
    if not found then
        raise exception 'the thread lock was lost to another holder' using errcode = 'CB001';
    end if;
end
$$;
