"""The ops package's own SQL: `maintenance_leases` (ops/_lease.py says what a lease is).

Statements as module constants beside the small functions that run them on a connection
the caller passes in (AGENTS.md, "Where SQL lives"). Each takes the lease's parameters:
`name`, `holder`, `lease` and `every` (seconds).
"""

from __future__ import annotations

from collections.abc import Mapping

from chatbot.db.connection_options import Conn

ACQUIRE_LEASE = """
insert into maintenance_leases as l (name, holder, lease_until)
values (%(name)s, %(holder)s, now() + make_interval(secs => %(lease)s))
on conflict (name) do update set holder = excluded.holder, lease_until = excluded.lease_until
where l.lease_until < now()
  and (l.last_finished_at is null or l.last_finished_at <= now() - make_interval(secs => %(every)s))
returning holder
"""
RENEW_LEASE = """
update maintenance_leases set lease_until = now() + make_interval(secs => %(lease)s)
where name = %(name)s and holder = %(holder)s and lease_until >= now()
returning holder
"""
FINISH_LEASE = """
update maintenance_leases set lease_until = '-infinity', last_finished_at = now()
where name = %(name)s and holder = %(holder)s
"""
GIVE_UP_LEASE = "update maintenance_leases set lease_until = '-infinity' where name = %(name)s and holder = %(holder)s"


async def acquire_lease(conn: Conn, params: Mapping[str, object]) -> bool:
    """Take the lease if it is free and the job is due; return whether the holder has it."""
    return await (await conn.execute(ACQUIRE_LEASE, params)).fetchone() is not None


async def renew_lease(conn: Conn, params: Mapping[str, object]) -> bool:
    """Extend the holder's lease; False when it already ran out."""
    return await (await conn.execute(RENEW_LEASE, params)).fetchone() is not None


async def finish_lease(conn: Conn, params: Mapping[str, object]) -> None:
    """Release the holder's lease and record the job as finished now."""
    await conn.execute(FINISH_LEASE, params)


async def give_up_lease(conn: Conn, params: Mapping[str, object]) -> None:
    """Release the holder's lease without recording a finished run."""
    await conn.execute(GIVE_UP_LEASE, params)
