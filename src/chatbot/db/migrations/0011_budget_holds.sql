-- A budget admits what it can afford (src/chatbot/budgets/service.py): a model call holds its
-- counted input plus the output it may still produce, that output lowered to what every
-- applicable budget has left, and the same hold is resized in place when the call is sized
-- (a run holds a small share at its start, its window's count at the model step).
--
-- `chatbot_budget_hold` replaces the hold `p_id` has (none, the first time) by p_tokens /
-- p_usd plus g output tokens (g * p_usd_per_out): at most p_out_max, and of the output
-- room every applicable budget has left, a fair share: the room divided among this call and
-- the other live holds on the budget (alone, the call may take all of it; beside 9 others, a
-- tenth), but never less than p_out_min while the room holds that much. Refused when the
-- room is under p_out_min, the existing hold then left as it was (its call may have been
-- billed; its settlement needs the rows). Counters are locked in
-- (subject, period) order, as 0009's functions lock them: no deadlock between the three.
-- A currency budget cannot price a call of a model without a price (p_priced false): the
-- call is refused with outcome 'unpriced' instead of passing uncounted.
-- Returns (outcome, refused_scope, refused_period, tenant_share_left, granted):
-- 'none' when no budget applies (nothing written), 'held', 'refused' or 'unpriced'.
create or replace function chatbot_budget_hold(
    p_tenant text, p_user text, p_id uuid, p_tokens bigint, p_usd numeric,
    p_out_max bigint, p_out_min bigint, p_usd_per_out numeric, p_priced boolean,
    p_day date, p_month date, p_now timestamptz, p_expires timestamptz
) returns table (outcome text, refused_scope text, refused_period text, tenant_share_left numeric, granted bigint)
language plpgsql as $$
declare
    b record;
    k record;
    held numeric;
    held_usd numeric;
    holders bigint;
    applies boolean := false;
    room numeric;
    fits numeric := p_out_max;
    share numeric := p_out_max;
    tightest_scope text;
    tightest_period text;
    tenant_units text[] := '{}';
    tenant_amounts numeric[] := '{}';
    tenant_rooms numeric[] := '{}';
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
        if b.unit = 'usd' and not p_priced then
            return query select 'unpriced'::text,
                (case when b.scope = 'tenant' then 'tenant' else 'user' end)::text, b.period::text,
                null::numeric, 0::bigint;
            return;
        end if;
        insert into budget_counters (tenant_id, user_id, period, starts)
        values (p_tenant, b.subject, b.period, b.starts)
        on conflict do nothing;
        select c.spent_tokens, c.spent_usd into k
        from budget_counters c
        where c.tenant_id = p_tenant and c.user_id = b.subject and c.period = b.period and c.starts = b.starts
        for update;
        -- What others hold: this hold's own rows are what it replaces.
        select coalesce(sum(r.tokens), 0), coalesce(sum(r.usd), 0), count(*) into held, held_usd, holders
        from budget_reservations r
        where r.tenant_id = p_tenant and r.user_id = b.subject and r.period = b.period
          and r.starts = b.starts and r.expires_at > p_now and r.id <> p_id;
        if b.unit = 'tokens' then
            room := b.amount - k.spent_tokens - held - p_tokens;
        elsif p_usd_per_out > 0 then
            room := floor((b.amount - k.spent_usd - held_usd - p_usd) / p_usd_per_out);
        elsif b.amount - k.spent_usd - held_usd - p_usd >= 0 then
            room := p_out_max;
        else
            room := -1;
        end if;
        if room < fits then
            fits := room;
            tightest_scope := case when b.scope = 'tenant' then 'tenant' else 'user' end;
            tightest_period := b.period;
        end if;
        share := least(share, floor(room / (1 + holders)));
        if b.scope = 'tenant' and b.amount > 0 then
            tenant_units := tenant_units || b.unit::text;
            tenant_amounts := tenant_amounts || b.amount;
            tenant_rooms := tenant_rooms || case when b.unit = 'tokens' then b.amount - k.spent_tokens - held - p_tokens
                                                 else b.amount - k.spent_usd - held_usd - p_usd end;
        end if;
    end loop;
    if not applies then
        return query select 'none'::text, null::text, null::text, null::numeric, p_out_max;
        return;
    end if;
    if fits < p_out_min then
        return query select 'refused'::text, tightest_scope, tightest_period, null::numeric, 0::bigint;
        return;
    end if;
    fits := least(fits, greatest(p_out_min, share));
    delete from budget_reservations r where r.tenant_id = p_tenant and r.id = p_id;
    for b in
        select x.period,
               case when x.scope = 'tenant' then '' else p_user end as subject,
               case when x.period = 'day' then p_day else p_month end as starts
        from budgets x
        where x.tenant_id = p_tenant
          and (x.scope = 'tenant' or (x.scope = 'user' and x.user_id = p_user)
               or (x.scope = 'each_user' and not exists (
                   select 1 from budgets y
                   where y.tenant_id = p_tenant and y.scope = 'user' and y.user_id = p_user
                     and y.period = x.period)))
    loop
        insert into budget_reservations (tenant_id, id, user_id, period, starts, tokens, usd, expires_at)
        values (p_tenant, p_id, b.subject, b.period, b.starts, p_tokens + fits, p_usd + fits * p_usd_per_out,
                p_expires);
    end loop;
    for i in 1 .. coalesce(array_length(tenant_units, 1), 0) loop
        left_share := least(coalesce(left_share, 1), (tenant_rooms[i]
            - case when tenant_units[i] = 'tokens' then fits else fits * p_usd_per_out end) / tenant_amounts[i]);
    end loop;
    return query select 'held'::text, null::text, null::text, left_share, fits::bigint;
end
$$;
