-- Token usage per tenant, day, model and kind of call: what `chatbot usage` reports.
--
-- Each run's calls are kept in its run record too, but records go with their thread
-- (retention, erasure); these totals outlive them, so they hold no user id, thread id or
-- text: a tenant, a day, a model name and counts. Placement (docs/scaling.md): distributed
-- by tenant_id; every write names it, and the upsert adds parameters (no now() in its SET).
create table if not exists model_usage_daily (
    tenant_id           text   not null,
    day                 date   not null,
    model               text   not null,
    kind                text   not null,
    calls               bigint not null default 0,
    input_tokens        bigint not null default 0,
    output_tokens       bigint not null default 0,
    cached_input_tokens bigint not null default 0,
    primary key (tenant_id, day, model, kind)
);
