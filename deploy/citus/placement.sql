-- Generated from src/chatbot/db/placement.py (chatbot migrate --citus applies the same).
-- Apply with psql (autocommit: each statement on its own), on the coordinator, in the
-- service's database, after `chatbot migrate` and after registering the workers in that
-- database (citus_add_node: the node list is per database).

-- checkpoints: every saver statement names one thread_id
select create_distributed_table('checkpoints', 'thread_id', colocate_with => 'none')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'checkpoints'::regclass);

-- checkpoint_blobs: written and read with the thread's checkpoints
select create_distributed_table('checkpoint_blobs', 'thread_id', colocate_with => 'checkpoints')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'checkpoint_blobs'::regclass);

-- checkpoint_writes: written and read with the thread's checkpoints
select create_distributed_table('checkpoint_writes', 'thread_id', colocate_with => 'checkpoints')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'checkpoint_writes'::regclass);

-- thread_fences: the fence check shares the checkpoint write's transaction
select create_distributed_table('thread_fences', 'thread_id', colocate_with => 'checkpoints')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'thread_fences'::regclass);

-- run_feedback: feedback checks its run in the thread's checkpoints
select create_distributed_table('run_feedback', 'thread_id', colocate_with => 'checkpoints')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'run_feedback'::regclass);

-- memory_jobs: inserted by the run's last node, deleted with the memory write, per thread
select create_distributed_table('memory_jobs', 'thread_id', colocate_with => 'checkpoints')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'memory_jobs'::regclass);

-- thread_turns: recall indexes and searches one thread's turns beside its checkpoints
select create_distributed_table('thread_turns', 'thread_id', colocate_with => 'checkpoints')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'thread_turns'::regclass);

-- thread_terms: the term frequencies of one thread's turns, written and read with them
select create_distributed_table('thread_terms', 'thread_id', colocate_with => 'checkpoints')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'thread_terms'::regclass);

-- kb_documents: an ingest writes one tenant's documents
select create_distributed_table('kb_documents', 'tenant_id', colocate_with => 'none')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'kb_documents'::regclass);

-- kb_chunks: search reads one tenant's chunks; its foreign key to kb_documents includes tenant_id
select create_distributed_table('kb_chunks', 'tenant_id', colocate_with => 'kb_documents')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'kb_chunks'::regclass);

-- kb_terms: search reads one tenant's vocabulary
select create_distributed_table('kb_terms', 'tenant_id', colocate_with => 'kb_documents')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'kb_terms'::regclass);

-- run_rate_windows: one user's window is one row, counted on every run
select create_distributed_table('run_rate_windows', 'tenant_id', colocate_with => 'kb_documents')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'run_rate_windows'::regclass);

-- model_usage_daily: one upsert per model call, naming the tenant
select create_distributed_table('model_usage_daily', 'tenant_id', colocate_with => 'kb_documents')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'model_usage_daily'::regclass);

-- memory_resets: read by the user's memory writes, keyed by (tenant, user)
select create_distributed_table('memory_resets', 'tenant_id', colocate_with => 'kb_documents')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'memory_resets'::regclass);

-- budgets: a model call's check reads its tenant's budgets, user budgets included
select create_distributed_table('budgets', 'tenant_id', colocate_with => 'kb_documents')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'budgets'::regclass);

-- budget_counters: a reservation locks its tenant's and its user's counters in one shard
select create_distributed_table('budget_counters', 'tenant_id', colocate_with => 'kb_documents')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'budget_counters'::regclass);

-- budget_reservations: written and summed beside the counters they hold against
select create_distributed_table('budget_reservations', 'tenant_id', colocate_with => 'kb_documents')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'budget_reservations'::regclass);

-- store: one namespace (tenant, user, kind) is one shard
select create_distributed_table('store', 'prefix', colocate_with => 'none')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'store'::regclass);

-- system_prompts: a handful of rows, written once per prompt text
select create_reference_table('system_prompts')
where not exists (select 1 from pg_dist_partition where logicalrelid = 'system_prompts'::regclass);

-- chatbot_hold_fence(text, uuid): co-located with thread_fences by p_thread
select create_distributed_function('chatbot_hold_fence(text, uuid)', 'p_thread', colocate_with => 'thread_fences')
where not exists (select 1 from pg_dist_object where classid = 'pg_proc'::regclass and objid = 'chatbot_hold_fence(text, uuid)'::regprocedure and distribution_argument_index is not null);

-- chatbot_set_fence(text, uuid): co-located with thread_fences by p_thread
select create_distributed_function('chatbot_set_fence(text, uuid)', 'p_thread', colocate_with => 'thread_fences')
where not exists (select 1 from pg_dist_object where classid = 'pg_proc'::regclass and objid = 'chatbot_set_fence(text, uuid)'::regprocedure and distribution_argument_index is not null);

-- chatbot_budget_reserve(text, text, uuid, bigint, numeric, date, date, timestamptz, timestamptz): co-located with budgets by p_tenant
select create_distributed_function('chatbot_budget_reserve(text, text, uuid, bigint, numeric, date, date, timestamptz, timestamptz)', 'p_tenant', colocate_with => 'budgets')
where not exists (select 1 from pg_dist_object where classid = 'pg_proc'::regclass and objid = 'chatbot_budget_reserve(text, text, uuid, bigint, numeric, date, date, timestamptz, timestamptz)'::regprocedure and distribution_argument_index is not null);

-- chatbot_budget_settle(text, uuid, bigint, numeric): co-located with budgets by p_tenant
select create_distributed_function('chatbot_budget_settle(text, uuid, bigint, numeric)', 'p_tenant', colocate_with => 'budgets')
where not exists (select 1 from pg_dist_object where classid = 'pg_proc'::regclass and objid = 'chatbot_budget_settle(text, uuid, bigint, numeric)'::regprocedure and distribution_argument_index is not null);

-- chatbot_budget_hold(text, text, uuid, bigint, numeric, bigint, bigint, numeric, boolean, date, date, timestamptz, timestamptz): co-located with budgets by p_tenant
select create_distributed_function('chatbot_budget_hold(text, text, uuid, bigint, numeric, bigint, bigint, numeric, boolean, date, date, timestamptz, timestamptz)', 'p_tenant', colocate_with => 'budgets')
where not exists (select 1 from pg_dist_object where classid = 'pg_proc'::regclass and objid = 'chatbot_budget_hold(text, text, uuid, bigint, numeric, bigint, bigint, numeric, boolean, date, date, timestamptz, timestamptz)'::regprocedure and distribution_argument_index is not null);
