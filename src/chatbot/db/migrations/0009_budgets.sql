-- Spending budgets per tenant and per user of a tenant (src/chatbot/budgets/).
--
-- Placement (docs/scaling.md): all three tables are distributed by tenant_id, co-located
-- with the tenant group, so a reservation (one tenant's budgets, counters and reservations)
-- is one shard. Every statement names tenant_id by equality; times and periods come in as
-- parameters (the service's clock, injectable in tests), never now().

-- What an operator set. scope: 'tenant' (user_id ''), 'user' (one user), 'each_user' (the
-- default of every user of the tenant without a 'user' budget of the same period, user_id '').
create table if not exists budgets (
    tenant_id text    not null,
    scope     text    not null check (scope in ('tenant', 'user', 'each_user')),
    user_id   text    not null default '',
    period    text    not null check (period in ('day', 'month')),
    unit      text    not null check (unit in ('tokens', 'usd')),
    amount    numeric not null check (amount >= 0),
    primary key (tenant_id, scope, user_id, period)
);

-- What was spent in one period (starts: the UTC day, or the first day of the UTC month),
-- for the tenant (user_id '') or one user. Counted from the first call checked against a
-- budget of that subject and period; the row is also what concurrent reservations lock.
create table if not exists budget_counters (
    tenant_id    text    not null,
    user_id      text    not null,
    period       text    not null,
    starts       date    not null,
    spent_tokens bigint  not null default 0,
    spent_usd    numeric not null default 0,
    primary key (tenant_id, user_id, period, starts)
);

-- A model call's worst case, held against each counter it was checked against until the
-- call settles (deleted, its real usage added to spent) or expires (a killed replica's
-- reservation stops counting at expires_at and is deleted by the next cleanup).
create table if not exists budget_reservations (
    tenant_id  text        not null,
    id         uuid        not null,
    user_id    text        not null,
    period     text        not null,
    starts     date        not null,
    tokens     bigint      not null,
    usd        numeric     not null,
    expires_at timestamptz not null,
    primary key (tenant_id, id, user_id, period)
);
create index if not exists budget_reservations_counter
    on budget_reservations (tenant_id, user_id, period, starts);

-- Reserve `p_tokens` / `p_usd` against every budget that applies to (p_tenant, p_user), all
-- or nothing, in one call: each counter row is locked in (user_id, period) order (the
-- tenant's '' first), its spend plus unexpired reservations plus this worst case checked
-- against the budget, and only when every one fits are the reservations written.
-- Returns ('none') when no budget applies, ('reserved', ..., share) with the smallest share
-- of a tenant budget left after this reservation (null: no tenant budget), or ('refused',
-- scope, period) of the first budget that does not fit.
create or replace function chatbot_budget_reserve(
    p_tenant text, p_user text, p_id uuid, p_tokens bigint, p_usd numeric,
    p_day date, p_month date, p_now timestamptz, p_expires timestamptz
) returns table (outcome text, refused_scope text, refused_period text, tenant_share_left numeric)
language plpgsql as $$
declare
    b record;
    k record;
    held numeric;
    held_usd numeric;
    applies boolean := false;
    share numeric;
    left_share numeric;
begin
    for b in
        select x.scope, x.period, x.unit, x.amount,
               case when x.scope = 'tenant' then '' else p_user end as subject,
               case when x.period = 'day' then p_day else p_month end as starts
        from budgets x
        where x.tenant_id = p_tenant
          and (x.scope = 'tenant' or (x.scope = 'user' and x.user_id = p_user)
               or (x.scope = 'each_user' and not exists (
                   select 1 from budgets y
                   where y.tenant_id = p_tenant and y.scope = 'user' and y.user_id = p_user
                     and y.period = x.period)))
        order by subject, x.period
    loop
        applies := true;
        insert into budget_counters (tenant_id, user_id, period, starts)
        values (p_tenant, b.subject, b.period, b.starts)
        on conflict do nothing;
        select c.spent_tokens, c.spent_usd into k
        from budget_counters c
        where c.tenant_id = p_tenant and c.user_id = b.subject and c.period = b.period and c.starts = b.starts
        for update;
        select coalesce(sum(r.tokens), 0), coalesce(sum(r.usd), 0) into held, held_usd
        from budget_reservations r
        where r.tenant_id = p_tenant and r.user_id = b.subject and r.period = b.period
          and r.starts = b.starts and r.expires_at > p_now;
        if (b.unit = 'tokens' and k.spent_tokens + held + p_tokens > b.amount)
           or (b.unit = 'usd' and k.spent_usd + held_usd + p_usd > b.amount) then
            -- All or nothing: drop what this call reserved against the budgets before.
            delete from budget_reservations r where r.tenant_id = p_tenant and r.id = p_id;
            return query select 'refused'::text,
                (case when b.scope = 'tenant' then 'tenant' else 'user' end)::text, b.period::text, null::numeric;
            return;
        end if;
        insert into budget_reservations (tenant_id, id, user_id, period, starts, tokens, usd, expires_at)
        values (p_tenant, p_id, b.subject, b.period, b.starts, p_tokens, p_usd, p_expires);
        if b.scope = 'tenant' and b.amount > 0 then
            share := case when b.unit = 'tokens'
                          then (b.amount - k.spent_tokens - held - p_tokens) / b.amount
                          else (b.amount - k.spent_usd - held_usd - p_usd) / b.amount end;
            left_share := least(coalesce(left_share, share), share);
        end if;
    end loop;
    return query select (case when applies then 'reserved' else 'none' end)::text, null::text, null::text, left_share;
end
$$;

-- Settle a reservation: delete it and add the call's real usage to the counters it was held
-- against, locking them in the order a reservation does (no deadlock between the two).
-- Releasing (a failed call) is settling to zero. Nothing happens for an unknown id.
create or replace function chatbot_budget_settle(
    p_tenant text, p_id uuid, p_tokens bigint, p_usd numeric
) returns void
language plpgsql as $$
declare
    r record;
begin
    for r in
        select h.user_id, h.period, h.starts
        from budget_reservations h
        where h.tenant_id = p_tenant and h.id = p_id
        order by h.user_id, h.period
    loop
        update budget_counters c
        set spent_tokens = c.spent_tokens + p_tokens, spent_usd = c.spent_usd + p_usd
        where c.tenant_id = p_tenant and c.user_id = r.user_id and c.period = r.period and c.starts = r.starts;
    end loop;
    delete from budget_reservations h where h.tenant_id = p_tenant and h.id = p_id;
end
$$;
